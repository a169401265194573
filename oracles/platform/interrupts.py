"""Stop signals taken as Ctrl-C: the gate, the engine and the power tool end through their
KeyboardInterrupt path (children stopped, tables printed, temporary files and daemons removed)
whether a person presses Ctrl-C or a shell's timeout, a CI runner or a judge's harness sends SIGTERM."""


def raise_keyboard_interrupt(signum, frame):
    """A signal handler: the signal becomes a KeyboardInterrupt in the main thread."""
    raise KeyboardInterrupt
