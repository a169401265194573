"""Long fuzzing on HypoFuzz: the suite's properties as fuzz targets for hours, across worker
processes, GPUs and hosts, with one shared example database.

    python -m oracles.tools.engine [--kernel OP=PATH]... [--seconds S] [--workers N] [-- PYTEST_ARGS]
    python -m oracles.tools.engine replay [--kernel OP=PATH]...        # fixtures from the database
    python -m oracles.tools.engine status                               # inputs and failures per test

HypoFuzz (`pip install -e .[fuzz]`; AGPL-3.0, so an optional extra, never imported by the
suite itself) collects @given tests with pytest and fuzzes each one -- here each property of
each implementation under test -- coverage-guided, with `hypothesis.target()` values as extra
behaviors. The properties run unchanged: HypoFuzz sets up a test's pytest fixtures
(`implementation`, `fuzz`, `run_options`) itself, once each time a worker switches to the
test rather than once per input, which is exactly how a plain pytest call of a @given test
uses them (conftest.py's Fuzz keeps one tally across a test's inputs).

How the pieces fit:

- Workers. One process per worker, each pinned to one GPU (CUDA_VISIBLE_DEVICES, round robin
  over the visible GPUs, as pytest -n does through conftest.pin_xdist_worker_to_gpu); on a CPU
  host, one per core under the Triton interpreter. Each runs one HypoFuzz FuzzWorker over
  every collected test (worker_main: `hypothesis fuzz` without its hub, which ends workers
  whose 100-input rounds take over a minute and forks them after CUDA is in use). A worker
  that dies -- a kernel that segfaults kills its process -- is started again; HypoFuzz stops
  fuzzing a test at its first failure, and a worker whose tests have all failed ends.
- Dashboard. HypoFuzz's own, in a process of its own, reading the database.
- Database. Every worker, the dashboard and `replay` use the `fuzz` profile, whose example
  database is TRITONFUZZ_DATABASE: a directory (default .hypothesis/examples), or
  redis://HOST:PORT/DB for several hosts (Hypothesis's RedisExampleDatabase).
- Failures. HypoFuzz stores each failing input where Hypothesis keeps failing examples (the
  test's key; unshrunk ones under its secondary key). `replay` runs pytest over the same tests
  under the `fuzz-replay` profile (reuse and shrink phases only): each stored failure fails its
  test again and conftest.py minimizes it and writes the JSON fixture with its replay command,
  the same path every pytest tier takes. A run replays whenever the database holds failures it
  has not replayed yet, and when it ends.

This module is also the pytest plugin those runs load (`-p oracles.tools.engine`): it registers the
two profiles and gives every @given test the database key HypoFuzz gives it (the test's digest
with its node id, so that each implementation has its own key).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from oracles.platform.interrupts import raise_keyboard_interrupt, signal_group
from strategies.fixtures import DEFAULT_REGRESSIONS_DIR

ROOT = Path(__file__).resolve().parents[2]
DATABASE_ENV = "TRITONFUZZ_DATABASE"
DEFAULT_DATABASE = ".hypothesis/examples"  # Hypothesis's own default, resolved against the working directory
REPLAY_PHASES = (Phase.explicit, Phase.reuse, Phase.shrink)
INSTALL_HINT = "HypoFuzz is an optional extra (AGPL-3.0): pip install -e .[fuzz]"
WORKER_COMMAND, DASHBOARD_COMMAND = "_worker", "_dashboard"  # internal: what the engine's children run
MAX_RESTARTS = 20  # a worker that died (a kernel that segfaults...) is started again, this many times at most
FUZZING_LINE = "fuzzing"  # a worker's log line once it has collected its tests: a death after it is a crash
TEST_KEYS = b"hypofuzz.test_keys"  # where HypoFuzz lists the database keys of the tests it has fuzzed


class EngineUsageError(ValueError):
    """Bad input to the engine; the message is one line naming the argument."""


# ---------------------------------------------------------------------------------------------
# The example database and the pytest plugin (-p oracles.tools.engine)


def database_spec(spec: str | None = None) -> str:
    """The database the `fuzz` profiles use: `spec`, else $TRITONFUZZ_DATABASE, else
    .hypothesis/examples; a directory is made absolute (workers may run elsewhere)."""
    spec = (spec if spec is not None else os.environ.get(DATABASE_ENV, "")).strip() or DEFAULT_DATABASE
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return spec
    if "://" in spec:
        raise EngineUsageError(f"--database {spec!r}: expected a directory or redis://HOST:PORT/DB")
    return str(Path(spec).expanduser().resolve())


def example_database(spec: str | None = None):
    """A Hypothesis example database from a database_spec: DirectoryBasedExampleDatabase, or
    RedisExampleDatabase over redis.Redis.from_url (the `redis` package comes with .[fuzz]).
    One object per spec and process: HypoFuzz skips a test whose database differs from the
    profile's, and two Redis clients of one server are not equal."""
    return _database(database_spec(spec))


