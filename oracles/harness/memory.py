"""Memory limits on the CPU tier: a kernel or a case never takes the machine down.

Two limits, both set by `--memory-limit GIB` (default 4; 0 turns both off):

    process   each test process (the controller and every xdist worker) may hold at most GIB
              GiB of data: RLIMIT_DATA, the kernel's count of a process's private writable
              memory (heap, anonymous mmap: torch's and numpy's buffers alike). Past it an
              allocation fails inside the process -- torch raises "can't allocate memory",
              numpy and Python raise MemoryError -- instead of the machine running out and
              the kernel's OOM killer choosing a victim. A MemoryError inside a kernel call is
              that call's verdict (a fault, never a clean refusal); see describe_memory_error.
    per call  a kernel's own torch allocations on the CPU during one call (torch.empty*,
              zeros*, ones*, full* and the Tensor.new_* methods; what the sanitizers
              intercept) may total at most a quarter of it (1 GiB by default). Each one is sized
              on the meta device before anything is allocated; the one that would pass the
              limit raises AllocationLimitError, naming the call, its size and the limit, so
              the case fails with that message (`contract`: a fault, inside or outside the
              judge domain) and the run goes on.

The process limit is RLIMIT_DATA, not RLIMIT_AS: address space counts what torch, Triton and
the thread stacks reserve without using (a process that judged two small hc_head cases had
0.3 GB of data and a 2.4 GB peak of address space). It is set on the CPU tier only: the CUDA
driver maps large private ranges that RLIMIT_DATA would count. It is a soft limit, so a test process can still raise it (a nested
pytest run with a larger --memory-limit does). Triton's interpreter computes in numpy: its
arrays count toward the process limit, not the per-call one (they are the interpreter's, sized
by the kernel's block shapes, which Triton bounds).
"""

from __future__ import annotations

import sys

GIB = 1 << 30
DEFAULT_MEMORY_LIMIT_GIB = 4.0
CALL_SHARE = 4  # a call's own allocations may use 1/CALL_SHARE of the process limit


class AllocationLimitError(MemoryError):
    """A kernel's allocation during its call that would take its CPU allocations past the
    per-call limit: refused before anything was allocated."""


def limit_bytes(gib: float | None) -> int | None:
    """The process limit in bytes for `--memory-limit GIB` (None: no limit)."""
    if gib is None or gib <= 0:
        return None
    return int(gib * GIB)


def call_limit_bytes(gib: float | None) -> int | None:
    """The per-call limit on a kernel's own CPU allocations for `--memory-limit GIB`."""
    process = limit_bytes(gib)
    return None if process is None else process // CALL_SHARE


def check_memory_limit_option(gib) -> float:
    """argparse type of --memory-limit: a number of GiB, 0 for no limit."""
    import argparse
    try:
        value = float(gib)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--memory-limit {gib!r}: expected a number of GiB, e.g. 4 "
                                         f"(0: no limit)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--memory-limit {gib!r}: expected a finite number of GiB >= 0 "
                                         f"(0: no limit)")
    return value


def apply_process_limit(nbytes: int | None) -> int | None:
    """Set this process's soft RLIMIT_DATA to `nbytes` (None: leave it); return the limit now in
    force, or None when there is none or the platform has no such limit. Never raises the hard
    limit; a soft limit above the hard one is clamped to it."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    if not hasattr(resource, "RLIMIT_DATA"):
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if nbytes is not None:
        if hard != resource.RLIM_INFINITY:
            nbytes = min(nbytes, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (nbytes, hard))
        soft = nbytes
    return None if soft == resource.RLIM_INFINITY else soft


def process_limit() -> int | None:
    """The soft RLIMIT_DATA in force (None: none)."""
    return apply_process_limit(None)


def fmt_bytes(n: int) -> str:
    """'68719476736 bytes (64.0 GiB)'."""
    if n >= GIB:
        return f"{n} bytes ({n / GIB:.1f} GiB)"
    if n >= 1 << 20:
        return f"{n} bytes ({n / (1 << 20):.1f} MiB)"
    return f"{n} bytes"


def describe_memory_error(error: BaseException) -> str:
    """What to add to the message of a memory error raised during a kernel call: the process
    limit that was in force, when the error is not ours (ours names its limit already)."""
    if isinstance(error, AllocationLimitError):
        return ""
    text = str(error)
    if not isinstance(error, MemoryError) and "can't allocate memory" not in text:
        return ""
    limit = process_limit()
    if limit is None:
        return ""
    return f" (this process may hold at most {fmt_bytes(limit)} of data: RLIMIT_DATA, set by --memory-limit)"


def kernel_call_site(skip: tuple[str, ...]) -> str:
    """' at file.py:line' of the innermost frame outside torch and the paths in `skip` (the
    kernel's line that asked for the allocation), or ''."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in ("/torch/", "\\torch\\", *skip)):
            import os
            return f" at {os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
