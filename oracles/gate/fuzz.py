"""What a property test calls to judge a case (`fuzz.check`), and the run state the gate's hooks
share: the kernels under test, the failures awaiting a fixture, a lost CUDA context."""

from __future__ import annotations

import collections
import contextlib
import functools
import re
import statistics
import sys
import time
import traceback
from pathlib import Path

import pytest
from hypothesis import Phase, settings, target
from hypothesis.control import current_build_context, currently_in_test_context

from oracles.harness.differential import RunOptions, context_lost, run_case
from oracles.harness.sampled_rows import sampled_row_case
from oracles.harness.failures import Failure, failure_exception, failure_message, failure_signature, minimized_unsupported, record_fixture
from oracles.harness.inflight import end_worker_after_device_fault, end_worker_after_lost_context, in_flight, in_worker
from oracles.platform.compile_deadline import CompileOverBudget, compile_deadline, deadline_fired
from oracles.platform.device import interpreted
from oracles.platform.mps import under_mps
from oracles.gate.report import Tally
from oracles.ops import get_op
from oracles.verdict import FAIL as FAIL_STATUS, SKIP
from strategies.fixtures import is_default_root

ROOT = Path(__file__).resolve().parents[2]

KERNELS = pytest.StashKey[dict]()          # op -> list[LoadedKernel] from --kernel
GPU_SHARING = pytest.StashKey[str]()       # how a sharded gate's workers share the GPU (oracles/platform/mps.py)
MINIMIZE_ERRORS = pytest.StashKey[list]()  # the suite's own errors while minimizing (reported, not raised)
FAILURES = pytest.StashKey[dict]()         # signature -> the last failing case of that kind (Hypothesis replays
                                           # each distinct bug's shrunk case last)



def strict(config) -> bool:
    """pytest's own --strict (strict markers, config, xfail) also makes `unsupported` findings --
    clean refusals of valid inputs outside the judge domain -- fail the gate. pytest owns the
    option name, so tritonfuzz reads it rather than adding a second one."""
    return bool(config.getoption("strict", False))


# Set when a kernel faulted the GPU in this process (no xdist worker to end): its CUDA context
# is gone, so every later test that would run a kernel is skipped with this reason.
LOST_DEVICE: list[str] = []


def skip_if_device_lost() -> None:
    if LOST_DEVICE:
        pytest.skip(f"not run: {LOST_DEVICE[0]}; this process's CUDA context is lost (gates run in an xdist "
                    f"worker by default, which is replaced after a fault: leave out -n 0 to go on past faults)")


def case_rows(case) -> int:
    """The rows (tokens) a case holds: dim 0 of the op's first row input."""
    t = case.inputs.get(get_op(case.op).row_inputs[0])
    return int(t.shape[0]) if getattr(t, "ndim", 0) else 0


RECENT_CASES = 5  # the cases whose median time predicts the next one's (out_of_budget)
RECENT_KERNEL_CASES = 3  # the kernel calls a worker's record offers for replay under MPS


class SuiteError(Exception):
    """tritonfuzz itself failed while judging a case (the oracle, a check, the recorder): not a
    verdict on the kernel. The gate reports it on its own line and exits with code 3."""


def _suite_errors(excinfo) -> list[SuiteError]:
    """The SuiteErrors in a test's exception (Hypothesis may group several bugs), and Hypothesis's
    complaints about the test itself -- a failed health check, a strategy that drew differently
    on replay: a kernel's exceptions become verdicts inside Fuzz.check, so these are the suite's
    (a correct kernel's gate said FAIL with every check passing, H100 2026-12-06)."""
    if excinfo is None:
        return []
    from hypothesis.errors import FailedHealthCheck, FlakyStrategyDefinition
    stack, found = [excinfo.value], []
    while stack:
        e = stack.pop()
        if isinstance(e, SuiteError):
            found.append(e)
        elif isinstance(e, (FailedHealthCheck, FlakyStrategyDefinition)):
            found.append(SuiteError(f"Hypothesis: {type(e).__name__}: {' '.join(str(e).split())[:600]}"))
        stack += list(getattr(e, "exceptions", ()))
    return found


