"""tritonfuzz's pytest wiring: interpreter decision, profiles, options, implementations under
test, and what happens when a property fails (minimize, write a fixture, say how to replay).

TRITON_INTERPRET is decided here, first, before any kernel module is imported: @triton.jit
binds interpreter mode when it decorates.
"""

import os

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
if INTERPRETED:
    from kernels.interpreter import enable_bf16_arithmetic

    enable_bf16_arithmetic()

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from kernels.loader import KernelLoadError, bundled_implementations, load_kernel, parse_kernel_option  # noqa: E402
from oracles.differential import RunOptions, run_case  # noqa: E402
from oracles.failures import Failure, KernelCheckFailed, failure_message, minimized, record_fixture  # noqa: E402
from oracles.registry import OPS  # noqa: E402

ROOT = Path(__file__).parent

# Triton compiles on a first call (seconds on a GPU, per-launch Python under the interpreter):
# no deadlines anywhere, and the slow-data health check is off for the same reason. Function
# fixtures are per-test state (the failure record), which is what the check guards against.
_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
settings.register_profile("ci", derandomize=True, max_examples=12, deadline=None, database=None,
                          print_blob=True, suppress_health_check=_QUIET)
settings.register_profile("dev", max_examples=40, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.register_profile("gate", max_examples=400, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.register_profile("soak", max_examples=5000, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile("dev")

KERNELS = pytest.StashKey[dict]()          # op -> list[LoadedKernel] from --kernel
FAILURE = pytest.StashKey[Failure]()       # the last failing case of a test (Hypothesis replays the shrunk one last)


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


def pytest_configure(config):
    for op in OPS:
        config.addinivalue_line("markers", f"{op}: tests of the {op} op (select with -m {op})")
    config.addinivalue_line("markers", "gpu: needs a GPU (skipped under the CPU interpreter)")
    pin_xdist_worker_to_gpu()
    kernels = {}
    for value in config.getoption("kernel"):
        try:
            op, path = parse_kernel_option(value)
            kernels.setdefault(op, []).append(load_kernel(op, path))
        except KernelLoadError as e:
            raise pytest.UsageError(str(e)) from None
    config.stash[KERNELS] = kernels
    config.pluginmanager.register(FixtureSummary(), "tritonfuzz-fixture-summary")
    if kernels and config.getoption("hypothesis_profile", None) is None:
        settings.load_profile("gate")


def pin_xdist_worker_to_gpu():
    """Under xdist each worker takes one GPU, round robin over the visible devices."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if GPU and worker.startswith("gw"):
        torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())


def device() -> str:
    return "cuda" if GPU else "cpu"


def pytest_report_header(config):
    where = torch.cuda.get_device_name() if GPU else "CPU (Triton interpreter)"
    lines = [f"tritonfuzz: device {where}; TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r}; "
             f"hypothesis profile {settings._current_profile}"]
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
    selected_ops = set(config.stash[KERNELS])
    if not selected_ops:
        return
    keep, drop = [], []
    for item in items:
        (keep if any(item.get_closest_marker(op) for op in selected_ops) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def run_options(request) -> RunOptions:
    return RunOptions(device=device(), judge_exact=request.config.getoption("judge_exact"),
                      determinism=settings._current_profile == "gate")


class Fuzz:
    """What a property calls: run the case, and on failure remember it and raise a standalone message."""

    def __init__(self, node, options: RunOptions):
        self.node, self.options = node, options

    def check(self, case, implementation):
        __tracebackhide__ = True
        verdict = run_case(implementation.op, implementation.fn, case, self.options)
        if verdict.failures(judge_exact=self.options.judge_exact):
            self.node.stash[FAILURE] = Failure(case, implementation, verdict, self.options)
            raise KernelCheckFailed(failure_message(case, implementation, verdict, self.options))
        return verdict


@pytest.fixture
def fuzz(request, run_options) -> Fuzz:
    return Fuzz(request.node, run_options)


def kernel_option_for(config, implementation) -> str | None:
    for lk in config.stash[KERNELS].get(implementation.op, []):
        if implementation in lk.implementations:
            return lk.source
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    failure = item.stash.get(FAILURE, None)
    if call.when != "call" or not report.failed or failure is None:
        return
    del item.stash[FAILURE]
    small = minimized(failure, budget_s=item.config.getoption("minimize_budget"))
    if not small.verdict.failures(judge_exact=small.options.judge_exact):
        small = failure  # flaky under replay (a race?): keep the original case
    root = Path(item.config.getoption("regressions_dir"))
    path, replay = record_fixture(small, root, kernel_option=kernel_option_for(item.config, failure.implementation),
                                  custom_root=root.resolve() != (ROOT / "tests" / "regressions").resolve())
    text = (f"minimized to: {small.case.summary()}\n{small.verdict.render()}\n"
            f"fixture: {path}\nreplay:  {replay}")
    report.sections.append(("tritonfuzz regression fixture", text))
    report.user_properties.append(("tritonfuzz_fixture", f"{path} :: {replay}"))


class FixtureSummary:
    """Collects the fixtures written during the session (from every xdist worker) for the summary."""

    def __init__(self):
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report):
        self.lines += [value for name, value in report.user_properties if name == "tritonfuzz_fixture"]

    def pytest_terminal_summary(self, terminalreporter):
        if self.lines:
            terminalreporter.section("tritonfuzz: new regression fixtures")
            for line in dict.fromkeys(self.lines):
                terminalreporter.write_line(line)
