"""How the suite runs its own tests (a run without --kernel): where its long tests go in xdist's
first hand-out, and the stacks of a self-test that does not end. conftest.py calls these."""

from __future__ import annotations

from oracles.platform.stacks import stacks_if_stuck  # noqa: F401  (conftest.py calls it from here)

# The suite's longest tests start first: gates and engines in a subprocess (15-90 s each on a
# 2-core CPU, up to 100 s beside 15 other workers on an H200) and the mutant properties; a long
# one handed out last set the suite's end. An entry is a file (all its tests) or one test
# function (all its parameters). The MPS gate tests lead: the sharded one was the native suite's
# longest (89 s of 168 s on an H100, 2026-12-06) and, as the only long test outside these files,
# was handed out wherever test_mps.py fell.
LONG_FIRST = ("tests/suite/test_mps.py::test_a_sharded_gate_under_mps_names_only_cases_that_fault_alone",
              "tests/suite/test_mps.py::test_under_mps_a_lost_context_anywhere_ends_the_worker_with_its_recent_cases",
              "tests/suite/test_engine.py", "tests/suite/test_gate.py", "tests/suite/test_mutants.py")

# A self-test still running after this long prints every thread's stack (the CPU's longest test
# takes about 100 s): one correct variant's Triton compile that did not end kept the native suite
# from finishing for five sessions, read each time as a slow suite, until stacks were dumped by
# hand (tests/results/2026-12-04-h200-session14.md).
STACKS_AFTER_S = 300.0


def _long_rank(item) -> int:
    """The place of the item's LONG_FIRST entry (its test function's, else its file's), or
    len(LONG_FIRST) for a short test."""
    function = item.nodeid.split("[")[0]
    for key in (function, function.split("::")[0]):
        if key in LONG_FIRST:
            return LONG_FIRST.index(key)
    return len(LONG_FIRST)


def is_long(item) -> bool:
    return _long_rank(item) < len(LONG_FIRST)


def long_first(items: list) -> list:
    """`items` with the long tests first, in LONG_FIRST's order (stable otherwise)."""
    return sorted(items, key=_long_rank)


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