@functools.cache
def _database(spec: str):
    if "://" not in spec:
        from hypothesis.database import DirectoryBasedExampleDatabase
        return DirectoryBasedExampleDatabase(spec)
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise EngineUsageError(f"--database {spec}: a Redis database needs the redis package: "
                               f"pip install -e .[fuzz]") from None
    try:
        client = redis.Redis.from_url(spec)
    except ValueError as e:
        raise EngineUsageError(f"--database {spec}: {e}") from None
    return RedisExampleDatabase(client)


def hypofuzz_compatibility() -> None:
    """Two gaps between HypoFuzz 25.11.1 and this suite's Hypothesis 6.170 / pytest 9, each of
    which stops a worker for good:

    - HypoFuzz copies a shrunk failure's explain-phase comments as `slice_comments`, which
      Hypothesis now calls `span_comments`: an AttributeError right after shrinking the first
      failure, before the shrunk case is stored. An alias, only where the old name is missing.
    - A worker switching to a test sets up the test's fixtures through the item's pytest
      request, whose cache can hold a fixture value torn down at an earlier switch away: pytest
      9 then refuses it ("The fixture value for "fuzz" is not available. This can happen when
      the fixture has already been torn down", seen once after a worker had fuzzed two tests;
      the exact sequence was not reproduced in isolation). A fresh request first, as pytest's
      own runner makes one for each run of an item.
    """
    from hypothesis.internal.conjecture.data import ConjectureData, ConjectureResult
    if not hasattr(ConjectureResult, "slice_comments") and "span_comments" in ConjectureResult.__dataclass_fields__:
        ConjectureResult.slice_comments = property(lambda self: self.span_comments)
        ConjectureData.slice_comments = property(lambda self: self.span_comments,
                                                 lambda self, value: setattr(self, "span_comments", value))
    from hypofuzz.hypofuzz import FuzzTarget
    enter = FuzzTarget._enter_fixtures
    if not getattr(enter, "fresh_request", False):
        def _enter_fixtures(self):
            if self.pytest_item is not None and hasattr(self.pytest_item, "_initrequest"):
                self.pytest_item._initrequest()
            enter(self)
        _enter_fixtures.fresh_request = True
        FuzzTarget._enter_fixtures = _enter_fixtures


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin loads --hypothesis-profile
def pytest_configure(config):
    if "hypofuzz" in sys.modules:  # a HypoFuzz worker or dashboard collecting the tests
        hypofuzz_compatibility()
    try:
        database = example_database()
    except EngineUsageError as e:
        raise pytest.UsageError(f"{DATABASE_ENV}: {e}") from None
    # Long runs: the soak profile (targeting on), on the shared database.
    settings.register_profile("fuzz", parent=settings.get_profile("soak"), database=database)
    settings.register_profile("fuzz-replay", parent=settings.get_profile("fuzz"), phases=REPLAY_PHASES)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    # HypoFuzz keys each collected test by its digest plus its node id; Hypothesis's pytest
    # plugin adds the node id only to tests parametrized by marker, not by pytest_generate_tests
    # (the `implementation` parameter). Without this a replay would look under another key.
    inner = getattr(getattr(item.obj, "hypothesis", None), "inner_test", None)
    if inner is not None:
        inner._hypothesis_internal_add_digest = item.nodeid.encode()
    return (yield)


# ---------------------------------------------------------------------------------------------
# What the database says about a campaign


def _hypofuzz_database(database):
    from hypofuzz.database import HypofuzzDatabase
    return HypofuzzDatabase(database)


