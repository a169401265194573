"""tritonfuzz's pytest plugin (conftest.py loads it): options, profiles, the implementations under
test, the ops' parametrization, the fixtures a property uses, and what happens when a property
fails (minimize, write a fixture, say how to replay). The verdict table is oracles/gate/summary.py.
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from hypothesis import settings
from hypothesis.errors import InvalidArgument

from oracles.gate import accounting, profiles
from oracles.gate.fuzz import (FAILURES, GPU_SHARING, KERNELS, MINIMIZE_ERRORS, ROOT, BudgetSpent, Fuzz, _suite_errors,
                               end_when_budget_spent, is_custom_root, kernel_option_for, skip_if_device_lost, strict)
from oracles.gate.constant_pool import freeze_local_constants
from oracles.gate.summary import GateSummary
from oracles.gate.report import judge_never_sends
from oracles.gate.worker_exit import BoundedWorkerExit
from oracles.harness.differential import RunOptions
from oracles.harness.failures import Failure, failure_signature, minimized, record_fixture
from oracles.harness.inflight import inflight_dir
from oracles.harness.memory import (apply_process_limit, call_limit_bytes, check_memory_limit_option, fmt_bytes,
                                    limit_bytes, process_limit)
from oracles.ops import OPS
from oracles.platform import mps
from oracles.platform.device import cores_share, gpu_available, gpu_lock_path, interpreted, suite_device
from oracles.platform.interrupts import raise_keyboard_interrupt
from oracles.platform.mps import start_private_mps, stop_private_mps
from oracles.submission.loader import IMPORT_PROBE_TIMEOUT_S, KernelLoadError, bundled_implementations, load_kernel, parse_kernel_option
from strategies.case import BEYOND_INT32
from strategies.fixtures import DEFAULT_REGRESSIONS_DIR

settings.load_profile(profiles.DEFAULT_PROFILE)


def pytest_addoption(parser):
    group = parser.getgroup("tritonfuzz")
    group.addoption("--kernel", action="append", default=[], metavar="OP=PATH",
                    help="test an outside implementation of OP: a .py defining OP() or reference(), or a "
                         "competition .zip; only OP's tests run (repeatable)")
    group.addoption("--regressions-dir", default=str(DEFAULT_REGRESSIONS_DIR), metavar="DIR",
                    help="where regression fixtures are replayed from and written to (default: tests/regressions)")
    group.addoption("--judge-exact", action="store_true",
                    help="demand torch.topk's exact tie order on this device (default: a tie ordered "
                         "differently is a judge risk, not a failure)")

    group.addoption("--minimize-budget", type=float, default=20.0, metavar="SECONDS",
                    help="time for minimizing a failing case before its fixture is written (default 20)")
    group.addoption("--gate-budget", type=float, default=None, metavar="SECONDS",
                    help="fuzzing time per property test and implementation; past it the test stops "
                         "drawing cases and the verdict table says how far it got (default: no limit)")
    group.addoption("--gate-shards", type=positive_int, default=None, metavar="N",
                    help="draw cases in N property tests at once, each in its own xdist worker for the whole "
                         "--gate-budget (default 1; with N > 1 and no -n, N + 2 workers)")
    group.addoption("--gate-mps", choices=("auto", "off"), default="auto",
                    help="with --gate-shards > 1 on a GPU, the shards share it through CUDA MPS, a private "
                         "daemon started for the run (auto, the default) or take turns on it (off); under MPS a "
                         "device fault's case is replayed alone before it is named (oracles/platform/mps.py)")
    group.addoption("--gate-report", default=None, metavar="PATH",
                    help="also write the verdict tables as JSON (schema: oracles/gate/report.schema.json)")
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
    if config.getoption("kernel") and not hasattr(config, "workerinput"):
        decide_gate_shards(config)
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


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


SHARDS_ENV = "_TRITONFUZZ_GATE_SHARDS"  # the controller's decision; workers inherit it and collect alike


def decide_gate_shards(config) -> None:
    """How many property tests draw at once in a gate (--gate-shards, default 1), and the xdist
    workers (-n) when the user gave none: one, or the shards and two more for the other tests.

    Why shards: a drawn case's Triton compiles run on the CPU, one process each, so a GPU gate
    drawing in one process leaves the GPU and most cores idle; eight shards draw several times
    the cases in the same budget (tests/results/2026-12-02-h200-session12.md). Why not by default:
    they need a core each and a worker's start, and a whole sharded gate has not yet ended as
    soon as one worker's. Each shard draws its own cases for the whole budget; under a
    derandomized profile or a forced seed every shard would draw the same ones."""
    xdist = config.pluginmanager.hasplugin("xdist")
    workers = config.getoption("numprocesses", None) if xdist else 0
    shards = config.getoption("gate_shards") or 1
    if shards > 1 and _derandomized(config):
        raise pytest.UsageError(f"--gate-shards {shards}: the Hypothesis profile draws the same cases in every "
                                f"shard (derandomize=True); use the gate profile or --gate-shards 1")
    if shards > 1 and config.getoption("hypothesis_seed", None) is not None:
        raise pytest.UsageError(f"--gate-shards {shards}: --hypothesis-seed gives every shard the same cases; "
                                f"leave it out or use --gate-shards 1")
    if shards > 1 and not xdist:
        raise pytest.UsageError(f"--gate-shards {shards}: draws in xdist workers, and xdist is not loaded "
                                f"(install pytest-xdist, leave out -p no:xdist)")
    counted = worker_count(config, workers) if shards > 1 and workers is not None else None
    if counted is not None and counted < shards:
        raise pytest.UsageError(f"--gate-shards {shards}: needs at least {shards} xdist workers to draw at once, "
                                f"got {counted} (-n {workers}); leave -n out (it is then {shards + 2}) or give more")
    if workers is None and xdist:
        config.option.numprocesses = 1 if shards == 1 else shards + 2
    if shards > 1:
        # xdist first hands each worker max(2, min(maxschedchunk, tests per worker // 4)) consecutive
        # tests; spread_shards puts one other test after each shard, so the chunk must be 2.
        config.option.maxschedchunk = 1
    os.environ[SHARDS_ENV] = str(shards)


def worker_count(config, workers) -> int:
    """The xdist workers -n asks for: "auto" and "logical" as xdist counts them (its own hook),
    capped by --maxprocesses."""
    if workers in ("auto", "logical"):
        try:
            counted = config.hook.pytest_xdist_auto_num_workers(config=config)
        except Exception:  # noqa: BLE001 -- an xdist without the hook: the cores
            counted = None
        workers = int(counted) if counted else (os.cpu_count() or 1)
    cap = config.getoption("maxprocesses", None)
    return min(int(workers), cap) if cap else int(workers)


def _derandomized(config) -> bool:
    profile = config.getoption("hypothesis_profile", None) or profiles.GATE_PROFILE
    try:
        return settings.get_profile(profile).derandomize
    except InvalidArgument:  # a profile registered later (the engine's): not a gate's
        return False


def gate_shards() -> int:
    return int(os.environ.get(SHARDS_ENV) or 1)


def dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 PID` prints every thread's Python stack of that process (controller or worker)
    on its stderr: how to see where a run that does not end is waiting (a gate on an H200 once
    hung after its last test, in xdist's teardown, 2026-12-02)."""
    if hasattr(signal, "SIGUSR1") and sys.__stderr__ is not None:
        try:
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
        except (ValueError, OSError, io.UnsupportedOperation):  # no usable stderr file descriptor
            pass


