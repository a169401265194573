"""Drawn cases on a GPU stop at --gate-budget even in the middle of a Triton compile.

The gate starts no drawn case it expects to end past the budget (oracles/gate/fuzz.py), but a case
in flight used to finish: one drawn case of an autotuned public hc_head picked a 32 x 8192 tile
whose compile took 29 s, and the drawn phase ended 21 s past a 30 s budget (H200, 2026-12-02).

Inside `compile_deadline(deadline)`, every Triton compile a launch needs runs on a background
thread (Triton's own AsyncCompileMode, the mechanism its parallel precompile uses) and the launch
waits for it only until `deadline` (time.monotonic()). Past it, the launch raises
`CompileOverBudget`, a BaseException so that neither the kernel's wrapper (`except Exception`) nor
run_kernel (which keeps the kernel's exceptions as verdicts) mistakes it for the kernel's error;
the gate then leaves the case unjudged, as it leaves any case it does not start. The compile goes
on in the background. On Triton 3.9 a later launch of the same specialization (a judge case, say)
waits for it; on Triton 3.6 the unfinished compile is never put in the JIT's cache, and a later
launch compiles again.

Only the waiting is bounded: the compile itself cannot be stopped, so a worker with nothing else
to do still waits for it at its exit (concurrent.futures joins its threads).
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout


class CompileOverBudget(BaseException):
    """A launch needed a compile that had not finished by the case's deadline."""


_EXECUTOR: ThreadPoolExecutor | None = None
_DEADLINE: list[float | None] = [None]  # the active deadline; None: wait as long as a compile takes
_FIRED: list[bool] = [False]  # a launch gave up on a compile inside the active block


class _DeadlineFuture(Future):
    """The future Triton's FutureKernel waits on: the wait ends at the active deadline."""

    def result(self, timeout=None):
        deadline = _DEADLINE[0]
        if deadline is not None and (timeout is None or time.monotonic() + timeout > deadline):
            try:
                return super().result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                _FIRED[0] = True
                raise CompileOverBudget("a Triton compile had not finished when the gate budget ran out") from None
        return super().result(timeout)


class _DeadlineExecutor:
    """Runs each compile on a shared thread pool and hands back a _DeadlineFuture for it."""

    def submit(self, fn, *args, **kwargs) -> Future:
        outer = _DeadlineFuture()
        inner = _executor().submit(fn, *args, **kwargs)

        def settle(done: Future) -> None:
            if done.exception() is not None:
                outer.set_exception(done.exception())
            else:
                outer.set_result(done.result())
        inner.add_done_callback(settle)
        return outer


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        # Several threads, whatever the cores: a compile given up on (it goes on) must not hold up
        # the next case's compiles, and a compile mostly waits (ptxas, LLVM without the GIL).
        _EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tritonfuzz-compile")
    return _EXECUTOR


def _deadline_mode_class():
    """AsyncCompileMode that stops waiting when the block is left by an exception (the deadline
    or anything else); None on a Triton without it."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode, active_mode
    except ImportError:
        return None

    class DeadlineCompileMode(AsyncCompileMode):
        def __exit__(self, exc_type, exc_value, traceback):
            """Never wait here (Triton's own exit waits for every compile, the one given up on
            too, and raises a failed compile's error a second time on Triton 3.6): a compile still
            running is left to finish in the background; a finished one is put in Triton's cache,
            its error, which the launch that needed it already met, not raised again."""
            active_mode.set(None)
            for future in list(self.raw_futures):
                kernel = self.future_kernels.get(getattr(future, "_key", None))
                if kernel is not None and future.done():
                    try:
                        kernel.result()
                    except BaseException:  # noqa: BLE001 -- the kernel's, already its verdict
                        pass
            self.raw_futures, self.future_kernels = [], {}
            return False

    return DeadlineCompileMode


@contextlib.contextmanager
def compile_deadline(deadline: float | None, *, enabled: bool = True):
    """Within the block, a launch waits for its compile until `deadline` (time.monotonic()) and
    then raises CompileOverBudget. No deadline, `enabled` False, a Triton without
    AsyncCompileMode, or another AsyncCompileMode already active: the block runs as it is."""
    mode_class = _deadline_mode_class() if enabled and deadline is not None else None
    if mode_class is None:
        yield
        return
    from triton.runtime._async_compile import active_mode
    if active_mode.get() is not None:
        yield
        return
    before = _DEADLINE[0], _FIRED[0]
    _DEADLINE[0], _FIRED[0] = deadline, False
    try:
        with mode_class(_DeadlineExecutor()):
            yield
    finally:
        _DEADLINE[0], _FIRED[0] = before


def deadline_fired() -> bool:
    """Whether a launch inside the active compile_deadline block gave up on a compile (a kernel
    wrapper may have swallowed the CompileOverBudget: its result is then not judged)."""
    return _FIRED[0]