def campaign(database) -> list[dict]:
    """Per fuzzed test: node id, inputs run (all workers, all runs on this database), seconds of
    fuzzing, behaviors, and its failing inputs (shrunk, unshrunk) -- from HypoFuzz's reports."""
    from hypofuzz.database import FailureState
    hdb = _hypofuzz_database(database)
    rows = []
    for key in sorted(set(database.fetch(TEST_KEYS))):
        latest = {}  # a worker's reports are cumulative: its latest one counts
        for report in hdb.reports.fetch(key):
            if report.worker_uuid not in latest or report.elapsed_time > latest[report.worker_uuid].elapsed_time:
                latest[report.worker_uuid] = report
        reports = list(latest.values())
        shrunk = list(hdb.failures(state=FailureState.SHRUNK).fetch(key))
        unshrunk = list(hdb.failures(state=FailureState.UNSHRUNK).fetch(key))
        rows.append({
            "key": key.hex(), "nodeid": reports[-1].nodeid if reports else "?",
            "inputs": sum(sum(r.status_counts.values()) for r in reports),
            "seconds": sum(r.elapsed_time for r in reports),
            "behaviors": max((r.behaviors for r in reports), default=0),
            "workers": len(reports), "failures": len(shrunk) + len(unshrunk)})
    return rows


def failing_tests(database) -> frozenset[bytes]:
    """The keys of the tests with a failing input stored (shrunk, or still unshrunk under the
    secondary key). HypoFuzz stops fuzzing a test at its first failure, so a test enters this
    set once per bug: the engine replays when it grows."""
    return frozenset(key for key in set(database.fetch(TEST_KEYS))
                     if any(True for _ in database.fetch(key)) or any(True for _ in database.fetch(key + b".secondary")))


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kernel", action="append", default=[], metavar="OP=PATH",
                        help="fuzz an outside implementation of OP (a .py or a competition .zip), as pytest --kernel")
    common.add_argument("--regressions-dir", default=None, metavar="DIR",
                        help="where fixtures are written (default: tests/regressions)")
    common.add_argument("--database", default=None, metavar="DIR|URL",
                        help=f"the shared example database: a directory (default ${DATABASE_ENV}, else "
                             f"{DEFAULT_DATABASE}) or redis://HOST:PORT/DB")
    common.add_argument("--judge-exact", action="store_true", help="as pytest --judge-exact")
    common.add_argument("--minimize-budget", type=float, default=20.0, metavar="SECONDS",
                        help="minimizing time per failure before its fixture is written (default 20)")
    common.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                        help="more pytest arguments (e.g. -k two_launch, or test files to fuzz instead of the "
                             "op properties)")
    parser = argparse.ArgumentParser(prog="python -m oracles.tools.engine", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="{run,replay,status}")
    run = sub.add_parser("run", parents=[common], help="fuzz (the default command)")
    run.add_argument("--workers", "-n", type=int, default=None, metavar="N",
                     help="fuzz worker processes (default: one per GPU; on a CPU host one per core)")
    run.add_argument("--seconds", type=float, default=None, metavar="S",
                     help="stop after S seconds (default: run until Ctrl-C); fixtures are written either way")
    run.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                     help="serve HypoFuzz's dashboard (default on)")
    run.add_argument("--host", default="localhost", help="dashboard host (default localhost)")
    run.add_argument("--port", type=int, default=9999, help="dashboard port (default 9999)")
    run.add_argument("--exitfirst", "-x", action="store_true",
                     help="stop at the first failure stored in the database (its fixture is still written)")
    run.add_argument("--replay-every", type=float, default=300.0, metavar="S",
                     help="look for new failures in the database every S seconds and write their fixtures (default 300)")
    run.add_argument("--log-dir", default=None, metavar="DIR",
                     help="worker, dashboard and replay logs (default: a new temporary folder, kept)")
    sub.add_parser("replay", parents=[common],
                   help="write fixtures for every failure in the database (any host that sees it)")
    sub.add_parser("status", parents=[common], help="inputs run and failures per test, from the database")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    commands = {"run", "replay", "status", "-h", "--help"}
    argv = list(argv)
    if not argv or argv[0] not in commands:
        argv.insert(0, "run")
    args = _parser().parse_args(argv)
    from oracles.submission.loader import KernelLoadError, parse_kernel_option
    for value in args.kernel:
        try:
            _, path = parse_kernel_option(value)
        except KernelLoadError as e:
            raise EngineUsageError(str(e)) from None
        if not path.exists():
            raise EngineUsageError(f"--kernel {value}: no such file")
    if args.minimize_budget < 0:
        raise EngineUsageError(f"--minimize-budget {args.minimize_budget:g}: must be >= 0 seconds")
    args.database = database_spec(args.database)
    if args.command == "run":
        if args.workers is not None and args.workers < 1:
            raise EngineUsageError(f"--workers {args.workers}: must be at least 1")
        if args.seconds is not None and not args.seconds > 0:
            raise EngineUsageError(f"--seconds {args.seconds:g}: must be > 0 (leave it out to run until Ctrl-C)")
        if not args.replay_every > 0:
            raise EngineUsageError(f"--replay-every {args.replay_every:g}: must be > 0 seconds")
        if not 0 <= args.port <= 65535:
            raise EngineUsageError(f"--port {args.port}: must be in 0..65535")
    return args


