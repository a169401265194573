"""Every test of an implementation accounted for: the tests collected for each implementation,
recorded where the gate's controller finds them, and why a test that reported did not run.

Under pytest-xdist the controller never collects: it learns about a test from its reports, so a
test that was deselected, or that never started because the run stopped, would leave no trace
in the verdict table. Every process that collects (each xdist worker, or a run without xdist)
therefore writes, once collection is over, `collected.json` in the run's temporary folder
(oracles/harness/inflight.py): for each test that takes an implementation, its op and implementation,
and how many of each implementation's tests were deselected. Workers collect the same tests
(xdist requires it), so they write the same file; writes are atomic (a temporary file renamed
into place). The controller reads it at the end (oracles/gate/report.py ImplementationSummary).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

FILE = "collected.json"


def implementation_of(item) -> tuple[str, str] | None:
    """(op, implementation name) of a test item parametrized by `implementation`."""
    impl = getattr(getattr(item, "callspec", None), "params", {}).get("implementation")
    if impl is None or not hasattr(impl, "op"):
        return None
    return impl.op, impl.name


class CollectionRecorder:
    """A pytest plugin for the processes that collect: counts deselected tests per implementation
    and writes the record when collection is finished."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.deselected: Counter = Counter()

    def pytest_deselected(self, items):
        for item in items:
            key = implementation_of(item)
            if key is not None:
                self.deselected[key] += 1

    def pytest_collection_finish(self, session):
        tests = {item.nodeid: list(key) for item in session.items if (key := implementation_of(item))}
        write(self.folder, {"tests": tests,
                            "deselected": [[op, name, n] for (op, name), n in sorted(self.deselected.items())]})


def write(folder: Path, record: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".collected-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, folder / FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def not_run_reason(report) -> str:
    """A skipped test's reason (pytest's), or an error's message, in one short line."""
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        text = str(report.longrepr[2]).removeprefix("Skipped: ")
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        lines = str(report.longrepr or "").strip().splitlines()
        text = crash.message if crash is not None else lines[-1] if lines else ""
    text = " ".join(str(text).split())
    return text[:200] or "(no reason given)"


def read(folder: Path) -> tuple[dict[str, tuple[str, str]], Counter]:
    """(test id -> (op, implementation), deselected count per (op, implementation)); empty when no
    process recorded its collection (it stopped before, or never collected)."""
    try:
        record = json.loads((Path(folder) / FILE).read_text())
        tests = {nodeid: (op, name) for nodeid, (op, name) in record["tests"].items()}
        deselected = Counter({(op, name): n for op, name, n in record["deselected"]})
    except (OSError, ValueError, KeyError, TypeError):
        return {}, Counter()
    return tests, deselected
