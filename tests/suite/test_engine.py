"""Long runs on HypoFuzz (oracles/tools/engine.py): the engine finds a deliberately wrong kernel and
writes its fixture, on a directory database and on Redis; usage errors; the accuracy margin
the properties hand to hypothesis.target()."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.control import current_build_context

from oracles.submission.loader import bundled_implementations, file_sha256
from oracles.tools import engine
from oracles.harness.differential import RunOptions, run_case
from oracles.verdict import FAIL, PASS, RISK, bounded_check
from strategies.hc_head import hc_head_cases, judge_cases
from processes import processes_naming
from stand_ins import hc_head_over_the_reference

ROOT = Path(__file__).resolve().parents[2]
# Writes into its input on any case with hc_scale != 1 (as tests/mutants/hc_head/scale_folded_into_input.py
# does), over the reference (tests/suite/stand_ins.py): Hypothesis's shrinking runs it many times,
# cheap here where the bundled Triton kernel is slow in the CPU interpreter.
SCALES_ITS_INPUT = hc_head_over_the_reference('''
    hc_fn.mul_(hc_scale)  # the bug: the caller's weights, scaled in place
    hc_scale = torch.ones_like(hc_scale)
''')
ENGINE_SECONDS = 240  # the longest the engine may take to find it; -x stops it at the failure


def requires_hypofuzz():
    pytest.importorskip("hypofuzz", reason=engine.INSTALL_HINT)


def scales_its_input(tmp_path: Path) -> Path:
    kernel = tmp_path / "scales_its_input.py"
    kernel.write_text(SCALES_ITS_INPUT)
    return kernel


def engine_command(tmp_path: Path, database: str, kernel: Path, seconds: float, until_failure: bool) -> list[str]:
    return [sys.executable, "-m", "oracles.tools.engine", f"--kernel=hc_head={kernel}", "--workers", "1",
            "--no-dashboard", "--seconds", str(seconds), f"--database={database}",
            f"--regressions-dir={tmp_path / 'regressions'}", f"--log-dir={tmp_path / 'logs'}", "--minimize-budget", "1",
            *(["-x"] if until_failure else [])]


def engine_env(cpu_platform: bool) -> dict:
    """`cpu_platform`: with no GPU visible, Triton's interpreter, on a GPU machine too."""
    env = {k: v for k, v in os.environ.items() if k != engine.DATABASE_ENV}
    if cpu_platform:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_engine(tmp_path: Path, database: str, *, kernel: Path | None = None, seconds: float = ENGINE_SECONDS,
               until_failure: bool = True, cpu_platform: bool = False) -> tuple[subprocess.CompletedProcess, Path]:
    """The engine in a fresh process on `kernel` (default: scales_its_input)."""
    command = engine_command(tmp_path, database, kernel or scales_its_input(tmp_path), seconds, until_failure)
    done = subprocess.run(command, cwd=ROOT, env=engine_env(cpu_platform), capture_output=True, text=True,
                          timeout=max(seconds, ENGINE_SECONDS) + 240)
    return done, tmp_path / "regressions"


def assert_fixture_written(done: subprocess.CompletedProcess, regressions: Path, tmp_path: Path) -> None:
    kernel = tmp_path / "scales_its_input.py"
    logs = "".join(p.read_text(errors="replace")[-3000:] for p in sorted((tmp_path / "logs").glob("*.log")))
    assert done.returncode == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}\n{logs}"
    fixtures = sorted((regressions / "hc_head").glob("*.json"))
    assert fixtures, f"no fixture under {regressions}\n{done.stdout}\n{logs}"
    for path in fixtures:
        meta = json.loads(path.read_text())
        assert "inputs-unchanged" in meta["failure"]["checks"], meta["failure"]
        assert meta["kernel"]["sha256"] == file_sha256(kernel)
        assert meta["replay"] == (f"pytest --kernel=hc_head={kernel} --regressions-dir={regressions} "
                                  f"tests/kernel/test_regressions.py -k {path.stem}")
        assert f"fixture: {path}" in done.stdout and f"replay:  {meta['replay']}" in done.stdout, done.stdout
    assert "test_kernel_agrees_with_oracle_and_reference[hc_head-scales_its_input.py]" in done.stdout


