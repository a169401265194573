"""How the suite runs its own tests (a run without --kernel): where its long tests go in xdist's
first hand-out, and the stacks of a self-test that does not end. conftest.py calls these."""

from __future__ import annotations

from oracles.platform.stacks import stacks_if_stuck  # noqa: F401  (conftest.py calls it from here)

# The suite's longest tests start first: gates and engines in a subprocess (15-90 s each on a
# 2-core CPU, up to 100 s beside 15 other workers on an H200) and the mutant properties; a long
# one handed out last set the suite's end.
LONG_FIRST = ("tests/suite/test_engine.py", "tests/suite/test_gate.py", "tests/suite/test_mutants.py")

# A self-test still running after this long prints every thread's stack (the CPU's longest test
# takes about 100 s): one correct variant's Triton compile that did not end kept the native suite
# from finishing for five sessions, read each time as a slow suite, until stacks were dumped by
# hand (tests/results/2026-12-04-h200-session14.md).
STACKS_AFTER_S = 300.0


def _file(item) -> str:
    return item.nodeid.split("::")[0]


def is_long(item) -> bool:
    return _file(item) in LONG_FIRST


def long_first(items: list) -> list:
    """`items` with the long files' tests first, in LONG_FIRST's order (stable otherwise)."""
    return sorted(items, key=lambda i: LONG_FIRST.index(_file(i)) if is_long(i) else len(LONG_FIRST))


def long_tests_apart(items: list, workers: int) -> list:
    """`items` (long tests first) with the first `workers` long tests at even places, each
    followed by a short one. xdist's load scheduler first hands each worker two consecutive tests,
    then one at a time (--maxschedchunk 1): two long tests side by side in that first hand-out ran
    one after the other in one worker (the engine's fixture test and its Redis test ended the
    native suite at 126 s where 88 s was possible, H200, 2026-12-04)."""
    long = [i for i in items if is_long(i)]
    short = [i for i in items if not is_long(i)]
    paired = min(workers, len(long), len(short))
    head = [item for pair in zip(long[:paired], short[:paired]) for item in pair]
    return head + long[paired:] + short[paired:]

