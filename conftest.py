"""tritonfuzz's pytest wiring: interpreter decision, profiles, options, implementations under
test, and what happens when a property fails (minimize, write a fixture, say how to replay).

TRITON_INTERPRET is decided here, first, before any kernel module is imported: @triton.jit
binds interpreter mode when it decorates.
"""

import os
import sys
import time

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
if INTERPRETED:
    from kernels.interpreter import patch_interpreter

    patch_interpreter()
elif GPU:
    from kernels.interpreter import sample_autotuning_on_gpu

    sample_autotuning_on_gpu()

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings, target  # noqa: E402
from hypothesis.control import current_build_context, currently_in_test_context  # noqa: E402

from kernels.loader import KernelLoadError, bundled_implementations, load_kernel, parse_kernel_option  # noqa: E402
from oracles.differential import RunOptions, run_case  # noqa: E402
from oracles.failures import (Failure, failure_exception, failure_message, failure_signature, minimized,  # noqa: E402
                              minimized_unsupported, record_fixture)
from oracles import accounting  # noqa: E402
from oracles.gate import ImplementationSummary, Tally, dumps, overall_verdict, render_table, report_json  # noqa: E402
from oracles.inflight import (crashed_case_verdict, end_worker_after_device_fault, in_flight,  # noqa: E402
                              in_worker, inflight_dir)
from oracles.memory import (apply_process_limit, call_limit_bytes, check_memory_limit_option, fmt_bytes,  # noqa: E402
                            limit_bytes, process_limit)
from oracles.platform import suite_device  # noqa: E402
from oracles.registry import OPS  # noqa: E402
from oracles.verdict import FAIL as FAIL_STATUS  # noqa: E402
from strategies.case import BEYOND_INT32  # noqa: E402

ROOT = Path(__file__).parent

# Triton compiles on a first call (seconds on a GPU, per-launch Python under the interpreter):
# no deadlines anywhere, and the slow-data health check is off for the same reason. Function
# fixtures are per-test state (the failure record), which is what the check guards against.
_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
# Properties report their accuracy margin with hypothesis.target() (Fuzz.record). Hill-climbing it
# is for long runs (soak, HypoFuzz): ci, dev and gate draw exactly what they drew before.
_NO_TARGET = [p for p in Phase if p is not Phase.target]
# Every profile derives from Hypothesis's own default, not from whatever is loaded now: with CI set
# in the environment Hypothesis loads its built-in derandomized "ci" profile at import, and a child
# of that would derandomize soak and the HypoFuzz engine's profile too (HypoFuzz refuses such tests).
_BASE = settings.get_profile("default")
settings.register_profile("ci", parent=_BASE, derandomize=True, max_examples=20, deadline=None, database=None,
                          print_blob=True, suppress_health_check=_QUIET, phases=_NO_TARGET)
settings.register_profile("dev", parent=_BASE, max_examples=40, deadline=None, print_blob=True, suppress_health_check=_QUIET,
                          phases=_NO_TARGET)
settings.register_profile("gate", parent=_BASE, max_examples=400, deadline=None, print_blob=True, suppress_health_check=_QUIET,
                          phases=_NO_TARGET)