def test_engine_writes_the_fixture_of_a_wrong_kernel(tmp_path):
    """HypoFuzz fuzzes the wrong kernel's property; its failure, replayed from the directory database,
    becomes the minimized fixture the pytest tiers write, with its replay command."""
    requires_hypofuzz()
    done, regressions = run_engine(tmp_path, str(tmp_path / "db"))
    assert_fixture_written(done, regressions, tmp_path)
    # The campaign is in the database: HypoFuzz listed the test it fuzzed.
    assert list(engine.example_database(str(tmp_path / "db")).fetch(engine.TEST_KEYS))


def test_engine_on_redis(tmp_path):
    """The several-hosts setting: every worker, the replay and the status read one Redis
    (fakeredis's TCP server on the loopback stands in for it)."""
    requires_hypofuzz()
    fakeredis = pytest.importorskip("fakeredis", reason="the Redis test needs fakeredis: pip install -e .[test]")
    server = fakeredis.TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"redis://127.0.0.1:{server.server_address[1]}/0"
        done, regressions = run_engine(tmp_path, url)
        assert_fixture_written(done, regressions, tmp_path)
        database = engine.example_database(url)
        assert type(database).__name__ == "RedisExampleDatabase"
        assert engine.failing_tests(database), "the failure HypoFuzz found is not in Redis"
        rows = engine.campaign(database)
        assert [r["nodeid"] for r in rows] == [
            "tests/kernel/test_ops.py::test_kernel_agrees_with_oracle_and_reference[hc_head-scales_its_input.py]"]
    finally:
        server.shutdown()
        server.server_close()


SEGFAULT = """
import ctypes
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    ctypes.string_at(0)  # stands in for a wild out-of-bounds store that kills the process: on every call,
    y = torch.empty(x.shape[0], x.shape[2], dtype=x.dtype, device=x.device)  # before anything could raise
    _copy[(1,)](x, y, 1, BLOCK=16)
    return y
"""


def log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else f"({path} does not exist)"


@pytest.mark.skipif(sys.platform == "win32", reason="relies on a segfault")
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT_inherited_ignored"])
def test_a_worker_killed_by_its_kernel_is_started_again(tmp_path, stop):
    """A segfault kills the worker process; the engine says so, starts it again, and the run
    fails (exit 1) though no failure could be stored. Stopped by SIGTERM, or by SIGINT where it
    was started as a background job (SIGINT inherited ignored), the engine ends as on Ctrl-C and
    leaves no worker: SIGTERM killed it on the spot with its workers fuzzing on, and a SIGINT
    never reached it in a clean-clone CI run started by `bash .ci/run &` (it restarted its
    worker for 120 s, 2026-12-06)."""
    requires_hypofuzz()
    kernel = tmp_path / "segfaults.py"
    kernel.write_text(SEGFAULT)
    # The restart is the engine's plumbing, the same on any platform, so it runs on the CPU platform
    # on a GPU machine too: there a worker took longer to reach its first call (CUDA, HypoFuzz; 40 s
    # of a loaded H200 ended before the first segfault, 2026-12-02). The engine is interrupted
    # once it has restarted the worker, where a fixed --seconds waited out its whole run.
    signum = signal.SIGTERM if stop == "SIGTERM" else signal.SIGINT
    as_background_job = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if stop != "SIGTERM" else None
    out_path = tmp_path / "engine.out"
    with out_path.open("w") as out:
        process = subprocess.Popen(engine_command(tmp_path, str(tmp_path / "db"), kernel, ENGINE_SECONDS, False),
                                   cwd=ROOT, env=engine_env(cpu_platform=True), stdout=out, stderr=subprocess.STDOUT,
                                   text=True, preexec_fn=as_background_job)
        try:
            deadline = time.monotonic() + ENGINE_SECONDS
            while "restarting it (1 of" not in out_path.read_text() and process.poll() is None:
                assert time.monotonic() < deadline, out_path.read_text()[-3000:]
                time.sleep(0.5)
            process.send_signal(signum)
            try:
                code = process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the engine did not end within 120 s of {signum.name}; its processes: "
                            f"{processes_naming(str(tmp_path))}\nits output:\n{out_path.read_text()[-3000:]}\n"
                            f"worker-0.log:\n{log_tail(tmp_path / 'logs' / 'worker-0.log')}")
        finally:
            process.kill()
    stdout = out_path.read_text()
    assert code == 1, stdout
    assert "worker-0 died (exit code -11; a negative code is the signal): restarting it (1 of" in stdout, stdout
    assert "tritonfuzz engine: interrupted" in stdout and "worker-0: restarted " in stdout, stdout
    assert not processes_naming(str(tmp_path)), f"a worker outlived the engine: {processes_naming(str(tmp_path))}"


