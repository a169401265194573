"""Stop signals taken as Ctrl-C: the gate, the engine and the power tool end through their
KeyboardInterrupt path (children stopped, tables printed, temporary files and daemons removed)
whether a person presses Ctrl-C or a shell's timeout, a CI runner or a judge's harness sends SIGTERM.
A child started with start_new_session=True leads a process group of its own: signal_group reaches
whatever it started too."""

import os


def raise_keyboard_interrupt(signum, frame):
    """A signal handler: the signal becomes a KeyboardInterrupt in the main thread."""
    raise KeyboardInterrupt


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group that `pid` leads; nothing when the group is gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
