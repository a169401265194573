"""Regression fixtures: tests/regressions/<op>/<content-hash>.json, one minimized failing case each.

A fixture holds the case (strategies/case.py's lossless JSON), the failing check and its
message, the kernel's name, path and sha256, library versions, the device, and the command that
replays it. Writes are atomic (a temporary file linked into place) and never overwrite a
different case: the name is the case's content hash, and an existing file with that name is
left alone. Safe with several pytest-xdist workers writing at once.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from strategies.case import Case, CaseFormatError, case_from_json, case_to_json

MAX_FIXTURE_BYTES = 512 * 1024 * 1024  # read into memory whole: bounded first
# Where fixtures are replayed from and written to unless --regressions-dir says otherwise.
DEFAULT_REGRESSIONS_DIR = Path(__file__).resolve().parents[1] / "tests" / "regressions"


def is_default_root(root: Path) -> bool:
    """Fixtures elsewhere than tests/regressions need --regressions-dir in their replay command."""
    return Path(root).resolve() == DEFAULT_REGRESSIONS_DIR


def versions() -> dict:
    import hypothesis
    import torch
    import triton
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "hypothesis": hypothesis.__version__}


def fixture_path(root: Path, case: Case) -> Path:
    return Path(root) / case.op / f"{case.content_hash()}.json"


def write_fixture(root: Path, case: Case, meta: dict) -> Path:
    """Write atomically; return the path of the fixture that holds this case (new or existing)."""
    path = fixture_path(root, case)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"case": case_to_json(case), **meta, "versions": versions(),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if the name exists: never overwrite
        except FileExistsError:
            pass  # same content hash: the same case is already recorded
    finally:
        os.unlink(tmp)
    return path


def load_fixture(path: Path) -> tuple[Case, dict]:
    """The case and its metadata; CaseFormatError naming the file on anything unreadable."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FIXTURE_BYTES:
            raise CaseFormatError(f"{path}: {size} bytes; a fixture may have at most {MAX_FIXTURE_BYTES}")
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise CaseFormatError(f"{path}: cannot read fixture: {e}") from None
    except json.JSONDecodeError as e:
        raise CaseFormatError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from None
    except RecursionError:
        raise CaseFormatError(f"{path}: JSON nested too deeply to be a fixture") from None
    if not isinstance(document, dict) or "case" not in document:
        raise CaseFormatError(f"{path}: expected an object with a 'case' field")
    try:
        case = case_from_json(document["case"], where=str(path))
    except CaseFormatError:
        raise
    if case.op != path.parent.name:
        raise CaseFormatError(f"{path}: case is for op {case.op!r} but lies under {path.parent.name}/")
    return case, {k: v for k, v in document.items() if k != "case"}


def fixture_files(root: Path, op: str | None = None) -> list[Path]:
    root = Path(root)
    pattern = f"{op}/*.json" if op else "*/*.json"
    return sorted(p for p in root.glob(pattern) if not p.name.startswith("."))
