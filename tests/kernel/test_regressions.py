"""Replay every committed fixture against every implementation under test of its op.

A fixture is a minimized case that once failed; a correct kernel passes it. A corrupt fixture
fails its own test with a message naming the file, as tritonfuzz's error (the corpus's, never the
kernel's: a gate says ERROR, not FAIL); the others still run.
"""

from pathlib import Path

import pytest

from oracles.gate.fuzz import SuiteError
from strategies.case import CaseFormatError
from strategies.fixtures import fixture_files, load_fixture


def pytest_generate_tests(metafunc):
    if "fixture_file" not in metafunc.fixturenames:
        return
    from oracles.gate.plugin import implementations_under_test, ops_under_test
    root = Path(metafunc.config.getoption("regressions_dir"))
    params = []
    for op in ops_under_test(metafunc.config):
        for path in frozen_fixture_files(root, op):
            for impl in implementations_under_test(metafunc.config, op):
                params.append(pytest.param(path, impl, id=f"{op}/{path.stem}-{impl.name}",
                                           marks=getattr(pytest.mark, op)))
    if not params:
        params.append(pytest.param(None, None, id="no-fixtures",
                                   marks=pytest.mark.skip(reason=f"no fixtures under {root}")))
    metafunc.parametrize("fixture_file,implementation", params)


def frozen_fixture_files(root: Path, op: str) -> list[Path]:
    """The fixtures that existed when the run began (conftest records when, before workers
    start). Fixtures written during the run (a failure found by another test) must not change
    what a replacement worker collects: xdist stops a run whose workers collected different tests."""
    import os
    import time
    started = float(os.environ.get("_TRITONFUZZ_RUN_STARTED", time.time()))
    return [p for p in fixture_files(root, op) if p.stat().st_mtime < started]


@pytest.mark.tally("fixture")
def test_fixture_replays(fixture_file, implementation, fuzz):
    try:
        case, meta = load_fixture(fixture_file)
    except CaseFormatError as e:
        raise SuiteError(f"corrupt fixture, not the kernel's failure: {e}") from None
    fuzz.check(case, implementation)
