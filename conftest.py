"""tritonfuzz's pytest entry: decide the platform, then load the plugin.

The platform is decided here, first, before anything imports a kernel module: without a GPU,
Triton's CPU interpreter (TRITON_INTERPRET=1), which @triton.jit binds when it decorates. The
options, profiles, fixtures, hooks and the verdict table live in the plugin (oracles/gate/).
"""

from oracles.platform.device import decide_platform

decide_platform()

pytest_plugins = ["oracles.gate.plugin"]


# The suite's longest tests start first: gates and engines in a subprocess (15-90 s each on a
# 2-core CPU, up to 250 s beside 15 other workers on an H200) and the mutant properties; a long
# one handed out last set the suite's end. xdist hands out tests in collection order, in chunks
# of a few unless --maxschedchunk says otherwise: one at a time, so that order is the schedule.
LONG_FIRST = ("tests/suite/test_engine.py", "tests/suite/test_gate.py", "tests/suite/test_mutants.py")


def pytest_configure(config):
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)
    # after the plugin's own order (stable): the beyond-2^31 cases stay last
    items.sort(key=lambda item: ("beyond_int32" in getattr(item, "fixturenames", ()), rank(item)))