def require_hypofuzz() -> None:
    try:
        import hypofuzz  # noqa: F401
    except ImportError:
        raise EngineUsageError(f"hypofuzz is not installed: {INSTALL_HINT}") from None


def engine_pytest_args(args, *, profile: str = "fuzz") -> list[str]:
    """What every pytest run of the engine gets: this plugin and its profile, the options of the
    tiers, and the op properties unless PYTEST_ARGS name tests. HypoFuzz collects without xdist
    (it has its own workers; with --kernel, conftest would hand the collection to one); the
    replay runs in one xdist worker, as a gate does, so that a kernel killing its process on a
    shrink candidate gets its crash fixture and the other replays still run."""
    xdist = ["-n", "1"] if profile == "fuzz-replay" else ["-p", "no:xdist"]
    out = ["-p", "oracles.tools.engine", *xdist, "-p", "no:cacheprovider", f"--hypothesis-profile={profile}"]
    for value in args.kernel:  # absolute: the children run in the repository, wherever the engine was started
        op, _, path = value.partition("=")
        out.append(f"--kernel={op}={Path(path).resolve()}")
    if args.regressions_dir:
        out.append(f"--regressions-dir={Path(args.regressions_dir).resolve()}")
    if args.judge_exact:
        out.append("--judge-exact")
    out.append(f"--minimize-budget={args.minimize_budget:g}")
    out += args.pytest_args
    names_tests = any(not a.startswith("-") and (Path(a.split("::")[0]).exists()) for a in args.pytest_args)
    if not names_tests:
        out.append("tests/kernel/test_ops.py")
    return out


def child_env(args, **extra) -> dict:
    # Each child is a pytest run of its own, never an xdist worker of the run that started the
    # engine (its tests do, under pytest -n): an inherited PYTEST_XDIST_WORKER made a HypoFuzz
    # worker record in-flight cases in a folder its own collection had already removed, and
    # every case failed with FileNotFoundError.
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith(("PYTEST_XDIST_", "_TRITONFUZZ_")) and k != "PYTEST_CURRENT_TEST"}
    env = dict(inherited, **{DATABASE_ENV: args.database}, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def visible_gpus() -> list[str]:
    """The GPUs a worker can be pinned to, as CUDA_VISIBLE_DEVICES entries."""
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip()][:count]
    return [str(i) for i in range(count)]


class EveryTestFailed(Exception):
    """A lone HypoFuzz worker has nothing left to fuzz (module docstring: Workers)."""


class _Assignment(dict):
    """The `hub_state` a lone FuzzWorker reads its tests from. The worker asks for them at the
    top of every round: there it stops, in its main thread, once each of its tests has failed
    (HypoFuzz's hub would end it then; alone it would spin)."""

    def __init__(self, nodeids: list[str]):
        super().__init__(nodeids=nodeids)
        self.worker = None

    def __getitem__(self, key):
        worker = self.worker
        if worker is not None and worker.targets and not worker.valid_targets:
            raise EveryTestFailed
        return super().__getitem__(key)


