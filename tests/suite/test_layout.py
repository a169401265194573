"""The import graph runs one way: tests -> tools -> the gate plugin -> the harness -> platform and
submission -> the ops' contracts -> verdicts and tolerances -> strategies -> kernels. Nothing
imports conftest, and kernels/<op>.py imports nothing of the suite (it is submitted on its own).
Every import counts, at module level or inside a function."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Lowest first; a module may import its own layer or any lower one.
LAYERS = (
    ("kernels",),
    ("strategies",),
    ("oracles.tolerances", "oracles.verdict"),
    ("oracles.ops",),
    ("oracles.platform", "oracles.submission"),
    ("oracles.harness",),
    ("oracles.gate",),
    ("oracles.tools",),
)


def above(name: str, level: int) -> bool:
    other = layer(name)
    return other is not None and other > level


def layer(module: str) -> int | None:
    for level, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


SUITE_MODULES = sorted(p for folder in ("kernels", "strategies", "oracles") for p in (ROOT / folder).rglob("*.py")
                       if p.stat().st_size)  # empty package markers import nothing


@pytest.mark.parametrize("path", SUITE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_one_way(path):
    here = module_name(path)
    own = layer(here)
    assert own is not None, f"{here} is in no layer of this test: place it"
    upward = sorted(name for name in imported(path) if above(name, own) or name.split(".")[0] == "conftest")
    assert not upward, f"{here} (layer {LAYERS[own]}) imports a higher layer: {upward}"


def test_tests_do_not_import_conftest():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                 if any(name.split(".")[0] == "conftest" for name in imported(p))]
    assert not offenders


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The property above can fail: a harness module importing the gate plugin is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text("from oracles.gate.plugin import KERNELS\nimport conftest\n")
    names = imported(bad)
    assert {n for n in names if above(n, layer("oracles.harness.differential"))} == {
        "oracles.gate.plugin", "oracles.gate.plugin.KERNELS"}
    assert "conftest" in names