SIGTERM_BEFORE = pytest.StashKey()  # the SIGTERM handler stop_on_sigterm replaced


def stop_on_sigterm(config) -> None:
    """SIGTERM (a shell's timeout, a CI runner, a judge's harness) ends the run as Ctrl-C does:
    pytest stops its workers, the verdict says INCOMPLETE, and pytest_unconfigure stops the
    private MPS daemon and removes the run's temporary folder. Left to its default, SIGTERM ended
    the process on the spot and left both behind. A handler someone else installed is kept."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        try:
            config.stash[SIGTERM_BEFORE] = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
        except ValueError:  # not the main thread (pytest run from a thread): left as it is
            pass


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        # Not an xdist worker, whatever the environment says: a pytest started from inside a
        # worker's test inherits PYTEST_XDIST_WORKER, and would take itself for a worker that may
        # exit after a device fault or a hang.
        os.environ.pop("PYTEST_XDIST_WORKER", None)
        stop_on_sigterm(config)
    for op in OPS:
        config.addinivalue_line("markers", f"{op}: tests of the {op} op (select with -m {op})")
    config.addinivalue_line("markers", "gpu: needs a GPU (skipped under the CPU interpreter)")
    config.addinivalue_line("markers", "implementations(cases=None): run against every implementation under test "
                                       "of every op under test (cases: 'judge' or 'model', once per such case)")
    config.addinivalue_line("markers", "tally(role): the gate tally this test's verdicts go to: judge or fixture")
    pin_xdist_worker_to_gpu()
    share_cores_among_xdist_workers()
    dump_stacks_on_sigusr1()
    if not gpu_available():  # before any kernel module is imported (oracles/harness/memory.py: why not on a GPU)
        apply_process_limit(limit_bytes(config.getoption("memory_limit")))
    # The run's temporary folder, made by the controller before xdist starts workers: they inherit
    # where to record in-flight cases and find the zip members the controller unpacked.
    workdir = inflight_dir(fresh=not hasattr(config, "workerinput")) / "kernels"
    config.pluginmanager.register(accounting.CollectionRecorder(inflight_dir()), "tritonfuzz-collected")
    if not hasattr(config, "workerinput"):  # fixtures newer than this are not collected (tests/kernel/test_regressions.py)
        os.environ["_TRITONFUZZ_RUN_STARTED"] = repr(time.time())
    kernels = {}
    for value in config.getoption("kernel"):
        try:
            op, path = parse_kernel_option(value)
            # The controller imports each module in a child first (a crash or hang at import is then
            # a usage error, not the run's end); workers import what the controller already did.
            probe = None if hasattr(config, "workerinput") else IMPORT_PROBE_TIMEOUT_S
            kernels.setdefault(op, []).append(load_kernel(op, path, workdir=workdir, probe_timeout_s=probe))
        except KernelLoadError as e:
            raise pytest.UsageError(str(e)) from None
    config.stash[KERNELS] = kernels
    freeze_local_constants()
    if not hasattr(config, "workerinput"):  # the controller (or a plain run) sums up
        share_gpu_through_mps(config)
        config.pluginmanager.register(GateSummary(config), "tritonfuzz-gate-summary")
        config.pluginmanager.register(BoundedWorkerExit(config), "tritonfuzz-worker-exit")
    if kernels and config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(profiles.GATE_PROFILE)


def pytest_unconfigure(config):
    """The controller stops its MPS daemon and removes the run's temporary folder (workers share
    it), unless --keep-tmp."""
    if hasattr(config, "workerinput"):
        return
    if SIGTERM_BEFORE in config.stash:
        signal.signal(signal.SIGTERM, config.stash[SIGTERM_BEFORE])
    daemon = config.stash.get(MPS_DAEMON, None)
    if daemon is not None:
        stop_private_mps(daemon)
        os.environ.pop(mps.MARKER_ENV, None)
    folder = inflight_dir()
    if config.getoption("keep_tmp", False):
        print(f"tritonfuzz: temporary files kept in {folder}", file=sys.__stderr__)
        return
    import shutil
    shutil.rmtree(folder, ignore_errors=True)


MPS_DAEMON = pytest.StashKey()  # the private daemon this run started (oracles/platform/mps.py)


def share_gpu_through_mps(config) -> None:
    """A GPU gate drawing in several shards runs them under CUDA MPS (--gate-mps auto): the
    workers join a private daemon through their xdist specs' environment; the controller, which
    replays device faults alone, does not. Without it (no control binary, another gate's daemon)
    the shards take turns on the GPU as before, and the header says why."""
    config.stash[GPU_SHARING] = ""
    if gate_shards() <= 1 or not config.getoption("tx", None) or not gpu_available():
        return
    if config.getoption("gate_mps") == "off":
        config.stash[GPU_SHARING] = "the shards take turns on the GPU (--gate-mps off)"
        return
    if mps.running_daemon():  # someone's daemon: every client joins it already
        os.environ[mps.MARKER_ENV] = "shared"
        config.stash[GPU_SHARING] = f"the shards join the running MPS daemon ({mps.running_daemon()})"
        return
    daemon, why = start_private_mps()
    if daemon is None:
        config.stash[GPU_SHARING] = f"the shards take turns on the GPU (no MPS: {why})"
        return
    config.stash[MPS_DAEMON] = daemon
    config.option.tx = mps.with_worker_env(list(config.option.tx), daemon.env)
    os.environ[mps.MARKER_ENV] = "private"
    config.stash[GPU_SHARING] = f"the shards share the GPU through a private MPS daemon ({daemon.folder})"


def pin_xdist_worker_to_gpu():
    """Under xdist each worker takes one GPU, round robin over the visible devices."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if gpu_available() and worker.startswith("gw"):
        torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())


