"""The ops. Each op is one declared contract, `SPEC = OpSpec(...)` at the end of
oracles/ops/<op>.py, next to its reference and float64 oracle; everything else (the tests, the
gate, the minimizer, the benchmark, the power tool) iterates over `OPS` and branches on no op name.

Adding an op: kernels/<op>.py (the bundled kernels, IMPLEMENTATIONS), strategies/<op>.py (its
cases), oracles/ops/<op>.py (reference, oracle, checks, SPEC). The registry finds it here.

Op modules import torch, Hypothesis and the strategies, never Triton or a kernel, so the registry
can be imported before the platform decision (oracles/platform/device.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from strategies.case import input_numel

# A judge case runs under the CPU interpreter when its row inputs hold at most this many elements
# (the rest, the judge's bench sizes, run on a GPU): one rule for every op, sized so that the
# interpreter's slowest bundled design stays within seconds per case.
CPU_MAX_JUDGE_ELEMENTS = 150_000

BenchCase = tuple  # (label, size, counts toward the judge's bench average, build(size, device) -> inputs)


@dataclass(frozen=True)
class OpSpec:
    """One op's contract: what the judge calls, what a kernel returns, how it is judged and which
    cases it meets. Every callable takes and returns plain values (Cases, tensors, Checks)."""

    name: str
    params: tuple[str, ...]                  # the exact keyword signature the judge calls
    output_names: tuple[str, ...]            # the returned tuple, in order
    row_inputs: tuple[str, ...]              # inputs whose dim 0 is an independent row (a token)
    reference: Callable                      # the official PyTorch reference, operation for operation
    oracle64: Callable                       # the float64 oracle (what the checks compare against)
    verdict_checks: Callable                 # (case, outputs, reference, *, judge_exact) -> [Check]
    judge_domain: str                        # the inputs the judge sends, in words
    judge_domain_violations: Callable        # case -> [why it is outside the judge domain]
    cases: Callable                          # (**sizes[device]) -> Hypothesis strategy of Cases
    sizes: Mapping[str, Mapping[str, Any]]   # device -> keyword arguments of `cases`
    judge_cases: Callable                    # device -> the official test's cases, built as it builds them
    smaller_cases: Callable                  # case -> smaller cases (the minimizer's moves)
    bench_cases: Callable                    # () -> [BenchCase]: the official bench grid, then larger cases
    beyond_int32_bytes: int                  # GPU memory the beyond-2^31-element case needs
    beyond_int32_inputs: Callable            # () -> (inputs on cuda, rows the verdict checks)
    model_cases: Callable = tuple            # () -> cases at real models' configurations
    judge_tolerance_dtype: Any = None        # the dtype whose tolerance the judge applies (None: the output's)
    bench_goal_x_eager: float | None = None  # tuning goal: average speedup over eager at the bench grid
    bench_goal_copy_pct: tuple[int, float] | None = None  # tuning goal: (from size, % of copy bandwidth)
    tuning_sweep: Callable | None = None     # (device, sizes) -> [(case label, param, value, default, run, inputs)]
    notes: Sequence[str] = field(default_factory=tuple)

    @property
    def kernel_module(self):
        """kernels/<op>.py, imported on first use (after the platform decision)."""
        return importlib.import_module(f"kernels.{self.name}")

    def runs_on_cpu(self, case) -> bool:
        """Whether a judge case runs under the CPU interpreter (CPU_MAX_JUDGE_ELEMENTS)."""
        return sum(input_numel(case, name) for name in self.row_inputs) <= CPU_MAX_JUDGE_ELEMENTS

    def named_cases(self, which: str, device: str) -> Sequence:
        if which == "judge":
            return tuple(self.judge_cases(device))
        if which == "model":
            return tuple(self.model_cases())
        raise ValueError(f"cases={which!r}: expected 'judge' or 'model'")


def _discover() -> dict[str, OpSpec]:
    specs = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith("_"):
            continue
        spec = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SPEC", None)
        if not isinstance(spec, OpSpec) or spec.name != module.name:
            raise ImportError(f"oracles/ops/{module.name}.py must define SPEC = OpSpec(name={module.name!r}, ...)")
        specs[spec.name] = spec
    return specs


class _Registry(Mapping):
    """OPS: op name -> OpSpec, discovered on first use (importing this package imports no op)."""

    def __init__(self):
        self._specs: dict[str, OpSpec] | None = None

    def _all(self) -> dict[str, OpSpec]:
        if self._specs is None:
            self._specs = _discover()
        return self._specs

    def __getitem__(self, name: str) -> OpSpec:
        return self._all()[name]

    def __iter__(self) -> Iterable[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


OPS: Mapping[str, OpSpec] = _Registry()


def get_op(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None
