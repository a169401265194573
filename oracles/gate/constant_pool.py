"""The pool of local constants Hypothesis draws from, frozen: what a derandomized (ci) test draws
depends on the test alone, in the suite, in a gate and in oracles.tools.power's children alike."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def freeze_local_constants() -> None:
    """Make derandomized runs depend on nothing but the test.

    Hypothesis draws, 5% of the time, constants harvested from the source of every local module
    loaded so far (hypothesis.internal.conjecture.providers._get_local_constants). Which of this
    project's modules a worker has imported, and which kernel files tests have loaded from
    temporary folders, depends on the tests xdist gave it before: the same `ci` test then drew
    different cases in different runs (the mutant nan_scores_ranked_last was caught in 8 examples
    in one run and missed in 20 in another, after tests/suite/test_bench.py began importing two more
    modules). So every project module is imported now, the pool is computed once and frozen:
    later imports no longer change what a derandomized test draws. If a Hypothesis release
    moves that internal function, nothing is frozen (and nothing breaks).

    The pool leaves out installed packages that Hypothesis takes for local code: it tells them by
    a "/site-packages/" in their path, and packages installed elsewhere (the device runs' `pip
    install --target /tmp/site` on PYTHONPATH: pytest, xdist, HypoFuzz...) added their constants,
    so the same ci test drew other cases on the GPU than the CPU's simulation of the GPU sizes
    (gate_topk's torch_fallback_full_sort escaped there, H100, 2026-12-06). A kernel under test,
    loaded by its path, stays in the pool.
    """
    for folder in ("kernels", "oracles", "strategies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    harvest = getattr(providers, "_get_local_constants", None)
    if callable(harvest) and not getattr(harvest, "tritonfuzz_frozen", False):
        import warnings
        with warnings.catch_warnings():  # harvesting here, at configure time, is the point
            warnings.filterwarnings("ignore", message="Slow code in plugin")
            frozen = without_installed_packages()
            if frozen is None:  # Hypothesis's constants_ast moved: its own harvest, as it is
                frozen = harvest()

        def frozen_local_constants():
            return frozen
        frozen_local_constants.tritonfuzz_frozen = True
        providers._get_local_constants = frozen_local_constants


def without_installed_packages():
    """The constants of the local modules loaded now that are not installed packages: this
    project's, and modules loaded by their path (kernels under test). An installed package is
    one imported from a sys.path folder other than the project's. None if Hypothesis's internals
    moved."""
    try:
        from hypothesis.internal.constants_ast import constants_from_module, is_local_module_file
    except ImportError:
        return None
    installs = {Path(p).resolve() for p in sys.path if p and Path(p).is_dir()} - {ROOT}
    # the root conftest.py, which pytest loads and a power child does not: in the pool either way
    conftest = types.ModuleType("conftest")
    conftest.__file__ = str(ROOT / "conftest.py")
    pool = constants_from_module(conftest)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or not is_local_module_file(path):
            continue
        resolved = Path(path).resolve()
        if resolved.is_relative_to(ROOT) or not any(resolved.is_relative_to(d) for d in installs):
            pool |= constants_from_module(module)
    return pool
