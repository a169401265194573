"""What happens to a failing case: a standalone message, minimization, a fixture, a replay command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernels.loader import Implementation
from oracles.differential import RunOptions, run_case
from oracles.registry import get_op
from oracles.verdict import Verdict
from strategies.case import Case
from strategies.fixtures import fixture_path, write_fixture
from strategies.minimize import minimize


class KernelCheckFailed(AssertionError):
    """A verdict with failing checks; the message stands alone."""


@dataclass
class Failure:
    case: Case
    implementation: Implementation
    verdict: Verdict
    options: RunOptions

    @property
    def check_names(self) -> set[str]:
        return {c.name for c in self.verdict.failures(judge_exact=self.options.judge_exact)}


def failure_message(case: Case, impl: Implementation, verdict: Verdict, options: RunOptions) -> str:
    failing = verdict.failures(judge_exact=options.judge_exact)
    head = f"{impl.op} / {impl.name}: {len(failing)} check(s) failed ({', '.join(c.name for c in failing)}) on {options.device}"
    label = f"\ncase {case.label}" if case.label else ""
    return f"{head}{label}\ncase: {case.summary()}\nfeatures: {', '.join(sorted(case.features)) or '-'}\n{verdict.render()}"


def still_fails(failure: Failure, candidate: Case) -> bool:
    """Does `candidate` fail one of the checks the original failed, on the same implementation?"""
    try:
        verdict = run_case(failure.implementation.op, failure.implementation.fn, candidate, failure.options)
    except Exception:
        return False  # a move that breaks the case (or the harness) is not a smaller failure
    names = {c.name for c in verdict.failures(judge_exact=failure.options.judge_exact)}
    return bool(names & failure.check_names)


def minimized(failure: Failure, *, budget_s: float) -> Failure:
    strategies = get_op(failure.implementation.op).strategies
    case = minimize(failure.case, lambda c: still_fails(failure, c),
                    smaller_cases=strategies.smaller_cases, budget_s=budget_s)
    verdict = run_case(failure.implementation.op, failure.implementation.fn, case, failure.options)
    return Failure(case, failure.implementation, verdict, failure.options)


def replay_command(path: Path, impl: Implementation | None, kernel_option: str | None, regressions_dir: str | None,
                   *, op: str | None = None, judge_exact: bool = False) -> str:
    # OPTION=VALUE forms: a bare path after a conftest option would be taken for pytest's rootdir.
    kernel = f" --kernel={op or impl.op}={kernel_option}" if kernel_option else ""
    where = f" --regressions-dir={regressions_dir}" if regressions_dir else ""
    exact = " --judge-exact" if judge_exact else ""
    return f"pytest{kernel}{where}{exact} tests/test_regressions.py -k {path.stem}"


def record_fixture(failure: Failure, root: Path, *, kernel_option: str | None,
                   custom_root: bool = False) -> tuple[Path, str]:
    """Write the failure as a fixture; return its path and the command that replays it."""
    case = failure.case
    replay = replay_command(fixture_path(root, case), failure.implementation, kernel_option,
                            str(root) if custom_root else None, judge_exact=failure.options.judge_exact)
    failing = failure.verdict.failures(judge_exact=failure.options.judge_exact)
    impl = failure.implementation
    meta = {
        "failure": {"checks": [c.name for c in failing], "message": failure.verdict.render()},
        "kernel": {"name": impl.name, "path": str(impl.path) if impl.path else None, "sha256": impl.sha256},
        "device": failure.options.device,
        "judge_exact": failure.options.judge_exact,
        "replay": replay,
    }
    return write_fixture(root, case, meta), replay