def test_a_worker_that_cannot_start_fuzzing_is_the_engines_error(tmp_path):
    """A worker that dies before it fuzzes (here HypoFuzz's import fails, as on an H200 that lacked
    its `watchdog` dependency, 2026-12-02) fuzzed nothing: the engine exits 3 and says why, where
    it used to exit 0, which reads as "nothing found"."""
    requires_hypofuzz()
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "watchdog.py").write_text('raise ImportError("planted: watchdog is missing")\n')
    command = engine_command(tmp_path, str(tmp_path / "db"), ROOT / "kernels" / "hc_head.py", 120, False)
    env = engine_env(cpu_platform=False)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(planted), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "worker-0 could not fuzz: exited with code 1" in done.stdout, done.stdout


@pytest.mark.parametrize("argv, names", [
    (["--workers", "0"], "--workers 0"),
    (["--seconds", "0"], "--seconds 0"),
    (["--replay-every", "-1"], "--replay-every -1"),
    (["--port", "70000"], "--port 70000"),
    (["--minimize-budget", "-2"], "--minimize-budget -2"),
    (["--database", "ftp://host/db"], "--database 'ftp://host/db'"),
    (["--kernel", "hc_head"], "--kernel 'hc_head'"),
    (["--kernel", "no_such_op=x.py"], "unknown op 'no_such_op'"),
    (["--kernel", "hc_head=does/not/exist.py"], "--kernel hc_head=does/not/exist.py: no such file"),
    (["replay", "--database", "s3://bucket"], "--database 's3://bucket'"),
])
def test_usage_errors_are_one_line_naming_the_argument(argv, names, capsys):
    assert engine.main(argv) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err, err


