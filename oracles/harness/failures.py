"""What happens to a failing case: its signature (which bug it is), a standalone message,
minimization, a fixture, a replay command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from oracles.submission.loader import Implementation
from oracles.harness.differential import RunOptions, run_case
from oracles.ops import get_op
from oracles.verdict import Check, Verdict
from strategies.case import BEYOND_INT32, Case
from strategies.fixtures import fixture_path, write_fixture
from strategies.minimize import minimize


class KernelCheckFailed(AssertionError):
    """A verdict with failing checks; the message stands alone."""


# Which check names a failure first, when a case fails several: memory and launch faults before
# contract, the choice before the values computed from it, the values before the judge's verdict.
PRIMARY_ORDER = ("device-fault", "launch", "red-zone", "poison", "inputs-unchanged", "gpu-compile", "contract", "indices",
                 "specials", "accuracy", "judge", "determinism")
_SIGNATURE_TYPES: dict[str, type] = {}


# The input class of a bug that its case shows only while the case holds NaN or inf: the same case
# with those elements set to 0 passes. No judge run meets it (the judge's inputs are always finite).
ONLY_NONFINITE = "only with NaN or inf inputs"


def failure_signature(failure: "Failure", run: Callable[[Case], Verdict] | None = None) -> str:
    """Which bug a failing case shows: its primary failing check and its input class (inside the
    judge domain, or which ways it lies outside; for a case holding NaN or inf, whether its finite
    twin fails too). Cases of one signature are the same bug to Hypothesis; distinct signatures
    are shrunk, reported and saved as fixtures separately. Computed once per failure. `run`: how
    the twin runs (the gate's guarded run; by default run_case, as the minimizer's candidates)."""
    if failure.signature is None:
        failure.signature = _signature(failure, run or (lambda case: run_case(
            failure.implementation.op, failure.implementation.fn, case, failure.options)))
    return failure.signature


def _signature(failure: "Failure", run: Callable[[Case], Verdict]) -> str:
    primary = primary_check(failure.check_names)
    where = input_class(failure.implementation.op, failure.case)
    # Not run again: after a device fault (the GPU may be gone, and a fault is the kernel's whatever
    # the values), nor for a few rows of an input beyond 2^31 elements (the bug needs the whole).
    if (primary == "device-fault" or failure.verdict.device_lost or BEYOND_INT32 in failure.case.features
            or not failure.case.nonfinite_inputs()):
        return f"{primary} ({where})"
    # A bug found on a case holding NaN rows may show on its finite rows too (a GPU case carries
    # thousands of rows, a few of them NaN): such a bug is the finite one, and a NaN-only bug of
    # the same check must not hide it (one signature keeps one failure and shrinks to one case).
    twin = failure.case.finite_twin()
    if twin is None:
        return f"{primary} ({where})"
    try:
        verdict = run(twin)
    except Exception:  # the harness could not judge the twin: say nothing about the values
        return f"{primary} ({where})"
    if verdict.device_lost:
        return f"{primary} ({where})"
    twin_checks = {c.name for c in verdict.failures(judge_exact=failure.options.judge_exact, strict=failure.options.strict)}
    failure.finite_twin = "fails" if twin_checks else "passes"
    if twin_checks:
        return f"{primary_check(twin_checks)} ({input_class(failure.implementation.op, twin)})"
    return f"{primary} ({where}; {ONLY_NONFINITE})"


def primary_check(names: set[str]) -> str:
    """The check that names a failure: the first of PRIMARY_ORDER that failed."""
    return next((n for n in PRIMARY_ORDER if n in names), min(names) if names else "?")


def input_class(op: str, case: Case) -> str:
    """Inside the judge domain, or the first way the case leaves it (the op lists dtype, then
    layout, then shapes): a float16 bug found at T = 0 and at T = 3 is one bug, not two."""
    outside = get_op(op).judge_domain_violations(case)
    return "judge domain" if not outside else f"outside the judge domain: {outside[0].split('=')[0]}"


def failure_exception(signature: str) -> type:
    """A KernelCheckFailed subclass per signature: Hypothesis tells bugs apart by exception type
    and raise site, so one bug never hides the next (each is shrunk and reported on its own)."""
    if signature not in _SIGNATURE_TYPES:
        name = "KernelCheckFailed_" + "".join(ch if ch.isalnum() else "_" for ch in signature).strip("_")
        _SIGNATURE_TYPES[signature] = type(name, (KernelCheckFailed,), {"signature": signature})
    return _SIGNATURE_TYPES[signature]


@dataclass
class Failure:
    case: Case
    implementation: Implementation
    verdict: Verdict
    options: RunOptions
    signature: str | None = field(default=None, compare=False, repr=False)  # failure_signature's, once known
    # The case with its NaN and inf set to 0 (Case.finite_twin), run by failure_signature: "fails",
    # "passes", or "" (no such values, or the twin was not run or not judged).
    finite_twin: str = field(default="", compare=False, repr=False)

    @property
    def check_names(self) -> set[str]:
        return {c.name for c in self.verdict.failures(judge_exact=self.options.judge_exact, strict=self.options.strict)}


def failure_message(case: Case, impl: Implementation, verdict: Verdict, options: RunOptions) -> str:
    failing = verdict.failures(judge_exact=options.judge_exact, strict=options.strict)
    head = f"{impl.op} / {impl.name}: {len(failing)} check(s) failed ({', '.join(c.name for c in failing)}) on {options.device}"
    label = f"\ncase {case.label}" if case.label else ""
    return f"{head}{label}\ncase: {case.summary()}\nfeatures: {', '.join(sorted(case.features)) or '-'}\n{verdict.render()}"


def still_fails(failure: Failure, candidate: Case) -> bool:
    """Does `candidate` show the same bug on the same implementation: a failure with the same
    signature (primary check and input class)? A smaller case of another bug is not a smaller
    case of this one: a float16-only bug minimized into a hc_mult = 3 bug of the same kernel
    would leave the float16 bug without a fixture of its own, under a label its case no longer
    shows."""
    try:
        verdict = run_case(failure.implementation.op, failure.implementation.fn, candidate, failure.options)
    except Exception:
        return False  # a move that breaks the case (or the harness) is not a smaller failure
    if not verdict.failures(judge_exact=failure.options.judge_exact, strict=failure.options.strict):
        return False
    smaller = Failure(candidate, failure.implementation, verdict, failure.options)
    return failure_signature(smaller) == failure_signature(failure)


def still_refused(failure: Failure, refusal: str, candidate: Case) -> bool:
    """Does `candidate` still get an unsupported finding from the same refusal?"""
    try:
        verdict = run_case(failure.implementation.op, failure.implementation.fn, candidate, failure.options)
    except Exception:
        return False
    return any(c.kind == refusal for c in verdict.unsupported())


def minimized_unsupported(failure: Failure, refusal: str, *, budget_s: float) -> Failure:
    """A smaller case the kernel still refuses at the same site (structural moves only: the
    refusal depends on shapes and forms, not values)."""
    spec = get_op(failure.implementation.op)
    case = minimize(failure.case, lambda c: still_refused(failure, refusal, c),
                    smaller_cases=spec.smaller_cases, budget_s=budget_s, values=False)
    if case is failure.case:
        return failure
    verdict = run_case(failure.implementation.op, failure.implementation.fn, case, failure.options)
    return Failure(case, failure.implementation, verdict, failure.options)


def minimized(failure: Failure, *, budget_s: float) -> Failure:
    spec = get_op(failure.implementation.op)
    case = minimize(failure.case, lambda c: still_fails(failure, c),
                    smaller_cases=spec.smaller_cases, budget_s=budget_s)
    verdict = run_case(failure.implementation.op, failure.implementation.fn, case, failure.options)
    return Failure(case, failure.implementation, verdict, failure.options)


def replay_command(path: Path, impl: Implementation | None, kernel_option: str | None, regressions_dir: str | None,
                   *, op: str | None = None, judge_exact: bool = False) -> str:
    # OPTION=VALUE forms: a bare path after a conftest option would be taken for pytest's rootdir.
    kernel = f" --kernel={op or impl.op}={kernel_option}" if kernel_option else ""
    where = f" --regressions-dir={regressions_dir}" if regressions_dir else ""
    exact = " --judge-exact" if judge_exact else ""
    return f"pytest{kernel}{where}{exact} tests/kernel/test_regressions.py -k {path.stem}"


def fixture_meta(*, checks: list[str], message: str, severity: str, kernel: dict, device: str,
                 judge_exact: bool, replay: str) -> dict:
    """What a fixture says besides its case: one shape for every fixture the suite writes."""
    return {"failure": {"checks": checks, "message": message, "severity": severity}, "kernel": kernel,
            "device": device, "judge_exact": judge_exact, "replay": replay}


def record_fixture(failure: Failure, root: Path, *, kernel_option: str | None, custom_root: bool = False,
                   findings: list[Check] | None = None) -> tuple[Path, str]:
    """Write the failure (or, given `findings`, those checks: e.g. an unsupported input) as a
    fixture; return its path and the command that replays it."""
    case = failure.case
    replay = replay_command(fixture_path(root, case), failure.implementation, kernel_option,
                            str(root) if custom_root else None, judge_exact=failure.options.judge_exact)
    failing = findings if findings is not None else failure.verdict.failures(
        judge_exact=failure.options.judge_exact, strict=failure.options.strict)
    impl = failure.implementation
    meta = fixture_meta(
        checks=[c.name for c in failing], message=failure.verdict.render(),
        severity="unsupported" if findings is not None and all(c.status == "unsupported" for c in failing) else "fail",
        kernel={"name": impl.name, "path": str(impl.path) if impl.path else None, "sha256": impl.sha256},
        device=failure.options.device, judge_exact=failure.options.judge_exact, replay=replay)
    return write_fixture(root, case, meta), replay


def record_crash_fixture(case: Case, root: Path, *, op: str, implementation: str, kernel_option: str | None,
                         check: str, message: str, custom_root: bool = False) -> tuple[Path, str]:
    """The case a worker died on (a crash, a hang, a device fault), as a fixture."""
    replay = replay_command(fixture_path(root, case), None, kernel_option, str(root) if custom_root else None, op=op)
    meta = fixture_meta(checks=[check], message=message, severity="fail",
                        kernel={"name": implementation, "path": kernel_option, "sha256": ""},
                        device="unknown (the worker died)", judge_exact=False, replay=replay)
    return write_fixture(root, case, meta), replay