def share_cores_among_xdist_workers():
    """Under xdist each worker's torch takes its share of the cores for its own threads (unless
    OMP_NUM_THREADS says otherwise): by default every worker starts a thread per core, and on a
    16-core GPU host with 16 workers busy compiling, a CPU-only oracle test that takes about 1 s
    alone took 93-100 s (H200, 2026-12-02)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1 and os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(cores_share(workers))


def pytest_report_header(config):
    where = torch.cuda.get_device_name() if gpu_available() else "CPU (Triton interpreter)"
    lines = [f"tritonfuzz: device {where}; TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r}; "
             f"hypothesis profile {settings._current_profile}"]
    if not gpu_available():
        limit, call = process_limit(), call_limit_bytes(config.getoption("memory_limit"))
        lines.append(f"tritonfuzz: memory limit {fmt_bytes(limit) if limit else 'none'} a process, "
                     f"{fmt_bytes(call) if call else 'none'} a kernel call (--memory-limit)")
    if interpreted():
        from oracles.platform.interpreter import bf16_arithmetic_is_exact
        lines.append(f"tritonfuzz: interpreter bf16 arithmetic exact: {bf16_arithmetic_is_exact()}")
    if config.stash.get(GPU_SHARING, ""):
        lines.append(f"tritonfuzz: {config.stash[GPU_SHARING]}")
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


def ops_under_test(config) -> list[str]:
    """The ops a run is about: those given with --kernel, else every registered op."""
    return list(config.stash[KERNELS]) or list(OPS)


def sharded(metafunc) -> bool:
    """A property over drawn cases (a Hypothesis test taking `fuzz`) runs in --gate-shards shards
    when there are several. The shard reaches it through the `fuzz` fixture, not its signature:
    a derandomized profile seeds a property from its source and signature, and the ci profile's
    cases must stay those the suite's claims were measured on. With one shard nothing is
    parametrized (HypoFuzz skipped the property when its `shard` fixture was)."""
    return gate_shards() > 1 and "shard" in metafunc.fixturenames and \
        getattr(metafunc.function, "is_hypothesis_test", False)


def pytest_generate_tests(metafunc):
    """A test marked `implementations` runs against every implementation under test of every op
    under test; with cases="judge" or "model", once per such case of the implementation's op
    (as `case`). Each parameter carries its op's marker (-m OP)."""
    marker = metafunc.definition.get_closest_marker("implementations")
    if marker is None:
        return
    which = marker.kwargs.get("cases")
    params = []
    for op in ops_under_test(metafunc.config):
        spec, marks = OPS[op], [getattr(pytest.mark, op)]
        impls = implementations_under_test(metafunc.config, op)
        if which is None and sharded(metafunc):
            params += [pytest.param(impl, shard, id=f"{op}-{impl.name}-shard{shard}", marks=marks)
                       for impl in impls for shard in range(gate_shards())]
            continue
        if which is None:
            params += [pytest.param(impl, id=f"{op}-{impl.name}", marks=marks) for impl in impls]
            continue
        for case in spec.named_cases(which, suite_device()):
            label = case.label.replace(" ", "-")
            gpu_only = [] if spec.runs_on_cpu(case) else [pytest.mark.gpu]
            params += [pytest.param(case, impl, id=f"{label}-{impl.name}", marks=marks + gpu_only) for impl in impls]
    names = "case,implementation" if which else "implementation,shard" if sharded(metafunc) else "implementation"
    if not params:
        params = [pytest.param(*([None] * len(names.split(","))), id="none",
                               marks=pytest.mark.skip(reason=f"no {which or 'implementation'} cases"))]
    metafunc.parametrize(names, params)


