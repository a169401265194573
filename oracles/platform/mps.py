"""CUDA MPS for a sharded GPU gate: the shards share one GPU context scheduler instead of taking
turns, and what that changes for device faults.

Why: without MPS the GPU time-slices between processes; only one process's kernels run at a
time and every switch swaps the scheduling state. A fuzz example is many small kernels and host
syncs (the oracle, the checks, the bulk rows), so twelve shards mostly waited for their turn:
moe_fused_gate drew 26.2 examples/s in 12 shards and 120.7 with MPS, on one H200, same command
(tests/results/2026-12-06-session18.md).

What it changes: MPS delivers a fatal GPU fault (an out-of-bounds access, a device assert) to
every client on the GPU, without saying which one caused it, and accepts no new client until all
of them have exited. So under MPS a worker whose CUDA context is lost anywhere ends itself
(oracles/gate/fuzz.py), and the controller replays each device fault's case alone, without MPS,
before it names that case as the faulting one (oracles/harness/alone.py).

The gate starts a private MPS control daemon (its own pipe and log folder, so it never touches a
daemon someone else runs) when it draws in several shards on a GPU; the workers reach it through
their xdist spec's environment, the controller and the replays do not. One such daemon at a time
on a machine: a second gate meanwhile runs without MPS.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
MARKER_ENV = "_TRITONFUZZ_MPS"  # set in the controller and the workers while the gate's shards share the GPU by MPS
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # where clients look when PIPE_ENV is unset
START_TIMEOUT_S = 30.0


@dataclass
class PrivateMps:
    """A control daemon this run started: its folder (pipes and logs) and the machine-wide lock."""
    folder: Path
    lock: object  # the open lock file, held while the daemon runs

    @property
    def env(self) -> dict[str, str]:
        return {PIPE_ENV: str(self.folder / "pipe"), LOG_ENV: str(self.folder / "log")}


def running_daemon() -> str | None:
    """The pipe folder of an MPS control daemon this process's CUDA clients would join (its
    `control` socket exists), else None."""
    folder = os.environ.get(PIPE_ENV) or DEFAULT_PIPE_DIR
    return folder if (Path(folder) / "control").exists() else None


def start_private_mps() -> tuple[PrivateMps | None, str]:
    """Start a private control daemon; (daemon, "") or (None, why not)."""
    control = shutil.which(CONTROL)
    if control is None:
        return None, f"{CONTROL} is not on PATH"
    if running_daemon():
        return None, f"an MPS daemon already runs ({running_daemon()}): the shards join it"
    lock = open(Path(tempfile.gettempdir()) / "tritonfuzz-mps.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return None, "another tritonfuzz gate on this machine runs its MPS daemon"
    daemon = PrivateMps(Path(tempfile.mkdtemp(prefix="tritonfuzz-mps-")), lock)
    for folder in daemon.env.values():
        Path(folder).mkdir()
    try:
        done = subprocess.run([control, "-d"], env={**os.environ, **daemon.env}, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        done, why = None, f"{type(e).__name__}: {e}"
    if done is None or done.returncode != 0:
        why = why if done is None else (done.stderr or done.stdout).strip()[:300] or f"exit code {done.returncode}"
        _release(daemon)
        return None, f"{CONTROL} -d failed: {why}"
    return daemon, ""


def stop_private_mps(daemon: PrivateMps) -> None:
    """Ask the daemon to quit (it stops its server once the clients are gone) and free its folder."""
    control = shutil.which(CONTROL)
    if control is not None:
        try:
            subprocess.run([control], input="quit\n", env={**os.environ, **daemon.env}, capture_output=True,
                           text=True, timeout=START_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
    _release(daemon)


def _release(daemon: PrivateMps) -> None:
    shutil.rmtree(daemon.folder, ignore_errors=True)
    daemon.lock.close()


def with_worker_env(tx_specs: list[str], env: dict[str, str]) -> list[str]:
    """xdist's worker specs ("popen", ...) with `env` set in each worker (execnet's env:NAME=value):
    the workers join the daemon, the controller's own CUDA calls do not."""
    extra = "".join(f"//env:{name}={value}" for name, value in env.items())
    return [spec + extra for spec in tx_specs]


def under_mps() -> bool:
    return bool(os.environ.get(MARKER_ENV))


def without_mps_env(empty_folder: Path) -> dict[str, str]:
    """An environment whose CUDA clients run alone: pointed at an empty pipe folder, where no
    daemon answers (a client that reaches none runs without MPS), the marker removed."""
    Path(empty_folder).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in (MARKER_ENV, LOG_ENV)}
    env[PIPE_ENV] = str(empty_folder)
    return env