class BudgetSpent(pytest.skip.Exception):
    """Raised by check() on a drawn case once --gate-budget is spent and nothing failed. Hypothesis
    lets a skip through at once, ending its run (raised before the draw, Hypothesis would call its
    data generation flaky); pytest_runtest_makereport (oracles/gate/plugin.py) reports the property
    as passed, which it is: every case it judged passed. Ending each example as an overrun instead,
    Hypothesis went on for 458 + 100 per valid example of them: 17,629 examples and 4-8 s past a
    GPU gate's budget (H100, 2026-12-06)."""


class Fuzz:
    """What a property calls: run the case; tally the verdict for the gate; write a fixture for
    each new unsupported input class; on failure remember the case under its signature and raise
    an exception of that signature, so that Hypothesis shrinks and reports each distinct bug
    separately. Drawn cases stop running past --gate-budget."""

    def __init__(self, node, options: RunOptions, *, budget_s, case_timeout_s, kind):
        self.node, self.options, self.kind = node, options, kind
        self.budget_s, self.case_timeout_s = budget_s, case_timeout_s
        self.started = time.monotonic()
        self.tally: Tally | None = None
        self.seen_failing: dict = {}  # content hash -> Failure
        self.last_progress = self.started
        self.case_seconds: list[float] = []  # how long each case took to judge, in order
        self.failing_choices: set = set()  # the Hypothesis choices (choices_key) of each failing example
        # Under MPS a fault surfaces a call or two late, in any shard: the in-flight records of this
        # worker's last kernel calls (serialized before each call), most recent first, go into its
        # crash record (oracles/platform/mps.py).
        self.recent_records: collections.deque = collections.deque(maxlen=RECENT_KERNEL_CASES)

    def out_of_budget(self) -> bool:
        """Past --gate-budget, or a new case would likely end past it: one takes as long as the
        median of the last RECENT_CASES (a case in flight always finishes, and on a GPU one that
        compiles takes seconds: the drawn phase overran a 30 s budget by 11-15 s, H200 2026-12-02)."""
        if self.kind != "fuzz" or self.budget_s is None:
            return False
        expected = statistics.median(self.case_seconds[-RECENT_CASES:]) if self.case_seconds else 0.0
        return time.monotonic() - self.started + expected > self.budget_s

    def end_if_spent(self, implementation) -> None:
        """Called by a property before it draws. Hypothesis knows no time budget: past
        --gate-budget it drew cases (20-160 ms each on a GPU) only for check() to pass them. With
        nothing failed, check() ends the property on the next drawn case (BudgetSpent). With a
        failure found, Hypothesis shrinks it and searches 10 s for more bugs: past the budget
        every such example ends before it draws, except the replays of a failure (the shrink's
        first run and the final one), where check raises it again (end_unless_replaying). Each
        drew a case only to pass it, for up to Hypothesis's 5 minutes of shrinking: on an H100
        (2026-12-06) a mutant caught in 3.5 s took 129 s to end, and 15 outside kernels' gates
        ran past 200 s. Hypothesis's simplest example always draws: ended undrawn, it fails the
        large_base_example health check."""
        __tracebackhide__ = True
        # Cheapest first: every example of every property (no budget: the suite's) passes here.
        if not self.seen_failing or not self.out_of_budget() or not currently_in_test_context():
            return
        if simplest_example(current_build_context().data):
            return
        self._start(implementation)
        self.tally.budget_exhausted = True
        end_unless_replaying(self.failing_choices)

    def check(self, case, implementation):
        __tracebackhide__ = True
        self._start(implementation)
        if self.out_of_budget():
            self.tally.budget_exhausted = True
            # Hashing a GPU-sized case costs ~40 ms (it serializes every byte): only when a replay
            # of a failure is possible at all.
            failure = self.seen_failing.get(case.content_hash()) if self.seen_failing else None
            if failure is not None:  # Hypothesis replays a failure it found: the same answer, no new run
                self._raise(failure)
            if not self.seen_failing and currently_in_test_context() and not current_build_context().is_final:
                raise BudgetSpent(f"--gate-budget={self.budget_s:g} s spent after {len(self.case_seconds)} case(s)")
            return None  # past the budget nothing new runs (shrink candidates pass)
        with in_flight(case, implementation, kernel_option_for(self.node.config, implementation),
                       timeout_s=self.case_timeout_s) as record, self._suite_errors(implementation, case.summary()), \
                compile_deadline(self.deadline(), enabled=not interpreted()):
            started = time.monotonic()
            if record is not None:
                self.recent_records.appendleft(record)
            try:
                verdict = run_case(implementation.op, implementation.fn, case, self.options)
            except CompileOverBudget:
                verdict = None
            if deadline_fired():  # also when the kernel's wrapper swallowed it: the run was not the pick's
                verdict = None
            self.case_seconds.append(time.monotonic() - started)
            self.tally.seconds = time.monotonic() - self.started
        if verdict is None:
            self.tally.budget_exhausted = True
            self.tally.abandoned += 1
            return None
        return self.record(case, implementation, verdict, in_flight_record=record)

    def deadline(self) -> float | None:
        """When a drawn case's launches stop waiting for a Triton compile: the end of the budget.
        Drawn cases only (inside a Hypothesis test): a fixed case (a model configuration) is
        judged however long its compile takes."""
        if self.kind != "fuzz" or self.budget_s is None or not currently_in_test_context():
            return None
        return self.started + self.budget_s

    def check_sampled_rows(self, inputs: dict, rows: list[int], implementation):
        """The beyond-2^31 case: the kernel on the whole input, the verdict on `rows` of it
        (oracles/harness/sampled_rows.py); an error of that verdict is the suite's, as in check."""
        __tracebackhide__ = True
        spec = get_op(implementation.op)
        shape = "x".join(map(str, next(v for k, v in inputs.items() if k in spec.row_inputs).shape))
        with self._suite_errors(implementation, f"rows {rows} of a [{shape}] input"):
            case, verdict = sampled_row_case(implementation.op, implementation.fn, inputs, rows,
                                             judge_exact=self.options.judge_exact)
        shortfall = verdict.check("contract")
        if shortfall is not None and shortfall.status == SKIP:  # the GPU's memory was other processes'
            pytest.skip(f"beyond-2^31-element case: {shortfall.message}")
        return self.record(case, implementation, verdict)

    @contextlib.contextmanager
    def _suite_errors(self, implementation, what: str):
        """The kernel's own exceptions are verdicts inside run_case and sampled_row_case: anything
        raised through them is tritonfuzz's, reported as a SuiteError (never a verdict)."""
        try:
            yield
        except Exception as e:
            self.end_worker_if_context_lost(e, implementation)
            where = "".join(traceback.format_exception(e, limit=-3)).strip()
            raise SuiteError(f"tritonfuzz failed while judging {implementation.op} / {implementation.name} on "
                             f"case {what}: {type(e).__name__}: {e}. This is the suite's error, not "
                             f"the kernel's; please report it with this message and:\n{where}") from e

    def end_worker_if_context_lost(self, error: BaseException, implementation) -> None:
        """Under MPS, in a worker: a CUDA context lost outside a kernel call ends the worker, with
        its recent kernel cases for the controller to replay alone (not the suite's error)."""
        if under_mps() and in_worker() and context_lost(error):
            end_worker_after_lost_context(implementation, kernel_option_for(self.node.config, implementation),
                                          str(error), list(self.recent_records))

    def record(self, case, implementation, verdict, in_flight_record=None):
        """Tally a verdict (run here, or by a test itself as for the beyond-2^31 case) and fail on it.
        `in_flight_record`: the case's record, serialized before its kernel call (check)."""
        __tracebackhide__ = True
        self._start(implementation)
        self.tally.add(verdict, case.summary(), rows=case_rows(case))
        for finding in verdict.unsupported():
            if self.tally.is_new_unsupported(finding.kind):
                self.unsupported_fixture(case, implementation, verdict, finding.kind)
        self.progress()
        if verdict.device_lost:
            if in_worker():  # the controller turns the in-flight record into the verdict and fixture
                end_worker_after_device_fault(case, implementation, kernel_option_for(self.node.config, implementation),
                                              verdict.render(), in_flight_record,
                                              [r for r in self.recent_records if r is not in_flight_record])
            LOST_DEVICE.append(f"{implementation.name} faulted the GPU in {self.node.nodeid} on case {case.summary()}")
        margin = verdict.accuracy_margin()
        if margin is not None and climbing_targets():
            target(margin)  # unlabelled: HypoFuzz buckets it by powers of two, a behavior per bucket
        if verdict.failures(judge_exact=self.options.judge_exact, strict=self.options.strict):
            failure = Failure(case, implementation, verdict, self.options)
            signature = failure_signature(failure, run=lambda twin: self._run_twin(twin, implementation))
            self.node.stash.setdefault(FAILURES, {})[signature] = failure
            self.seen_failing[case.content_hash()] = failure
            key = example_choices()
            if key is not None:
                self.failing_choices.add(key)
            self._raise(failure)
        return verdict

    def _run_twin(self, twin, implementation):
        """The finite twin of a failing case (failure_signature), guarded as a drawn case is: a
        record in flight, the hang timer, the suite's errors. A twin that faults the GPU is a
        fault on finite inputs: recorded as one (a worker ends; without workers its failure is
        kept for a fixture of its own)."""
        __tracebackhide__ = True
        with in_flight(twin, implementation, kernel_option_for(self.node.config, implementation),
                       timeout_s=self.case_timeout_s) as record, self._suite_errors(implementation, twin.summary()):
            if record is not None:
                self.recent_records.appendleft(record)
            verdict = run_case(implementation.op, implementation.fn, twin, self.options)
        if verdict.device_lost:
            self.record(twin, implementation, verdict, in_flight_record=record)
        return verdict

    def _raise(self, failure: Failure):
        __tracebackhide__ = True
        raise failure_exception(failure_signature(failure))(
            failure_message(failure.case, failure.implementation, failure.verdict, self.options))

    def _start(self, implementation):
        if self.tally is None:
            self.tally = Tally(implementation.op, implementation.name, self.kind, test=unsharded(self.node.nodeid),
                               judge_exact=self.options.judge_exact, strict=self.options.strict)

    def unsupported_fixture(self, case, implementation, verdict, refusal):
        """A clean refusal outside the judge domain: not a failure, so Hypothesis does not shrink it;
        a short minimization keeps the refusal, and the fixture says how to replay it."""
        config = self.node.config
        failure = Failure(case, implementation, verdict, self.options)
        small = minimized_unsupported(failure, refusal, budget_s=min(5.0, config.getoption("minimize_budget")))
        root = Path(config.getoption("regressions_dir"))
        path, replay = record_fixture(small, root, kernel_option=kernel_option_for(config, implementation),
                                      custom_root=is_custom_root(root), findings=small.verdict.unsupported())
        entry = self.tally.unsupported[refusal]
        entry["fixture"], entry["replay"] = str(path), replay

    def progress(self, every_s: float = 30.0):
        """On long runs, a line per test every 30 s on the real stderr (captured output hides it)."""
        now = time.monotonic()
        if now - self.last_progress >= every_s:
            self.last_progress = now
            failures = sum(c[FAIL_STATUS] for c in self.tally.checks.values())
            print(f"[tritonfuzz] {self.tally.op}/{self.tally.implementation} {self.node.name}: "
                  f"{self.tally.examples} examples, {failures} failing checks, {now - self.started:.0f} s",
                  file=sys.__stderr__, flush=True)


