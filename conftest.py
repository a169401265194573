"""tritonfuzz's pytest entry: decide the platform, then load the plugin.

The platform is decided here, first, before anything imports a kernel module: without a GPU,
Triton's CPU interpreter (TRITON_INTERPRET=1), which @triton.jit binds when it decorates. The
options, profiles, fixtures, hooks and the verdict table live in the plugin (oracles/gate/).
"""

from oracles.platform.device import decide_platform

decide_platform()

pytest_plugins = ["oracles.gate.plugin"]


# The suite's longest tests start first: gates and engines in a subprocess (15-90 s each on a
# 2-core CPU, up to 100 s beside 15 other workers on an H200) and the mutant properties; a long
# one handed out last set the suite's end. xdist's load scheduler first hands each worker two
# consecutive tests, then one at a time (with --maxschedchunk 1, set here). Two long tests side by
# side in that first hand-out ran one after the other in one worker: the engine's fixture test
# and its Redis test ended the native suite at 126 s where 88 s was possible (H200, 2026-12-04).
# So in the first hand-out each long test is paired with a short one.
import faulthandler
import os
import sys

import pytest

LONG_FIRST = ("tests/suite/test_engine.py", "tests/suite/test_gate.py", "tests/suite/test_mutants.py")


def pytest_configure(config):
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1


def long_tests_apart(items: list, workers: int) -> list:
    """`items` (long tests first) with the first `workers` long tests at even places, each
    followed by a short one: xdist's first hand-out of two consecutive tests a worker then gives
    each worker one long test."""
    long = [i for i in items if i.nodeid.split("::")[0] in LONG_FIRST]
    short = [i for i in items if i.nodeid.split("::")[0] not in LONG_FIRST]
    paired = min(workers, len(long), len(short))
    head = [item for pair in zip(long[:paired], short[:paired]) for item in pair]
    return head + long[paired:] + short[paired:]


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)
    # after the plugin's own order (stable): the beyond-2^31 cases stay last
    beyond = [i for i in items if "beyond_int32" in getattr(i, "fixturenames", ())]
    rest = sorted((i for i in items if "beyond_int32" not in getattr(i, "fixturenames", ())), key=rank)
    # every xdist worker collects and must compute the same order: the worker count is in its environment
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    items[:] = (long_tests_apart(rest, workers) if workers > 1 else rest) + beyond


# A self-test still running after this long prints every thread's stack (the CPU's longest test
# takes about 100 s): one correct variant's Triton compile that never ended kept the native suite
# from finishing for five sessions, read each time as a slow suite, until stacks were dumped by
# hand (tests/results/2026-12-04-h200-session14.md). A gate (--kernel) prints none: a user's
# kernel may legitimately compile or run that long, and its budget is the gate's business.
STACKS_AFTER_S = 300


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.config.getoption("kernel", None):
        yield
        return
    faulthandler.dump_traceback_later(STACKS_AFTER_S, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
