"""Every thread's Python stack, printed while the process goes on: where a run that will be killed,
or a test that does not end, was stuck.

Two stages. First a Python watchdog thread: it takes the GIL like any thread and reads
`sys._current_frames()`, consistent under it. `faulthandler.dump_traceback_later` alone reads the
running thread's frames without the GIL, and that dump itself can segfault a process that is still
busy, turning "timed out here" into "crashed" (tests/results/2026-12-06-session19.md). But a thread
stuck in C code that holds the GIL (a Triton compile that never ends) starves the watchdog; so
faulthandler stays armed `grace_s` later and speaks only then, when the stuck thread's frames no
longer move. The watchdog disarms it once it has printed.
"""
from __future__ import annotations

import contextlib
import faulthandler
import io
import sys
import threading
import traceback

GRACE_S = 2.0


def format_all_stacks() -> str:
    """The stacks of every thread but the caller's, most recent call first, faulthandler's layout."""
    me = threading.get_ident()
    blocks = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        summary = traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)
        lines = [f'  File "{f.filename}", line {f.lineno} in {f.name}' for f in summary]  # innermost first
        blocks.append(f"Thread 0x{ident:016x} (most recent call first):\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def _arm_faulthandler(after_s: float, out) -> bool:
    try:
        faulthandler.dump_traceback_later(after_s, exit=False, file=out)
        return True
    except (ValueError, OSError, AttributeError, io.UnsupportedOperation):  # no file descriptor
        return False


def print_stacks_after(after_s: float, file=None, grace_s: float = GRACE_S) -> threading.Timer:
    """Prints every thread's stack to `file` (default the process's stderr) after `after_s` seconds
    unless the returned timer is cancelled first (cancel_stacks does both stages). A daemon thread:
    it never keeps the process up."""
    out = file or sys.__stderr__
    armed = out is not None and _arm_faulthandler(after_s + grace_s, out)

    def dump():
        if out is None:
            return
        try:
            out.write(f"Still running after {after_s:g} s; the stacks:\n{format_all_stacks()}\n")
            out.flush()
        except (ValueError, OSError):  # the stream was closed in the meantime
            return
        if armed:
            faulthandler.cancel_dump_traceback_later()

    timer = threading.Timer(max(after_s, 0.0), dump)
    timer.daemon = True
    timer.armed_faulthandler = armed
    timer.start()
    return timer


def cancel_stacks(timer: threading.Timer) -> None:
    timer.cancel()
    if timer.armed_faulthandler:
        faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def stacks_if_stuck(after_s: float, file=None, grace_s: float = GRACE_S):
    """Inside, a block still running after `after_s` seconds prints every thread's stack."""
    timer = print_stacks_after(after_s, file, grace_s)
    try:
        yield
    finally:
        cancel_stacks(timer)