def worker_main(pytest_args: list[str]) -> int:
    """One HypoFuzz FuzzWorker in this process, fuzzing every collected test: what
    `hypothesis fuzz -n 1` runs under its hub, without the hub. The hub ends its workers when
    none has reported a finished round within a minute (every round is 100 inputs, longer than
    a minute under the interpreter and at GPU-size cases) and forks them from a process that
    has used CUDA. Exit 0 once every test has failed, 2 when nothing was collected."""
    from hypofuzz import detection
    from hypofuzz.collection import collect_tests
    from hypofuzz.hypofuzz import FuzzWorker
    hypofuzz_compatibility()
    detection._in_hypofuzz_run = True  # as HypoFuzz's own worker: tests can ask hypofuzz.detection
    nodeids = [target.nodeid for target in collect_tests(pytest_args).fuzz_targets]
    if not nodeids:
        print("no property test collected: nothing to fuzz", flush=True)
        return 2
    assignment = _Assignment(nodeids)
    worker = FuzzWorker(pytest_args=pytest_args, shared_state={
        "hub_state": assignment,
        "worker_state": {"nodeids": {}, "current_lifetime": 0.0, "expected_lifetime": 0.0, "valid_nodeids": []}})
    assignment.worker = worker
    print(f"{FUZZING_LINE} {len(nodeids)} test(s): " + ", ".join(nodeids), flush=True)
    try:
        worker.start()
    except EveryTestFailed:
        print("every test has failed or was skipped: nothing left to fuzz", flush=True)
    return 0


def dashboard_main(host: str, port: int, pytest_args: list[str]) -> int:
    from hypofuzz.dashboard.dashboard import start_dashboard_process
    hypofuzz_compatibility()
    start_dashboard_process(port, pytest_args=pytest_args, host=host, print_status=True)
    return 0