def simplest_example(data) -> bool:
    """The example Hypothesis runs first when it starts generating: its choices all the simplest
    (the prefix it is built from is one ChoiceTemplate("simplest")). Ended as an overrun it fails
    the large_base_example health check, and it comes after the database's examples have been
    replayed, which can spend a budget: every implementation of an op shares the property's
    database key (its parameters come from pytest_generate_tests, not @pytest.mark.parametrize),
    and on an H100 (2026-12-06) three correct gate_topk kernels FAILED that way, every check passing."""
    prefix = getattr(data, "prefix", None) or ()
    return len(prefix) == 1 and getattr(prefix[0], "type", None) == "simplest"


def example_choices():
    """The choices the running Hypothesis example has made so far (choices_key: NaN and -0.0
    compared by value), or None outside one. At check() the case is wholly drawn, so these are
    the example's choices, which Hypothesis replays as the prefix of its shrink's first run."""
    if not currently_in_test_context():
        return None
    choices = getattr(getattr(current_build_context(), "data", None), "choices", None)
    return _choices_key(choices) if choices is not None else None


def replays_a_failure(data, failing: set) -> bool:
    """Whether `data` (a Hypothesis example about to draw) replays one of the `failing` examples'
    choices exactly: its prefix, the choices Hypothesis hands it, is one of them."""
    prefix = getattr(data, "prefix", None)
    if not prefix or all(len(prefix) != len(choices) for choices in failing):
        return False
    key = _choices_key(prefix)
    try:
        return key is not None and key in failing
    except TypeError:  # a template (the simplest example's prefix) is no choice, and unhashable
        return False


