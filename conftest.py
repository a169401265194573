"""tritonfuzz's pytest entry: decide the platform, then load the plugin.

The platform is decided here, first, before anything imports a kernel module: without a GPU,
Triton's CPU interpreter (TRITON_INTERPRET=1), which @triton.jit binds when it decorates. The
options, profiles, fixtures, hooks and the verdict table live in the plugin (oracles/gate/).
"""

import os

import pytest

from oracles.platform.device import decide_platform

decide_platform()

from oracles.gate import suite_run  # noqa: E402  (the suite's imports come after decide_platform)

pytest_plugins = ["oracles.gate.plugin"]


def pytest_configure(config):
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1  # after xdist's first hand-out, one test at a time


def pytest_collection_modifyitems(config, items):
    # after the plugin's own order: the beyond-2^31 cases stay last
    beyond = [i for i in items if "beyond_int32" in getattr(i, "fixturenames", ())]
    rest = suite_run.long_first([i for i in items if "beyond_int32" not in getattr(i, "fixturenames", ())])
    # every xdist worker collects and must compute the same order: the worker count is in its environment
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    items[:] = (suite_run.long_tests_apart(rest, workers) if workers > 1 else rest) + beyond


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # A gate (--kernel) prints no stacks: a user's kernel may compile or run that long, and its
    # budget is the gate's business.
    if item.config.getoption("kernel", None):
        yield
        return
    with suite_run.stacks_if_stuck(suite_run.STACKS_AFTER_S):
        yield