class Processes:
    """The engine's children (workers, the dashboard), each the leader of its own process group
    (a worker's compile processes go with it): stopped as a group, and only those."""

    def __init__(self):
        self.running: dict[str, subprocess.Popen] = {}
        self.how: dict[str, tuple] = {}  # name -> (command, env, log, started, log size at start)

    def start(self, name: str, command: list[str], env: dict, log: Path) -> None:
        offset = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            self.running[name] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True)
        self.how[name] = (command, env, log, time.monotonic(), offset)

    def log_since_start(self, name: str) -> str:
        log, offset = self.how[name][2], self.how[name][4]
        with open(log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def restart(self, name: str) -> None:
        command, env, log = self.how[name][:3]
        self.start(name, command, env, log)

    def ran_s(self, name: str) -> float:
        return time.monotonic() - self.how[name][3]

    def exited(self) -> dict[str, int]:
        return {name: p.returncode for name, p in self.running.items() if p.poll() is not None}

    def stop(self, grace_s: float = 10.0) -> None:
        for p in self.running.values():
            signal_group(p.pid, signal.SIGINT)  # a worker's queued database writes are flushed as Python exits
        deadline = time.monotonic() + grace_s
        for p in self.running.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.running.values():  # what is left of each group (a hung kernel ignores SIGINT)
            signal_group(p.pid, signal.SIGKILL)
            p.wait()


def replay(args, log: Path) -> tuple[int, list[dict]]:
    """pytest over the fuzzed tests under `fuzz-replay`: every failure stored in the database
    fails its test again and conftest.py writes its minimized fixture. Returns pytest's exit
    code and the fixtures, from the run's gate report."""
    with tempfile.TemporaryDirectory(prefix="tritonfuzz-replay-") as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pytest", *engine_pytest_args(args, profile="fuzz-replay"),
                   "-m", "hypothesis", f"--gate-report={report}", "-q"]
        with open(log, "ab") as out:
            out.write(f"\n$ {' '.join(command)}\n".encode())
            out.flush()
            code = subprocess.call(command, cwd=ROOT, env=child_env(args), stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        fixtures = []
        if report.exists():
            for impl in json.loads(report.read_text()).get("implementations", []):
                for f in impl.get("new_fixtures", []):
                    fixtures.append({"op": impl["op"], "implementation": impl["implementation"], **f})
    return code, fixtures


def new_fixture_files(root: Path, since: float) -> list[dict]:
    """Fixtures written since `since` (the workers write unsupported-input fixtures themselves)."""
    found = []
    for path in sorted(root.glob("*/*.json")):
        if path.name.startswith(".") or path.stat().st_mtime < since:
            continue
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found.append({"op": path.parent.name, "implementation": meta.get("kernel", {}).get("name", "?"),
                      "path": str(path), "replay": meta.get("replay", ""),
                      "bug": ", ".join(meta.get("failure", {}).get("checks", [])) + (
                          f" ({meta['failure']['severity']})" if meta.get("failure", {}).get("severity") else "")})
    return found


def render_status(rows: list[dict]) -> str:
    if not rows:
        return "  (no test fuzzed on this database yet)"
    names = {r["key"]: r["nodeid"].removeprefix("tests/") for r in rows}
    width = max(len("test"), *map(len, names.values()))
    lines = [f"  {'test':<{width}} {'inputs':>9} {'seconds':>9} {'behaviors':>9} {'stored failing inputs':>21}"]
    for r in sorted(rows, key=lambda r: names[r["key"]]):
        lines.append(f"  {names[r['key']]:<{width}} {r['inputs']:>9} {r['seconds']:>9.0f} {r['behaviors']:>9} "
                     f"{r['failures']:>21}")
    return "\n".join(lines)


def render_fixtures(fixtures: list[dict]) -> str:
    from oracles.gate.report import judge_never_sends  # imports torch: only once there is something to print
    seen, lines = set(), []
    for f in fixtures:
        if f["path"] in seen:
            continue
        seen.add(f["path"])
        note = f"    {judge_never_sends(f['nonfinite_inputs'], f.get('finite_twin', ''))}\n" if f.get("nonfinite_inputs") else ""
        lines.append(f"  {f['op']} / {f['implementation']}: {f.get('bug') or 'failure'}\n"
                     f"    fixture: {f['path']}\n{note}    replay:  {f['replay']}")
    return "\n".join(lines) if lines else "  none"


def run(args) -> int:
    regressions = Path(args.regressions_dir or DEFAULT_REGRESSIONS_DIR).resolve()
    log_dir = Path(args.log_dir).resolve() if args.log_dir else Path(tempfile.mkdtemp(prefix="tritonfuzz-engine-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    gpus = visible_gpus()
    workers = args.workers or len(gpus) or len(os.sched_getaffinity(0))
    database = example_database(args.database)
    started = time.time()
    pytest_args = engine_pytest_args(args)
    engine = [sys.executable, "-m", "oracles.tools.engine"]
    # SIGTERM (a shell's timeout, a CI runner, kill) stops the run as Ctrl-C does: it killed the
    # engine on the spot and left its workers, each in a session of its own, fuzzing on. SIGINT is
    # handled even where it was inherited ignored (a background job of a script): the engine stops
    # its workers by SIGINT, and a child execs with an ignored signal still ignored but a handled
    # one back to its default, so its workers ignored it, waited out the grace and were killed
    # with their database writes unflushed.
    previous = {sig: signal.signal(sig, raise_keyboard_interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    processes = Processes()
    where = (f"{workers} worker(s) on GPU(s) {', '.join(gpus[i % len(gpus)] for i in range(workers))}" if gpus
             else f"{workers} worker(s) on the CPU (Triton interpreter)")
    print(f"tritonfuzz engine: {where}; database {args.database}; fixtures to {regressions}; logs in {log_dir}",
          flush=True)

    def start_children() -> None:  # inside the try below: a stop signal meanwhile still stops them
        if args.dashboard:
            # The dashboard only reads the database: it never needs a GPU.
            processes.start("dashboard", [*engine, DASHBOARD_COMMAND, args.host, str(args.port), *pytest_args],
                            child_env(args, CUDA_VISIBLE_DEVICES=""), log_dir / "dashboard.log")
            at = f"http://{args.host}:{args.port}/" if args.port else f"a free port, printed in {log_dir / 'dashboard.log'}"
            print(f"dashboard: {at}", flush=True)
        for i in range(workers):
            pin = {"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} if gpus else {}
            processes.start(f"worker-{i}", [*engine, WORKER_COMMAND, *pytest_args], child_env(args, **pin),
                            log_dir / f"worker-{i}.log")
    restarts: dict[str, int] = {}
    done: dict[str, str] = {}  # workers that ended for good, and why
    could_not_fuzz: dict[str, str] = {}  # of those, the ones that died before fuzzing anything

    def supervise() -> None:
        """A worker that exits 0 has nothing left to fuzz; one that died while fuzzing (a
        segfault, an out-of-memory kill) is started again; one that died before (collection,
        setup) would only die again."""
        for name, code in processes.exited().items():
            if name in done or not name.startswith("worker-"):
                continue
            log = processes.how[name][2]
            fuzzing = FUZZING_LINE in processes.log_since_start(name)
            if code == 0:
                done[name] = "every test it fuzzed has failed"
            elif not fuzzing or restarts.get(name, 0) >= MAX_RESTARTS:
                done[name] = f"exited with code {code} after {processes.ran_s(name):.0f} s: see {log}"
                print(f"{name} {done[name]}", flush=True)
                if not fuzzing:
                    could_not_fuzz[name] = done[name]
            else:
                restarts[name] = restarts.get(name, 0) + 1
                print(f"{name} died (exit code {code}; a negative code is the signal): restarting it "
                      f"({restarts[name]} of at most {MAX_RESTARTS}); see {log}", flush=True)
                processes.restart(name)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    replayed, fixtures, ended = frozenset(), [], "stopped"  # failures already stored are replayed at the first look

    def replay_new() -> None:
        nonlocal replayed
        failing = failing_tests(database)
        if failing - replayed:
            replayed |= failing
            _, found = replay(args, log_dir / "replay.log")
            fixtures.extend(found)
            if found:
                print("failures found:\n" + render_fixtures(found), flush=True)

    next_look = time.monotonic() + min(args.replay_every, 30.0)
    try:
        start_children()
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                ended = f"ran {args.seconds:g} s"
                break
            if args.exitfirst and failing_tests(database):
                ended = "stopped at the first failure (-x)"
                break
            supervise()
            if all(name in done for name in processes.running if name.startswith("worker-")):
                ended = ("every worker has stopped (HypoFuzz stops fuzzing a test at its first failure)"
                         if not could_not_fuzz else f"every worker has stopped; {len(could_not_fuzz)} could not fuzz")
                break
            if now >= next_look:
                replay_new()
                next_look = time.monotonic() + args.replay_every
            time.sleep(1.0 if deadline is None else min(1.0, max(0.0, deadline - now)))
    except KeyboardInterrupt:
        ended = "interrupted"
    finally:
        processes.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    replay_new()
    fixtures += new_fixture_files(regressions, started)
    rows = campaign(database)
    print(f"\ntritonfuzz engine: {ended} after {time.time() - started:.0f} s\n"
          f"tests fuzzed on this database (all runs so far):\n{render_status(rows)}\n"
          f"fixtures written or found again:\n{render_fixtures(fixtures)}\n"
          + "".join(f"{name}: restarted {n} time(s) after dying (the case it was running is not known: run "
                    f"pytest --kernel on it, whose crashed workers become fixtures)\n" for name, n in restarts.items()) +
          "".join(f"{name} could not fuzz: {why} (the engine's or its environment's error, not the "
                    f"kernel's)\n" for name, why in could_not_fuzz.items()) +
          f"logs: {log_dir}", flush=True)
    if any(r["failures"] for r in rows) or fixtures or restarts:
        return 1
    # A worker that died before fuzzing (a missing dependency, a collection error) fuzzed nothing:
    # exit 0 would read as "nothing found" (an H200 run lacking `watchdog` did so, 2026-12-02).
    return 3 if could_not_fuzz else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [WORKER_COMMAND]:
        return worker_main(argv[1:])
    if argv[:1] == [DASHBOARD_COMMAND]:
        return dashboard_main(argv[1], int(argv[2]), argv[3:])
    try:
        args = parse_args(argv)
        require_hypofuzz()
        if args.command == "status":
            print(render_status(campaign(example_database(args.database))))
            return 0
        if args.command == "replay":
            if not failing_tests(example_database(args.database)):
                print(f"no stored failures in {args.database}")
                return 0
            log = Path(tempfile.mkdtemp(prefix="tritonfuzz-engine-")) / "replay.log"
            code, fixtures = replay(args, log)
            print(f"fixtures:\n{render_fixtures(fixtures)}\nlog: {log}")
            return 1 if fixtures else (0 if code in (0, 5) else code)
        return run(args)
    except EngineUsageError as e:
        print(f"tritonfuzz engine: error: {e}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