def end_unless_replaying(failing_choices: set) -> None:
    """End the running example before it draws (an overrun, which Hypothesis accepts at any
    point) unless it replays one of the failing examples: the run that starts the shrink
    (replays_a_failure) or Hypothesis's final replay. Past a budget, with a failure found."""
    context = current_build_context()
    if context.is_final or not hasattr(context.data, "mark_overrun") or \
            replays_a_failure(context.data, failing_choices):
        return
    context.data.mark_overrun()


def _choices_key(choices):
    from hypothesis.internal.conjecture.choice import choices_key
    try:
        return choices_key(tuple(choices))
    except Exception:
        return None


def end_when_budget_spent(item) -> None:
    """Make a property that takes `fuzz` call Fuzz.end_if_spent before each example draws.

    Done on Hypothesis's inner test (`.hypothesis.inner_test`, which Hypothesis lets plugins
    replace), not in the property's source: a derandomized profile (ci) seeds its draws from a
    digest of that source, so a line added there changed every ci draw. functools.wraps keeps the
    digest (source, name and signature are read through __wrapped__), so the draws are unchanged."""
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    if handle is None or "fuzz" not in getattr(item, "fixturenames", ()) or \
            getattr(handle.inner_test, "_tritonfuzz_ends_when_spent", False):
        return
    test = handle.inner_test

    @functools.wraps(test)
    def property_ending_when_spent(*args, **kwargs):
        __tracebackhide__ = True
        fuzz, implementation = kwargs.get("fuzz"), kwargs.get("implementation")
        if isinstance(fuzz, Fuzz) and implementation is not None:
            fuzz.end_if_spent(implementation)
        return test(*args, **kwargs)

    property_ending_when_spent._tritonfuzz_ends_when_spent = True
    handle.inner_test = property_ending_when_spent


def unsharded(nodeid: str) -> str:
    """A test's id without its shard ("...[hc_head-k.py-shard3]" -> "...[hc_head-k.py]"): the
    shards of one property draw at once, so the gate takes the longest one's time, not their sum."""
    return re.sub(r"-shard\d+\]$", "]", nodeid)


def climbing_targets() -> bool:
    """Inside a drawn case (the judge's cases and fixtures are not) whose settings climb targets:
    soak and the engine's. Elsewhere target() is not called at all: with a database, Hypothesis
    would keep a Pareto front of the margin, drawing on the same random stream as the cases."""
    if not currently_in_test_context():
        return False
    test = getattr(current_build_context(), "wrapped_test", None)
    return Phase.target in (getattr(test, "_hypothesis_internal_use_settings", None) or settings.default).phases


def is_custom_root(root: Path) -> bool:
    """Fixtures written elsewhere than tests/regressions: the replay command must say where."""
    return not is_default_root(root)


def kernel_option_for(config, implementation) -> str | None:
    for lk in config.stash[KERNELS].get(implementation.op, []):
        if implementation in lk.implementations:
            return lk.source
    return None
