"""Where the suite runs: one decision, used by conftest, the tests, the power tool and the bench.

A visible CUDA device means native Triton on it; no GPU means Triton's CPU interpreter
(conftest sets TRITON_INTERPRET=1 before any kernel module is imported). The judge's cases are
built on this device, as the official tests build them on the chip under test.
"""

from __future__ import annotations

import torch


def suite_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