def item_role(node) -> str:
    """Which tally a test's verdicts go to: its `tally` marker (judge, fixture), else fuzz."""
    marker = node.get_closest_marker("tally")
    return marker.args[0] if marker else "fuzz"


def pytest_collection_modifyitems(config, items):
    # The beyond-2^31-element cases run last: a kernel whose offsets overflow can fault the GPU,
    # and a faulted CUDA context fails whatever that process runs after it.
    items.sort(key=lambda item: "beyond_int32" in getattr(item, "fixturenames", ()))
    for item in items:
        end_when_budget_spent(item)
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
    if gate_shards() > 1:
        items[:] = spread_shards(items)


def spread_shards(items: list) -> list:
    """A property's shards apart in the run order, each followed by another test: xdist hands a
    worker two consecutive tests at first, and two shards side by side ran one after the other in
    one worker. The beyond-2^31 tests stay last."""
    last, shards, others = [], [], []
    for item in items:
        if "beyond_int32" in getattr(item, "fixturenames", ()):
            last.append(item)
        elif "shard" in getattr(getattr(item, "callspec", None), "params", {}):
            shards.append(item)
        else:
            others.append(item)
    spread = []
    for n, shard in enumerate(shards):
        spread.append(shard)
        if n < len(others):
            spread.append(others[n])
    return spread + others[len(shards):] + last