settings.register_profile("soak", parent=_BASE, max_examples=5000, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile("dev")

KERNELS = pytest.StashKey[dict]()          # op -> list[LoadedKernel] from --kernel
MINIMIZE_ERRORS = pytest.StashKey[list]()  # the suite's own errors while minimizing (reported, not raised)
FAILURES = pytest.StashKey[dict]()         # signature -> the last failing case of that kind (Hypothesis replays
                                           # each distinct bug's shrunk case last)


def pytest_addoption(parser):
    group = parser.getgroup("tritonfuzz")
    group.addoption("--kernel", action="append", default=[], metavar="OP=PATH",
                    help="test an outside implementation of OP: a .py defining OP() or reference(), or a "
                         "competition .zip; only OP's tests run (repeatable)")
    group.addoption("--regressions-dir", default=str(ROOT / "tests" / "regressions"), metavar="DIR",
                    help="where regression fixtures are replayed from and written to (default: tests/regressions)")
    group.addoption("--judge-exact", action="store_true",
                    help="demand torch.topk's exact tie order on this device (default: a tie ordered "
                         "differently is a judge risk, not a failure)")

    group.addoption("--minimize-budget", type=float, default=20.0, metavar="SECONDS",
                    help="time for minimizing a failing case before its fixture is written (default 20)")
    group.addoption("--gate-budget", type=float, default=None, metavar="SECONDS",
                    help="fuzzing time per property test and implementation; past it the test stops "
                         "drawing cases and the verdict table says how far it got (default: no limit)")
    group.addoption("--gate-report", default=None, metavar="PATH",
                    help="also write the verdict tables as JSON (schema: oracles/gate_report.schema.json)")
    group.addoption("--keep-tmp", action="store_true",
                    help="keep this run's temporary folder (in-flight case records, unpacked zip members) "
                         "and print where it is (default: removed at the end)")
    group.addoption("--memcheck", action="store_true",
                    help="on a GPU, after the gate: replay the judge's cases and the fixtures of each --kernel "
                         "under NVIDIA compute-sanitizer (memcheck); any invalid access fails the gate (slow)")
    group.addoption("--case-timeout", type=float, default=300.0, metavar="SECONDS",
                    help="a single kernel call running longer is a hang: the case is saved as a fixture and "
                         "the worker process ends (default 300)")
    group.addoption("--memory-limit", type=check_memory_limit_option, default=4.0, metavar="GIB",
                    help="CPU tier: each test process may hold at most GIB GiB of data (RLIMIT_DATA), and a "
                         "kernel's own CPU allocations in one call at most a quarter of that; past it the "
                         "allocation fails and so does the case (default 4; 0: no limit)")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Gate runs (--kernel) execute in one xdist worker unless -n says otherwise: a kernel that
    segfaults or corrupts the heap then kills a worker, which xdist replaces, and the case it
    was running still gets a verdict (see pytest_handlecrashitem)."""
    if config.getoption("kernel") and config.getoption("numprocesses", None) is None \
            and config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.option.numprocesses = 1
    # xdist stops replacing crashed workers after 4 restarts a worker; a kernel that crashes on
    # every call would then leave most of the gate unrun. A gate replaces every crashed worker.
    if config.getoption("kernel") and getattr(config.option, "maxworkerrestart", "unset") is None:
        config.option.maxworkerrestart = 1_000_000
    # Under xdist only the workers parse -k and -m: a wrong expression would be the controller's
    # INTERNALERROR. Parsed here first, as pytest parses it, it is a one-line usage error (exit 4).
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        try:
            from _pytest.mark import _parse_expression
        except ImportError:  # moved in another pytest: the workers still report it, less readably
            return
        for option, flag in (("keyword", "-k"), ("markexpr", "-m")):
            expression = (config.getoption(option, "") or "").lstrip()
            if expression:
                _parse_expression(expression, f"Wrong expression passed to '{flag}'")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        # Not an xdist worker, whatever the environment says: a pytest started from inside a
        # worker's test inherits PYTEST_XDIST_WORKER, and would take itself for a worker that may
        # exit after a device fault or a hang.
        os.environ.pop("PYTEST_XDIST_WORKER", None)
    for op in OPS:
        config.addinivalue_line("markers", f"{op}: tests of the {op} op (select with -m {op})")
    config.addinivalue_line("markers", "gpu: needs a GPU (skipped under the CPU interpreter)")
    pin_xdist_worker_to_gpu()
    if not GPU:  # before any kernel module is imported (oracles/memory.py: why not on a GPU)
        apply_process_limit(limit_bytes(config.getoption("memory_limit")))
    # The run's temporary folder, made by the controller before xdist starts workers: they inherit
    # where to record in-flight cases and find the zip members the controller unpacked.
    workdir = inflight_dir(fresh=not hasattr(config, "workerinput")) / "kernels"
    config.pluginmanager.register(accounting.CollectionRecorder(inflight_dir()), "tritonfuzz-collected")
    if not hasattr(config, "workerinput"):  # fixtures newer than this are not collected (tests/test_regressions.py)
        os.environ["_TRITONFUZZ_RUN_STARTED"] = repr(time.time())
    kernels = {}
    for value in config.getoption("kernel"):
        try:
            op, path = parse_kernel_option(value)
            kernels.setdefault(op, []).append(load_kernel(op, path, workdir=workdir))
        except KernelLoadError as e:
            raise pytest.UsageError(str(e)) from None
    config.stash[KERNELS] = kernels
    freeze_hypothesis_local_constants()
    if not hasattr(config, "workerinput"):  # the controller (or a plain run) sums up
        config.pluginmanager.register(GateSummary(config), "tritonfuzz-gate-summary")
    if kernels and config.getoption("hypothesis_profile", None) is None:
        settings.load_profile("gate")


def pytest_unconfigure(config):
    """The controller removes the run's temporary folder (workers share it), unless --keep-tmp."""
    if hasattr(config, "workerinput"):
        return
    folder = inflight_dir()
    if config.getoption("keep_tmp", False):
        print(f"tritonfuzz: temporary files kept in {folder}", file=sys.__stderr__)
        return
    import shutil
    shutil.rmtree(folder, ignore_errors=True)


def freeze_hypothesis_local_constants():
    """Make derandomized runs depend on nothing but the test.

    Hypothesis draws, 5% of the time, constants harvested from the source of every local module
    loaded so far (hypothesis.internal.conjecture.providers._get_local_constants). Which of this
    project's modules a worker has imported, and which kernel files tests have loaded from
    temporary folders, depends on the tests xdist gave it before: the same `ci` test then drew
    different cases in different runs (the mutant nan_scores_ranked_last was caught in 8 examples
    in one run and missed in 20 in another, after tests/test_bench.py began importing two more
    modules). So every project module is imported now, the pool is computed once and frozen:
    later imports no longer change what a derandomized test draws. If a Hypothesis release
    moves that internal function, nothing is frozen (and nothing breaks).
    """
    import importlib
    for folder in ("kernels", "oracles", "strategies"):
        for path in sorted((ROOT / folder).glob("*.py")):
            importlib.import_module(f"{folder}.{path.stem}")
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    harvest = getattr(providers, "_get_local_constants", None)
    if callable(harvest) and not getattr(harvest, "tritonfuzz_frozen", False):
        import warnings
        with warnings.catch_warnings():  # harvesting here, at configure time, is the point
            warnings.filterwarnings("ignore", message="Slow code in plugin")
            frozen = harvest()

        def frozen_local_constants():
            return frozen
        frozen_local_constants.tritonfuzz_frozen = True
        providers._get_local_constants = frozen_local_constants


def pin_xdist_worker_to_gpu():
    """Under xdist each worker takes one GPU, round robin over the visible devices."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if GPU and worker.startswith("gw"):
        torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())


def device() -> str:
    return suite_device()


def pytest_report_header(config):
    where = torch.cuda.get_device_name() if GPU else "CPU (Triton interpreter)"
    lines = [f"tritonfuzz: device {where}; TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r}; "
             f"hypothesis profile {settings._current_profile}"]
    if not GPU:
        limit, call = process_limit(), call_limit_bytes(config.getoption("memory_limit"))
        lines.append(f"tritonfuzz: memory limit {fmt_bytes(limit) if limit else 'none'} a process, "
                     f"{fmt_bytes(call) if call else 'none'} a kernel call (--memory-limit)")
    if INTERPRETED:
        from kernels.interpreter import bf16_arithmetic_is_exact
        lines.append(f"tritonfuzz: interpreter bf16 arithmetic exact: {bf16_arithmetic_is_exact()}")
    env = {k: v for k, v in os.environ.items() if k.startswith("TRITONFUZZ_")}
    if env:
        lines.append("tritonfuzz env: " + ", ".join(f"{k}={v}" for k, v in sorted(env.items())))
    for op, loaded in config.stash[KERNELS].items():
        for lk in loaded:
            lines.append(f"tritonfuzz: --kernel {op}={lk.source}: " + ", ".join(i.name for i in lk.implementations))
            lines += [f"tritonfuzz:   note: {n}" for n in lk.notes]
    return lines


def implementations_under_test(config, op: str):
    loaded = config.stash[KERNELS].get(op)
    if loaded:
        return [impl for lk in loaded for impl in lk.implementations]
    return bundled_implementations(op)


def pytest_generate_tests(metafunc):
    if "implementation" in metafunc.fixturenames:
        op = getattr(metafunc.module, "OP", None)
        if op is None:
            return
        impls = implementations_under_test(metafunc.config, op)
        metafunc.parametrize("implementation", impls, ids=[i.name for i in impls])


def pytest_collection_modifyitems(config, items):
    # The beyond-2^31-element cases run last: a kernel whose offsets overflow can fault the GPU,
    # and a faulted CUDA context fails whatever that process runs after it.
    items.sort(key=lambda item: "beyond_int32" in getattr(item, "fixturenames", ()))
    selected_ops = set(config.stash[KERNELS])
    if not selected_ops:
        return
    under_test = [impl for op in selected_ops for impl in implementations_under_test(config, op)]
    keep, drop = [], []
    for item in items:
        # The gate runs the tests of the implementations under test, not the suite's self-tests
        # (some of which take the bundled kernels as `implementation`).
        impl = getattr(getattr(item, "callspec", None), "params", {}).get("implementation")
        (keep if any(impl is u for u in under_test) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def strict(config) -> bool:
    """pytest's own --strict (strict markers, config, xfail) also makes `unsupported` findings --
    clean refusals of valid inputs outside the judge domain -- fail the gate. pytest owns the
    option name, so tritonfuzz reads it rather than adding a second one."""
    return bool(config.getoption("strict", False))


@pytest.fixture(scope="session")
def run_options(request) -> RunOptions:
    # TRITONFUZZ_SANITIZE=0: no guard bands (set for the compute-sanitizer replay of --memcheck,
    # where an access into a guard band would be an access into memory the process owns).
    sanitize = os.environ.get("TRITONFUZZ_SANITIZE", "1") != "0"
    # A gate, and long runs on HypoFuzz (python -m oracles.engine: profiles fuzz, fuzz-replay), also
    # run each case twice and compile for the AMD-class target.
    gate = settings._current_profile in ("gate", "fuzz", "fuzz-replay")
    return RunOptions(device=device(), judge_exact=request.config.getoption("judge_exact"),
                      strict=strict(request.config), determinism=gate, portability=gate, sanitize=sanitize,
                      alloc_limit=call_limit_bytes(request.config.getoption("memory_limit")))


# Which tally a test's verdicts go to (oracles/gate.py KINDS); every other property is "fuzz".
TEST_KINDS = {"test_judge_cases": "judge", "test_fixture_replays": "fixture"}


# Set when a kernel faulted the GPU in this process (no xdist worker to end): its CUDA context
# is gone, so every later test that would run a kernel is skipped with this reason.
LOST_DEVICE: list[str] = []


def skip_if_device_lost() -> None:
    if LOST_DEVICE:
        pytest.skip(f"not run: {LOST_DEVICE[0]}; this process's CUDA context is lost (gates run in an xdist "
                    f"worker by default, which is replaced after a fault: leave out -n 0 to go on past faults)")


@pytest.fixture
def beyond_int32(request, run_options):
    """A case beyond 2^31 elements (32-bit offsets overflow) runs on a GPU in every gate (--kernel)
    and under the soak profile, when the GPU has the memory: `need_bytes(n)` skips with the reason
    otherwise. The CPU interpreter could not run it at all."""
    skip_if_device_lost()
    if run_options.device != "cuda":
        pytest.skip("beyond-2^31-element case: GPU only (the interpreter would take hours)")
    if not request.config.stash[KERNELS] and settings._current_profile != "soak":
        pytest.skip("beyond-2^31-element case: runs in a gate (--kernel) or under --hypothesis-profile soak")

    def need_bytes(n: int) -> None:
        free, _ = torch.cuda.mem_get_info()
        if free < n:
            pytest.skip(f"beyond-2^31-element case: needs {n / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} free")
    return need_bytes


class SuiteError(Exception):
    """tritonfuzz itself failed while judging a case (the oracle, a check, the recorder): not a
    verdict on the kernel. The gate reports it on its own line and exits with code 3."""


def _suite_errors(excinfo) -> list[SuiteError]:
    """The SuiteErrors in a test's exception (Hypothesis may group several bugs)."""
    if excinfo is None:
        return []
    stack, found = [excinfo.value], []
    while stack:
        e = stack.pop()
        if isinstance(e, SuiteError):
            found.append(e)
        stack += list(getattr(e, "exceptions", ()))
    return found


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

    def out_of_budget(self) -> bool:
        return self.kind == "fuzz" and self.budget_s is not None and time.monotonic() - self.started > self.budget_s

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
            return None  # past the budget nothing new runs (shrink candidates pass)
        with in_flight(case, implementation, kernel_option_for(self.node.config, implementation),
                       timeout_s=self.case_timeout_s):
            try:
                verdict = run_case(implementation.op, implementation.fn, case, self.options)
            except Exception as e:  # the kernel's own exceptions are verdicts inside run_case: this is ours
                import traceback
                where = "".join(traceback.format_exception(e, limit=-3)).strip()
                raise SuiteError(f"tritonfuzz failed while judging {implementation.op} / {implementation.name} on "
                                 f"case {case.summary()}: {type(e).__name__}: {e}. This is the suite's error, not "
                                 f"the kernel's; please report it with this message and:\n{where}") from e
        return self.record(case, implementation, verdict)

    def record(self, case, implementation, verdict):
        """Tally a verdict (run here, or by a test itself as for the beyond-2^31 case) and fail on it."""
        __tracebackhide__ = True
        self._start(implementation)
        self.tally.add(verdict, case.summary())
        for finding in verdict.unsupported():
            if self.tally.is_new_unsupported(finding.kind):
                self.unsupported_fixture(case, implementation, verdict, finding.kind)
        self.progress()
        if verdict.device_lost:
            if in_worker():  # the controller turns the in-flight record into the verdict and fixture
                end_worker_after_device_fault(case, implementation, kernel_option_for(self.node.config, implementation),
                                              verdict.render())
            LOST_DEVICE.append(f"{implementation.name} faulted the GPU in {self.node.nodeid} on case {case.summary()}")
        margin = verdict.accuracy_margin()
        if margin is not None and climbing_targets():
            target(margin)  # unlabelled: HypoFuzz buckets it by powers of two, a behavior per bucket
        if verdict.failures(judge_exact=self.options.judge_exact, strict=self.options.strict):
            failure = Failure(case, implementation, verdict, self.options)
            self.node.stash.setdefault(FAILURES, {})[failure_signature(failure)] = failure
            self.seen_failing[case.content_hash()] = failure
            self._raise(failure)
        return verdict

    def _raise(self, failure: Failure):
        __tracebackhide__ = True
        raise failure_exception(failure_signature(failure))(
            failure_message(failure.case, failure.implementation, failure.verdict, self.options))

    def _start(self, implementation):
        if self.tally is None:
            self.tally = Tally(implementation.op, implementation.name, self.kind,
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


def climbing_targets() -> bool:
    """Inside a drawn case (the judge's cases and fixtures are not) whose settings climb targets:
    soak and the engine's. Elsewhere target() is not called at all: with a database, Hypothesis
    would keep a Pareto front of the margin, drawing on the same random stream as the cases."""
    if not currently_in_test_context():
        return False
    test = getattr(current_build_context(), "wrapped_test", None)
    return Phase.target in (getattr(test, "_hypothesis_internal_use_settings", None) or settings.default).phases


@pytest.fixture
def fuzz(request, run_options) -> Fuzz:
    skip_if_device_lost()
    config = request.config
    return Fuzz(request.node, run_options, budget_s=config.getoption("gate_budget"),
                case_timeout_s=config.getoption("case_timeout"),
                kind=TEST_KINDS.get(request.node.originalname, "fuzz"))


def is_custom_root(root: Path) -> bool:
    """Fixtures written elsewhere than tests/regressions: the replay command must say where."""
    return root.resolve() != (ROOT / "tests" / "regressions").resolve()


def kernel_option_for(config, implementation) -> str | None:
    for lk in config.stash[KERNELS].get(implementation.op, []):
        if implementation in lk.implementations:
            return lk.source
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.user_properties = list(report.user_properties)  # pytest shares one list across phases
    impl = getattr(getattr(item, "callspec", None), "params", {}).get("implementation")
    if impl is not None:
        report.user_properties.append(("tritonfuzz_impl", {"op": impl.op, "implementation": impl.name}))
    if call.when == "call" and impl is not None:
        for error in _suite_errors(call.excinfo):
            report.user_properties.append(("tritonfuzz_suite_error", {"op": impl.op, "implementation": impl.name,
                                                                       "message": str(error)[:2000]}))
    fuzz = item.funcargs.get("fuzz") if call.when == "call" and hasattr(item, "funcargs") else None
    if fuzz is not None and fuzz.tally is not None:
        report.user_properties.append(("tritonfuzz_tally", fuzz.tally.to_json()))
    failures = item.stash.get(FAILURES, {})
    if call.when != "call" or not report.failed or not failures:
        return
    del item.stash[FAILURES]
    root = Path(item.config.getoption("regressions_dir"))
    for signature, failure in failures.items():  # one fixture per distinct bug
        if BEYOND_INT32 in failure.case.features:  # a few rows would replay clean: the bug needs the whole input
            source = kernel_option_for(item.config, failure.implementation)
            kernel = f"--kernel={failure.implementation.op}={source} " if source else ""
            replay = f"pytest {kernel}tests/test_{failure.implementation.op}.py -k beyond_int32  (on a GPU with the memory)"
            report.sections.append((f"tritonfuzz: how to reproduce ({signature})",
                                    f"bug: {signature}\n{failure.verdict.render()}\nreproduce: {replay}"))
            report.user_properties.append(("tritonfuzz_fixture", {
                "op": failure.implementation.op, "implementation": failure.implementation.name,
                "path": "(no fixture: the case is its size, rebuilt by the test)", "replay": replay, "bug": signature}))
            continue
        small = failure if failure.verdict.device_lost else smallest_still_failing(item, failure)
        path, replay = record_fixture(small, root, kernel_option=kernel_option_for(item.config, failure.implementation),
                                      custom_root=is_custom_root(root))
        text = (f"bug: {signature}\nminimized to: {small.case.summary()}\n{small.verdict.render()}\n"
                f"fixture: {path}\nreplay:  {replay}")
        report.sections.append((f"tritonfuzz regression fixture ({signature})", text))
        report.user_properties.append(("tritonfuzz_fixture", {
            "op": failure.implementation.op, "implementation": failure.implementation.name,
            "path": str(path), "replay": replay, "bug": signature}))
    for message in item.stash.get(MINIMIZE_ERRORS, []):
        report.user_properties.append(("tritonfuzz_suite_error", {
            "op": failure.implementation.op, "implementation": failure.implementation.name,
            "message": f"{message} (the unminimized case was saved); this is the suite's error, please report it"}))


def smallest_still_failing(item, failure: Failure) -> Failure:
    """The minimized failure; the original when it no longer fails on replay (a race?) or when
    minimizing breaks (then the fixture is still written, and the suite's error reported)."""
    try:
        small = minimized(failure, budget_s=item.config.getoption("minimize_budget"))
    except Exception as e:
        item.stash.setdefault(MINIMIZE_ERRORS, []).append(f"minimizing {failure.case.summary()} failed: "
                                                           f"{type(e).__name__}: {e}")
        return failure
    if not small.verdict.failures(judge_exact=small.options.judge_exact, strict=small.options.strict):
        return failure
    return small


class GateSummary:
    """On the controller: merges tallies, fixtures, static findings and crashes per implementation;
    prints the verdict tables (gate runs, or when --gate-report is given) and writes the JSON."""

    def __init__(self, config):
        self.config = config
        self.summaries: dict[tuple[str, str], ImplementationSummary] = {}
        self.fixtures: list[dict] = []

    def summary(self, op: str, name: str) -> ImplementationSummary:
        key = (op, name)
        if key not in self.summaries:
            self.summaries[key] = ImplementationSummary(op, name, strict=strict(self.config))
        return self.summaries[key]

    def pytest_runtest_logreport(self, report):
        impl = implementation_key(report)
        if impl is not None:
            s = self.summary(*impl)
            s.elapsed_s += report.duration
            suite_only = report.failed and any(n == "tritonfuzz_suite_error" for n, _ in report.user_properties) \
                and not any(n == "tritonfuzz_fixture" for n, _ in report.user_properties)
            if report.failed and not suite_only and report.when != "setup":  # a setup error: the suite's, below
                s.tests_failed += 1
            s.record_test(report.nodeid, report.when, report.outcome,
                          accounting.not_run_reason(report) if report.skipped or report.failed else "")
            if report.skipped and TEST_KINDS.get(report.nodeid.split("::")[-1].split("[")[0]) == "judge":
                s.judge_official["skipped"] += 1
        if report.when not in ("call", "???"):  # item properties repeat on every phase's report
            return
        for name, value in report.user_properties:
            if name == "tritonfuzz_tally":
                self.summary(value["op"], value["implementation"]).merge_tally(value, passed=report.passed)
            elif name == "tritonfuzz_fixture":
                entry = {"path": value["path"], "replay": value["replay"], "bug": value.get("bug", "")}
                fixtures = self.summary(value["op"], value["implementation"]).new_fixtures
                if entry["path"] not in {f["path"] for f in fixtures}:  # one case can come from several tests
                    fixtures.append(entry)
                    self.fixtures.append(value)
            elif name == "tritonfuzz_static":
                self.summary(value["op"], value["implementation"]).static_findings += value["findings"]
            elif name == "tritonfuzz_crash":
                self.summary(value["op"], value["implementation"]).crashes.append(value["message"])
            elif name == "tritonfuzz_suite_error":
                self.summary(value["op"], value["implementation"]).suite_errors.append(value["message"])

    def pytest_sessionfinish(self, session):
        """--memcheck replays; exit code 1 when it finds an invalid access, 3 when the suite itself
        failed and the kernels gave no failure of their own; in a gate, 5 (pytest's "no tests ran")
        when an implementation's tests did not all run and pytest would have said 0."""
        self.memcheck_replays()
        summaries = self.summaries.values()
        if any(s.memcheck and s.memcheck["status"] == "fail" for s in summaries) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if any(s.suite_errors for s in summaries) and not any(s.verdict == "FAIL" for s in summaries):
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        if self.config.stash[KERNELS] and not self.config.option.collectonly:  # collecting runs nothing
            verdict = overall_verdict(self.reported())
            if verdict == "ERROR":
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            elif verdict in ("NOT RUN", "INCOMPLETE") and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED

    def reported(self) -> list[ImplementationSummary]:
        """The implementations the verdict is about (those under test, in a gate), each with every
        test collected for it: those that never reported never started."""
        under_test = {(op, i.name) for op, loaded in self.config.stash[KERNELS].items()
                      for lk in loaded for i in lk.implementations}
        for key in under_test:
            self.summary(*key)
        tests, deselected = accounting.read(inflight_dir())
        for nodeid, key in tests.items():
            if key in self.summaries:
                self.summaries[key].collected.add(nodeid)
        for key, n in deselected.items():
            if key in self.summaries:
                self.summaries[key].deselected = n
        return [s for key, s in self.summaries.items() if not under_test or key in under_test]

    def memcheck_replays(self):
        config = self.config
        if not config.getoption("memcheck") or not config.stash[KERNELS]:
            return
        from oracles.compute_sanitizer import memcheck_replay
        for op, loaded in config.stash[KERNELS].items():
            for lk in loaded:
                if not GPU:
                    result = {"status": "not run", "errors": 0, "command": "",
                              "messages": ["--memcheck needs a GPU (the CPU tier checks every access itself)"]}
                else:
                    result = memcheck_replay(f"{op}={lk.source}", config.getoption("regressions_dir"), ROOT,
                                             timeout_s=900)
                for impl in lk.implementations:
                    self.summary(op, impl.name).memcheck = result

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        """A worker died (segfault, heap corruption, or our hang watchdog) while running a kernel:
        turn its in-flight case into a verdict and a fixture; xdist replaces the worker."""
        message = crashed_case_verdict(self.config, report)
        if not message:  # no case in flight: still the crash of this test, charged to its implementation
            key = accounting.read(inflight_dir())[0].get(crashitem)
            if key is not None:
                message = {"op": key[0], "implementation": key[1], "message": (
                    f"crashed while running {crashitem}, outside a kernel call (no case in flight: the kernel's "
                    f"earlier calls may have corrupted the process, or tritonfuzz itself crashed)")}
        if message:
            report.longrepr = f"{report.longrepr}\n{message['message']}"
            report.user_properties.append(("tritonfuzz_crash", message))

    def pytest_terminal_summary(self, terminalreporter):
        config = self.config
        if config.option.collectonly:
            return
        gate = bool(config.stash[KERNELS]) or config.getoption("gate_report")
        for op, loaded in config.stash[KERNELS].items():
            for lk in loaded:
                for impl in lk.implementations:
                    s = self.summary(op, impl.name)
                    s.source, s.notes = lk.source, list(lk.notes)
        if self.fixtures and not gate:
            terminalreporter.section("tritonfuzz: new regression fixtures")
            for f in self.fixtures:
                terminalreporter.write_line(f"{f['path']}\n  replay: {f['replay']}")
        if not gate:
            return
        budget = config.getoption("gate_budget")
        summaries = self.reported()
        terminalreporter.section("tritonfuzz verdict")
        for s in summaries:
            terminalreporter.write_line(render_table(s, budget))
            terminalreporter.write_line("")
        path = config.getoption("gate_report")
        if path:
            report = report_json(summaries, device=device(), profile=settings._current_profile, budget_s=budget)
            Path(path).write_text(dumps(report))
            terminalreporter.write_line(f"gate report written to {path}")


def implementation_key(report):
    """(op, implementation name) of a test report, from its parametrization id."""
    for name, value in report.user_properties:
        if name in ("tritonfuzz_impl", "tritonfuzz_crash"):
            return value["op"], value["implementation"]
    return None