def test_without_hypofuzz_the_engine_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hypofuzz", None)  # import hypofuzz now raises ImportError
    assert engine.main(["--seconds", "1"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e .[fuzz]" in err, err


def test_database_spec(tmp_path, monkeypatch):
    monkeypatch.delenv(engine.DATABASE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert engine.database_spec() == str(tmp_path / ".hypothesis" / "examples")  # Hypothesis's default place
    monkeypatch.setenv(engine.DATABASE_ENV, "shared/db")
    assert engine.database_spec() == str(tmp_path / "shared" / "db")
    assert engine.database_spec("redis://fuzzhost:6379/2") == "redis://fuzzhost:6379/2"
    pytest.importorskip("redis", reason="a Redis database needs the redis package: pip install -e .[fuzz]")
    kwargs = engine.example_database("redis://fuzzhost:6379/2").redis.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("fuzzhost", 6379, 2)


# The accuracy margin: what hypothesis.target() climbs.

def _bounded(kernel, allowed, explained=None):
    oracle = torch.zeros(len(kernel), dtype=torch.float64)
    return bounded_check("accuracy", "y", torch.tensor(kernel, dtype=torch.float64), oracle, oracle,
                         torch.tensor(allowed, dtype=torch.float64), explained=explained)


def test_margin_is_the_worst_error_over_allowed_and_above_one_exactly_on_failure():
    passing = _bounded([0.5, -0.25, 0.0], [1.0, 1.0, 0.0])
    assert (passing.status, passing.margin) == (PASS, 0.5)
    failing = _bounded([0.5, -3.0], [1.0, 2.0])
    assert (failing.status, failing.margin) == (FAIL, 1.5)
    nothing_allowed = _bounded([1e-30], [0.0])
    assert nothing_allowed.status == FAIL and nothing_allowed.margin == sys.float_info.max
    nan_and_inf = _bounded([float("nan"), float("inf"), 0.25], [1.0, 1.0, 1.0])  # specials' business
    assert nan_and_inf.margin == 0.25
    # Elements explained as a risk are not near-failures of the kernel: they leave the margin.
    explained = _bounded([5.0, 0.75], [1.0, 1.0], explained={"degenerate": torch.tensor([True, False])})
    assert (explained.status, explained.kind, explained.margin) == (RISK, "degenerate", 0.75)


def test_margin_of_real_verdicts(run_options):
    case = judge_cases(run_options.device)[0]
    impl = bundled_implementations("hc_head")[0]
    options = RunOptions(device=run_options.device)
    good = run_case("hc_head", impl.fn, case, options)
    assert good.check("accuracy").status == PASS and 0 <= good.accuracy_margin() <= 1
    from oracles.submission.loader import load_kernel
    bad_impl = load_kernel("hc_head", ROOT / "tests" / "mutants" / "hc_head" / "sum_not_mean.py").implementations[0]
    bad = run_case("hc_head", bad_impl.fn, case, options)
    assert bad.check("accuracy").status == FAIL and bad.accuracy_margin() > 1


@pytest.mark.parametrize("phases, targeted", [([Phase.generate, Phase.target], True),  # soak, the engine
                                              ([Phase.generate], False)])  # ci, dev, gate
def test_fuzz_targets_the_margin_where_the_settings_climb(phases, targeted, fuzz):
    """Inside a drawn case whose settings have the target phase, Fuzz hands the verdict's margin to
    hypothesis.target(); without it, and outside Hypothesis (the judge's cases and fixtures,
    where target() would raise), nothing is called."""
    impl = bundled_implementations("hc_head")[0]
    seen = []

    @settings(max_examples=3, database=None, derandomize=True, phases=phases,
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(case=hc_head_cases(max_tokens=2, max_hidden=40))
    def drawn(case):
        verdict = fuzz.check(case, impl)
        seen.append((verdict.accuracy_margin(), dict(current_build_context().data.target_observations)))

    drawn()
    assert any(margin is not None for margin, _ in seen), seen
    for margin, observed in seen:
        assert observed == ({"": margin} if targeted and margin is not None else {}), seen
    assert fuzz.check(judge_cases("cpu")[0], impl).accuracy_margin() is not None


@pytest.mark.parametrize("ci_env", ["true", None])
def test_long_run_profiles_stay_random_whatever_the_environment(ci_env):
    """With CI set, Hypothesis loads its derandomized built-in "ci" profile at import; profiles
    registered under it inherited derandomize=True, and HypoFuzz then refused every test
    ('sets_derandomize') so the engine fuzzed nothing. Only our own ci profile is derandomized."""
    probe = ("from oracles.gate import profiles; from hypothesis import settings; "
             "print({p: settings.get_profile(p).derandomize for p in ('ci', 'dev', 'gate', 'soak')})")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci_env} if ci_env else {})
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == str({"ci": True, "dev": False, "gate": False, "soak": False})
