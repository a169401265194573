"""Where the suite runs: one decision, made once, used by conftest, the tests, the power tool and
the bench.

A visible CUDA device means native Triton on it; no GPU means Triton's CPU interpreter. The
decision must come before any kernel module is imported: @triton.jit binds interpreter mode when
it decorates. The judge's cases are built on this device, as the official tests build them on
the chip under test.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def gpu_available() -> bool:
    return torch.cuda.is_available()


def suite_device() -> str:
    return "cuda" if gpu_available() else "cpu"


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def decide_platform() -> None:
    """Without a GPU, TRITON_INTERPRET=1 and the interpreter patched (bf16 arithmetic, launch
    forms); on a GPU, autotuners sample one config a key instead of benchmarking them all
    (oracles/platform/interpreter.py says why). Idempotent."""
    if not gpu_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if interpreted():
        from oracles.platform.interpreter import patch_interpreter
        patch_interpreter()
    elif gpu_available():
        from oracles.platform.interpreter import sample_autotuning_on_gpu
        sample_autotuning_on_gpu()


def gpu_lock_path(name: str) -> Path:
    """A lock file naming the current GPU by its UUID (a device index depends on each process's
    CUDA_VISIBLE_DEVICES): the processes of one machine that share that GPU share the lock."""
    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    return Path(tempfile.gettempdir()) / f"tritonfuzz-gpu-{uuid}-{name}.lock"


def cores_share(processes: int) -> int:
    """Threads for each of `processes` processes running at once on this machine's cores (at
    least 1). torch starts a thread per core in every process by default: 16 processes on 16
    cores ran 256 threads (xdist workers and power's children alike)."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))