@pytest.fixture(scope="session")
def run_options(request) -> RunOptions:
    # TRITONFUZZ_SANITIZE=0: no guard bands (set for the compute-sanitizer replay of --memcheck,
    # where an access into a guard band would be an access into memory the process owns).
    sanitize = os.environ.get("TRITONFUZZ_SANITIZE", "1") != "0"
    # A gate, and long runs on HypoFuzz (python -m oracles.tools.engine: profiles fuzz, fuzz-replay), also
    # run each case twice and compile for the AMD-class target.
    gate = settings._current_profile in ("gate", "fuzz", "fuzz-replay")
    return RunOptions(device=suite_device(), judge_exact=request.config.getoption("judge_exact"),
                      strict=strict(request.config), determinism=gate, portability=gate, sanitize=sanitize,
                      alloc_limit=call_limit_bytes(request.config.getoption("memory_limit")))


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
    # One such case at a time on a GPU, across every process of the machine, and its memory given
    # back before the next: each holds 9-13 GiB, and on an H100 (2026-12-06, the native suite on 16
    # workers) two of them beside two caching allocators still holding 7 GiB left other tests'
    # small allocations out of memory. The lock is a flock: a worker killed mid-case releases it.
    with FileLock(gpu_lock_path("beyond-int32")):
        yield need_bytes
        torch.cuda.empty_cache()


@pytest.fixture
def shard() -> int:
    """Which of a property's --gate-shards this is (parametrized by pytest_generate_tests)."""
    return 0


@pytest.fixture
def fuzz(request, run_options, shard) -> Fuzz:
    skip_if_device_lost()
    config = request.config
    return Fuzz(request.node, run_options, budget_s=config.getoption("gate_budget"),
                case_timeout_s=config.getoption("case_timeout"),
                kind=item_role(request.node))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    fuzz = getattr(item, "funcargs", {}).get("fuzz")
    impl = getattr(getattr(item, "callspec", None), "params", {}).get("implementation")
    if call.excinfo is not None and isinstance(fuzz, Fuzz) and impl is not None:  # a draw's lost context, under MPS
        fuzz.end_worker_if_context_lost(call.excinfo.value, impl)
    if call.when == "call" and call.excinfo is not None and isinstance(call.excinfo.value, BudgetSpent) \
            and isinstance(fuzz, Fuzz):
        report.outcome, report.longrepr = "passed", None  # its budget ended a gate property: every case passed
    report.user_properties = list(report.user_properties)  # pytest shares one list across phases
    if impl is not None:
        report.user_properties.append(("tritonfuzz_impl", {"op": impl.op, "implementation": impl.name,
                                                           "role": item_role(item)}))
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
            replay = (f"pytest {kernel}tests/kernel/test_ops.py -m {failure.implementation.op} -k beyond_int32  "
                      f"(on a GPU with the memory)")
            report.sections.append((f"tritonfuzz: how to reproduce ({signature})",
                                    f"bug: {signature}\n{failure.verdict.render()}\nreproduce: {replay}"))
            report.user_properties.append(("tritonfuzz_fixture", {
                "op": failure.implementation.op, "implementation": failure.implementation.name,
                "path": "(no fixture: the case is its size, rebuilt by the test)", "replay": replay, "bug": signature}))
            continue
        small = failure if failure.verdict.device_lost else smallest_still_failing(item, failure)
        path, replay = record_fixture(small, root, kernel_option=kernel_option_for(item.config, failure.implementation),
                                      custom_root=is_custom_root(root))
        # After a device fault nothing may run on this process's GPU, a reduction over its inputs included.
        nonfinite = () if failure.verdict.device_lost else small.case.nonfinite_inputs()
        if nonfinite:
            failure_signature(small)  # runs the fixture case's finite twin: does the bug need the NaN?
        twin = small.finite_twin if nonfinite else ""
        note = f"{judge_never_sends(nonfinite, twin)}\n" if nonfinite else ""
        text = (f"bug: {signature}\nminimized to: {small.case.summary()}\n{note}{small.verdict.render()}\n"
                f"fixture: {path}\nreplay:  {replay}")
        report.sections.append((f"tritonfuzz regression fixture ({signature})", text))
        report.user_properties.append(("tritonfuzz_fixture", {
            "op": failure.implementation.op, "implementation": failure.implementation.name,
            "path": str(path), "replay": replay, "bug": signature, "nonfinite_inputs": nonfinite, "finite_twin": twin}))
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
