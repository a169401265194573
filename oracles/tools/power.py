"""Mutation power: which realistic kernel bugs does tritonfuzz catch, and which do simpler harnesses miss?

For every file in tests/mutants/<op>/ (a mutant with one bug, or a correct variant, as its
MANIFEST.md says) three harnesses run against the same kernel:

  tritonfuzz    the op's property: strategies.<op>.<op>_cases at SIZES[device] under a Hypothesis
                profile, every case through oracles.harness.differential.run_case with the sanitizers
                and the determinism check on (what the gate runs); the first failure is shrunk
                (time-boxed), minimized (oracles.harness.failures.minimized, time-boxed) and written as
                a fixture, whose size is reported. Fuzzing only: the committed fixture corpus
                is not replayed here.
  judge cases   baseline 1, judge_cases_baseline: the judge's own fixed cases with only the
                judge's check.
  KernelBench   baseline 2, kernelbench_baseline: one fixed shape, five torch.randn trials,
                torch.allclose at KERNELBENCH_TOLERANCE.

Usage:

    python -m oracles.tools.power [--op OP] [--profile ci] [--out FILE.md] [--jobs N]

prints one markdown table per op and the totals (the minimized fixtures go to a temporary
directory, removed at the end, unless --fixtures-dir keeps them). Each file runs in its own child process
(`python -m oracles.tools.power --one FILE`, JSON on stdout), so that a kernel that segfaults or hangs
takes down only its child: a crash on a valid case is reported as "crashed" and counts as
caught by the harness that was running it; the child is then restarted for the remaining
harnesses. A child ended by SIGINT, SIGTERM or SIGHUP was stopped from outside: "interrupted", never
caught. The tables (--out, --json) are rewritten as each file ends; a run stopped by SIGTERM or
Ctrl-C stops its children and still writes them, with the files in flight as interrupted.
tests/suite/test_mutants.py calls the same functions in-process (fuzz() with shrinking off).

The platform is decided first, by the same function conftest.py calls
(oracles/platform/device.py), before any kernel module is imported.
"""

from __future__ import annotations

from oracles.platform.device import decide_platform

decide_platform()

import argparse  # noqa: E402
import os  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from concurrent.futures import ThreadPoolExecutor, as_completed, wait  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import torch  # noqa: E402
from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import InvalidArgument  # noqa: E402

from oracles.submission.loader import Implementation, load_kernel  # noqa: E402
from oracles.harness.differential import RunOptions, call_kernel, raised_message, run_case  # noqa: E402
from oracles.harness.failures import Failure, KernelCheckFailed, failure_message, minimized, record_fixture  # noqa: E402
from oracles.gate.constant_pool import freeze_local_constants  # noqa: E402
from oracles.gate.fuzz import end_unless_replaying, example_choices  # noqa: E402
from oracles.platform.device import cores_share, gpu_available, suite_device  # noqa: E402
from oracles.platform.interrupts import raise_keyboard_interrupt  # noqa: E402
from oracles.platform.stacks import print_stacks_after  # noqa: E402
from oracles.ops import OPS, get_op  # noqa: E402
from oracles.tolerances import KERNELBENCH_TOLERANCE  # noqa: E402
from oracles.verdict import FAIL, judge_check  # noqa: E402
from strategies.case import Case, case_from_json, case_to_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MUTANTS_ROOT = ROOT / "tests" / "mutants"
PHASES = ("property", "judge", "kernelbench")
KERNELBENCH_TRIALS = 5
KERNELBENCH_SEED = 42  # KernelBench draws its trial seeds from a generator seeded 42
# A child that runs into its timeout prints its Python stacks this long before (oracles/platform/stacks.py): on an
# H100 (2026-12-06) two moe mutants' children sat in one case for 130 s and said nothing of where.
STACKS_BEFORE_TIMEOUT_S = 5.0
STACKS_TAIL_CHARS = 6000


def device() -> str:
    return suite_device()


# ---------------------------------------------------------------------------------------------
# The mutants and their manifests


@dataclass(frozen=True)
class Mutant:
    """One row of tests/mutants/<op>/MANIFEST.md: a kernel file with one bug, or a correct variant
    ("what is wrong" starts with "correct" or "nothing")."""
    op: str
    path: Path
    wrong: str
    exposing: str
    expected: str

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def correct(self) -> bool:
        return self.wrong.strip().lower().startswith(("correct", "nothing"))

    @property
    def option(self) -> str:
        """The path as `--kernel OP=PATH` takes it: repo-relative when inside the repo."""
        try:
            return str(self.path.resolve().relative_to(ROOT))
        except ValueError:
            return str(self.path)


def _cells(line: str) -> list[str]:
    return [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]


def manifest(op: str) -> list[Mutant]:
    """Every table row of tests/mutants/<op>/MANIFEST.md whose first cell names a .py file, in
    file order: | file | what is wrong | exposing input | expected check | (extra cells ignored)."""
    folder = MUTANTS_ROOT / op
    path = folder / "MANIFEST.md"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if not line.lstrip().startswith("|"):
            continue
        cells = _cells(line)
        if len(cells) < 4 or not cells[0].endswith(".py"):
            continue
        rows.append(Mutant(op, folder / cells[0], cells[1], cells[2], cells[3]))
    return rows


def unlisted(op: str) -> list[Path]:
    """Kernel files in tests/mutants/<op>/ that the manifest does not list."""
    listed = {m.path.name for m in manifest(op)}
    return sorted(p for p in (MUTANTS_ROOT / op).glob("*.py") if p.name not in listed)


def load(mutant: Mutant) -> Implementation:
    """The file's implementation, loaded the way `--kernel OP=PATH` loads it (oracles.submission.loader)."""
    return load_kernel(mutant.op, mutant.path).implementations[0]


def power_options(device_name: str | None = None, *, portability: bool = True) -> RunOptions:
    """The checks the property runs here: the gate's (sanitizers and determinism on), tie order
    as a risk unless --judge-exact. `portability` compiles interpreted launches for gfx942 too,
    whose problems are risks only: a caller that reads nothing but failures may leave it off."""
    return RunOptions(device=device_name or device(), sanitize=True, determinism=True, portability=portability)


def profile_settings(name: str) -> settings:
    """A Hypothesis profile by name, as the project defines it: the profiles live in oracles/gate/profiles.py,
    which registers them on import (pytest has imported it already; the command line imports it
    here). Hypothesis ships a "ci" profile of its own (100 examples): never that one."""
    from oracles.gate import profiles  # noqa: F401  (registers ci, dev, gate, soak)
    try:
        return settings.get_profile(name)
    except InvalidArgument:
        raise InvalidArgument(f"--profile {name!r}: not a registered Hypothesis profile; "
                              f"registered: {', '.join(profiles.PROFILES)}") from None


# ---------------------------------------------------------------------------------------------
# Harness 1: tritonfuzz's property


@dataclass
class FuzzResult:
    caught: bool = False
    checks: tuple = ()          # checks that failed on the first failing example
    examples: int = 0           # examples run up to and including the first failure (all, if none)
    seconds: float = 0.0        # until the first failure (the whole run, if none)
    risks: int = 0              # examples with a judge risk (a tie ordered unlike torch.topk)
    untrusted: int = 0          # examples with a check the platform cannot be trusted on
    message: str = ""           # the first failure's standalone message
    error: str = ""             # the harness itself failed: no verdict
    failure: Failure | None = field(default=None, repr=False)  # the shrunk failure (else the first)


def fuzz(impl: Implementation, *, profile: str = "ci", options: RunOptions | None = None,
         max_examples: int | None = None, shrink_budget_s: float = 10.0,
         on_case: Callable[[Case, int, float], None] | None = None) -> FuzzResult:
    """Run the op's property on `impl` until its first failure, under the Hypothesis profile
    `profile` (its example count, derandomization and seed), then let Hypothesis shrink that
    failure for at most shrink_budget_s seconds (0: no shrinking). Past the budget the property
    makes no more kernel calls: a case already seen failing fails again (so Hypothesis's final
    replay is stable), any other candidate ends before it draws (end_unless_replaying), and the
    shrinker stops. `on_case(case, examples,
    seconds)` is called before each kernel call (the child process records the in-flight case)."""
    options = options or power_options()
    op = impl.op
    spec = get_op(op)
    cases = spec.cases(**spec.sizes[options.device])
    result = FuzzResult()
    seen_failing: dict[str, Failure] = {}
    failing_choices: set = set()  # of the failing examples (oracles.gate.fuzz.example_choices)
    started = time.monotonic()
    shrink_until = [math.inf]

    def fail(failure: Failure):
        result.failure = failure
        choices = example_choices()
        if choices is not None:
            failing_choices.add(choices)
        raise KernelCheckFailed(failure_message(failure.case, impl, failure.verdict, options))

    def power_property(data):
        case = data.draw(cases, label="case")
        key = case.content_hash()
        if time.monotonic() > shrink_until[0]:
            if key in seen_failing:
                fail(seen_failing[key])
            return
        if on_case is not None:
            on_case(case, result.examples + (0 if result.caught else 1), time.monotonic() - started)
        verdict = run_case(op, impl.fn, case, options)
        failing = verdict.failures(judge_exact=options.judge_exact)
        if not result.caught:
            result.examples += 1
            result.risks += bool(verdict.risks())
            result.untrusted += bool(verdict.untrusted())
        if not failing:
            return
        failure = Failure(case, impl, verdict, options)
        seen_failing[key] = failure
        if not result.caught:
            result.caught = True
            result.checks = tuple(c.name for c in failing)
            result.seconds = time.monotonic() - started
            result.message = failure_message(case, impl, verdict, options)
            shrink_until[0] = time.monotonic() + shrink_budget_s
        fail(failure)

    base = profile_settings(profile)
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if shrink_budget_s > 0:
        phases.append(Phase.shrink)
    test = settings(base, database=None, deadline=None, max_examples=max_examples or base.max_examples,
                    phases=phases, report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False,
                    suppress_health_check=list(HealthCheck))(given(data=st.data())(power_property))
    # The check before each draw wraps Hypothesis's inner test, not power_property: a derandomized
    # profile (ci) seeds its draws from a digest of the property's source, and a line added there
    # changed every ci draw (three hc_head mutants went uncaught, 2026-12-06).
    inner = test.hypothesis.inner_test

    @functools.wraps(inner)
    def ending_past_the_shrink_budget(*args, **kwargs):
        if time.monotonic() > shrink_until[0]:
            end_unless_replaying(failing_choices)
        return inner(*args, **kwargs)
    test.hypothesis.inner_test = ending_past_the_shrink_budget
    try:
        test()
    except Exception as e:  # KernelCheckFailed, or Hypothesis's Flaky when a replay passes
        if not result.caught:
            result.error = f"{type(e).__name__}: {e}"
    if not result.caught:
        result.seconds = time.monotonic() - started
    return result


def minimized_fixture(failure: Failure, *, kernel_option: str | None, budget_s: float = 20.0,
                      root: Path | None = None) -> tuple[Failure, Path]:
    """Minimize the failure on its concrete tensors (oracles.harness.failures.minimized, time-boxed) and
    write it as a fixture under `root` (a fresh temporary directory by default)."""
    small = minimized(failure, budget_s=budget_s)
    if not small.verdict.failures(judge_exact=small.options.judge_exact):
        small = failure  # flaky under replay: keep the original
    root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="tritonfuzz-power-"))
    path, _ = record_fixture(small, root, kernel_option=kernel_option, custom_root=True)
    return small, path


# ---------------------------------------------------------------------------------------------
# Harnesses 2 and 3: the baselines


@dataclass
class BaselineResult:
    caught: bool
    detail: str = ""
    cases: int = 0


def feasible_judge_cases(op: str, device_name: str) -> list[Case]:
    """The op's judge cases; on the CPU interpreter without the bench-size ones (OpSpec.runs_on_cpu)."""
    spec = get_op(op)
    cases = spec.judge_cases(device_name)
    return [c for c in cases if spec.runs_on_cpu(c)] if device_name == "cpu" else list(cases)


def _outputs(op: str, values: tuple) -> dict:
    return dict(zip(get_op(op).output_names, values))


def judge_cases_baseline(impl: Implementation, device_name: str | None = None,
                         on_case: Callable[[Case], None] | None = None) -> BaselineResult:
    """Baseline 1 models the competition's own public test file and nothing more: its fixed cases
    (strategies.<op>.judge_cases(): torch.randn on a generator seeded 0, float32 cast to bf16,
    the published shapes and scalars; on the CPU interpreter without the bench sizes), the
    kernel called with keyword arguments as the judge calls it, outside any sanitizer, and only
    the judge's check (oracles.verdict.judge_check): torch.testing.assert_close after a float32
    cast at the published per-dtype tolerance, equal_nan off, integer outputs by torch.equal
    (so torch.topk's tie order on this device is demanded). A raise or a wrong number of
    outputs fails. No oracle64, no drawn cases, no red zones, poison, launch or determinism check."""
    device_name = device_name or device()
    op = impl.op
    spec = get_op(op)
    cases = feasible_judge_cases(op, device_name)
    for i, case in enumerate(cases):
        if on_case is not None:
            on_case(case)
        try:
            out = call_kernel(impl.fn, case.to(device_name))
        except Exception as e:
            return BaselineResult(True, f"{case.label}: {raised_message(e)}", i + 1)
        if len(out) != len(spec.output_names):
            return BaselineResult(True, f"{case.label}: returned {len(out)} value(s)", i + 1)
        ref = call_kernel(spec.reference, case.to(device_name))
        check = judge_check(_outputs(op, out), _outputs(op, ref))
        if check.status == FAIL:
            return BaselineResult(True, f"{case.label}: {check.message[:300]}", i + 1)
    return BaselineResult(False, f"{len(cases)} judge case(s) pass", len(cases))


def kernelbench_inputs(op: str, trial_seed: int) -> Case:
    """The judge's first correctness case with its first tensor input (x, logits) redrawn as
    torch.randn from a generator seeded `trial_seed` (float32, cast to the case's dtype as the
    judge does); every other input as the judge draws it."""
    case = get_op(op).judge_cases()[0]
    name, t = next((k, v) for k, v in case.inputs.items() if isinstance(v, torch.Tensor))
    gen = torch.Generator().manual_seed(int(trial_seed))
    fresh = torch.randn(tuple(t.shape), generator=gen, dtype=torch.float32).to(t.dtype)
    return Case(op, {**case.inputs, name: fresh}, frozenset({"kernelbench"}), f"kernelbench seed={trial_seed}")


def kernelbench_baseline(impl: Implementation, device_name: str | None = None, *, trials: int = KERNELBENCH_TRIALS,
                         on_case: Callable[[Case], None] | None = None) -> BaselineResult:
    """Baseline 2 models KernelBench's correctness check (run_and_check_correctness): one fixed
    shape -- the judge's first correctness shape --, `trials` trials whose main input is fresh
    torch.randn (trial seeds drawn from a generator seeded 42, as KernelBench draws them; the
    other inputs as the judge draws them, see kernelbench_inputs), the kernel called with
    keyword arguments, and per output: a shape mismatch fails; float outputs
    torch.allclose(out, ref, atol, rtol) with KERNELBENCH_TOLERANCE, in the outputs' own dtypes
    (a dtype mismatch raises, which fails; NaN never equals); integer outputs torch.equal.
    A raise fails. Passing = every trial passes. No sanitizers, no oracle64."""
    device_name = device_name or device()
    op = impl.op
    spec = get_op(op)
    atol, rtol = KERNELBENCH_TOLERANCE
    seeds = torch.randint(0, 2**31 - 1, (trials,), generator=torch.Generator().manual_seed(KERNELBENCH_SEED))
    for i, seed in enumerate(seeds.tolist()):
        case = kernelbench_inputs(op, seed)
        if on_case is not None:
            on_case(case)
        try:
            out = call_kernel(impl.fn, case.to(device_name))
            ref = call_kernel(spec.reference, case.to(device_name))
            if len(out) != len(ref):
                return BaselineResult(True, f"trial {i}: returned {len(out)} value(s)", i + 1)
            for name, o, r in zip(spec.output_names, out, ref):
                if tuple(o.shape) != tuple(r.shape):
                    return BaselineResult(True, f"trial {i}: {name} shape {tuple(o.shape)} != {tuple(r.shape)}", i + 1)
                same = torch.allclose(o, r, atol=atol, rtol=rtol) if r.is_floating_point() else torch.equal(o, r)
                if not same:
                    return BaselineResult(True, f"trial {i}: {name} not close (atol={atol}, rtol={rtol})", i + 1)
        except Exception as e:
            return BaselineResult(True, f"trial {i}: {raised_message(e)}", i + 1)
    return BaselineResult(False, f"{trials} trial(s) pass", trials)


# ---------------------------------------------------------------------------------------------
# One file, in this process (the child's work)


def _write_json(path: Path | None, obj: dict) -> None:
    if path is not None:
        write_atomically(path, json.dumps(obj))


def run_one(mutant: Mutant, *, profile: str = "ci", phases=PHASES, shrink_budget_s: float = 10.0,
            minimize_budget_s: float = 20.0, progress: Path | None = None, fixtures_dir: Path | None = None) -> dict:
    """Every harness in `phases` on one file; the results as plain JSON-able data. The minimized
    fixture goes under `fixtures_dir` (a fresh temporary directory by default). With `progress`,
    the results so far and the case being run are kept on disk, so that a parent can still
    report a child that crashed."""
    record: dict = {"file": mutant.option, "op": mutant.op, "correct": mutant.correct}
    started = time.monotonic()

    def in_flight(phase: str, case: Case | None, **extra) -> None:
        _write_json(progress, {"results": record, "in_flight": {
            "phase": phase, "case": case_to_json(case) if case is not None else None,
            "summary": case.summary() if case is not None else "", **extra}})

    try:
        impl = load(mutant)
    except Exception as e:
        record["error"] = f"cannot load: {type(e).__name__}: {e}"
        return record
    dev = device()
    for phase in phases:
        t0 = time.monotonic()
        if phase == "property":
            r = fuzz(impl, profile=profile, options=power_options(dev), shrink_budget_s=shrink_budget_s,
                     on_case=lambda c, n, s: in_flight("property", c, examples=n, seconds=s))
            entry = {k: v for k, v in asdict(r).items() if k != "failure"}
            entry["checks"] = list(r.checks)
            entry["message"] = r.message[:4000]
            record[phase] = entry  # kept if the child dies while minimizing
            if r.failure is not None and minimize_budget_s >= 0:
                in_flight("minimize", r.failure.case)
                small, path = minimized_fixture(r.failure, kernel_option=mutant.option, budget_s=minimize_budget_s,
                                                root=fixtures_dir)
                entry.update(fixture=str(path), fixture_bytes=path.stat().st_size, minimized=small.case.summary(),
                             minimized_checks=[c.name for c in small.verdict.failures(judge_exact=small.options.judge_exact)])
        elif phase == "judge":
            entry = asdict(judge_cases_baseline(impl, dev, on_case=lambda c: in_flight("judge", c)))
        elif phase == "kernelbench":
            entry = asdict(kernelbench_baseline(impl, dev, on_case=lambda c: in_flight("kernelbench", c)))
        else:
            raise ValueError(f"phases: unknown harness {phase!r}; expected some of {', '.join(PHASES)}")
        entry["wall_s"] = round(time.monotonic() - t0, 2)
        record[phase] = entry
        in_flight("", None)
    record["wall_s"] = round(time.monotonic() - started, 2)
    return record


# ---------------------------------------------------------------------------------------------
# One file, in a child process (the parent's side)


def case_is_valid(op: str, case_json: dict | None) -> bool:
    """A recorded case the task reference accepts (strategies only draw such cases)."""
    if case_json is None:
        return False
    try:
        case = case_from_json(case_json)
        call_kernel(get_op(op).reference, case.to("cpu"))
        return True
    except Exception:
        return False


# Signals that come from outside (a shell's timeout, Ctrl-C, a closed terminal): a child ended by
# one says nothing about its kernel, so it is "interrupted", never "crashed" (which counts as caught).
EXTERNAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def child_ending(returncode: int, *, stopping: bool = False) -> str | None:
    """How a child ended: None (exit 0), "interrupted (SIGTERM)", "crashed (signal 11)", or
    "exited with code N". `stopping`: power was stopping its children, so any signal was ours."""
    if returncode == 0:
        return None
    if returncode < 0 and (stopping or -returncode in EXTERNAL_SIGNALS):
        return f"interrupted (signal {-returncode})" if stopping else f"interrupted ({signal.Signals(-returncode).name})"
    return f"crashed (signal {-returncode})" if returncode < 0 else f"exited with code {returncode}"


_CHILDREN: set[subprocess.Popen] = set()  # the children running now, for stop_children
STOP_GRACE_S = 10.0
_STOPPING = threading.Event()  # set by stop_children: a child that dies of a signal now was stopped by us
_CHILDREN_LOCK = threading.Lock()


def _run_child(cmd: list[str], *, env: dict, timeout_s: float) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s), with the child
    known to stop_children while it runs."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _CHILDREN_LOCK:
        _CHILDREN.add(proc)
    try:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(cmd, timeout_s, output=out, stderr=err) from None
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.discard(proc)


def stop_children(how: signal.Signals = signal.SIGTERM) -> None:
    """`how` (SIGTERM: each child then reads as "interrupted") to every child still running."""
    _STOPPING.set()
    with _CHILDREN_LOCK:
        running = list(_CHILDREN)
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(how)


def child_env(environ: dict, *, jobs: int) -> dict:
    """A child's environment: the repository on PYTHONPATH, and torch's threads a share of the
    cores among the `jobs` children running at once (unless OMP_NUM_THREADS is set already). By
    default each child starts a thread per core, so 16 children on a 16-core GPU host run 256
    threads for the routers' host-side oracle64: the oversubscription xdist workers share the
    cores against (oracles/gate/plugin.py; tests/results/2026-12-07-session25.md)."""
    env = {**environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))}
    if "OMP_NUM_THREADS" not in environ:
        env["OMP_NUM_THREADS"] = str(cores_share(jobs))
    return env


def run_isolated(mutant: Mutant, *, profile: str = "ci", phases=PHASES, shrink_budget_s: float = 10.0,
                 minimize_budget_s: float = 20.0, timeout_s: float = 900.0, fixtures_dir: Path | None = None,
                 jobs: int = 1) -> dict:
    """run_one in a child process (`python -m oracles.tools.power --one FILE`). A child that dies
    (a signal, e.g. a segfault) or runs past timeout_s is reported for the harness it was in:
    "crashed" on a valid case counts as caught; the remaining harnesses run in a new child.
    `jobs`: how many such children run at once (their share of the cores: child_env)."""
    merged: dict = {"file": mutant.option, "op": mutant.op, "correct": mutant.correct}
    remaining = list(phases)
    started = time.monotonic()
    while remaining:
        with tempfile.TemporaryDirectory(prefix="tritonfuzz-power-") as tmp:
            progress = Path(tmp) / "progress.json"
            cmd = [sys.executable, "-m", "oracles.tools.power", "--one", str(mutant.path), "--profile", profile,
                   "--phases", ",".join(remaining), "--progress", str(progress),
                   "--shrink-budget", str(shrink_budget_s), "--minimize-budget", str(minimize_budget_s)]
            if fixtures_dir is not None:
                cmd += ["--fixtures-dir", str(fixtures_dir)]
            # Where a child that will time out is stuck: its Python stacks, on stderr, before the kill.
            # A wall-clock time, not a delay: the child arms it after importing torch and Triton, which
            # on a busy GPU host took most of a 15 s timeout (its stacks never came, H100 2026-12-06).
            cmd += ["--stacks-at", repr(time.time() + max(timeout_s - STACKS_BEFORE_TIMEOUT_S, 1.0))]
            env = child_env(dict(os.environ), jobs=jobs)
            try:
                proc = _run_child(cmd, env=env, timeout_s=timeout_s)
                how = child_ending(proc.returncode, stopping=_STOPPING.is_set())
                tail = (proc.stderr or "")[-1500:]
            except subprocess.TimeoutExpired as e:   # its captured output is bytes, whatever `text` says
                stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
                proc, how, tail = None, f"timed out after {timeout_s:g} s", stderr[-STACKS_TAIL_CHARS:]
            if how is None:
                lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
                if lines:
                    merged.update({k: v for k, v in json.loads(lines[-1]).items() if k not in ("file", "op", "correct")})
                    break
                how = "exited without a result"
            state = json.loads(progress.read_text()) if progress.exists() else {"results": {}, "in_flight": {}}
        done = {k: v for k, v in state.get("results", {}).items() if k in PHASES}
        merged.update(done)
        flight = state.get("in_flight") or {}
        left = [p for p in remaining if p not in done]
        if not flight.get("phase") and not left:
            # Every harness had written its result and none was running: the child ended on its way
            # out (its exit ran past the timeout, tests/results/2026-12-07-session29.md). Its results
            # stand; no case was in flight to blame.
            merged["ended_after_results"] = how
            break
        phase = flight.get("phase") or (left or remaining)[0]
        valid = case_is_valid(mutant.op, flight.get("case"))
        crashed, timed_out = how.startswith("crashed"), how.startswith("timed out")
        if how.startswith("interrupted"):  # stopped from outside: what ran is kept, nothing more runs
            entry = {"caught": False, "crashed": False, "timed_out": False, "interrupted": True,
                     "examples": flight.get("examples", 0), "seconds": flight.get("seconds", 0.0),
                     "message": f"{how}: stopped from outside, not a verdict on the kernel"}
            merged.setdefault("property" if phase == "minimize" else phase, entry)
            break
        note = f"{how} on case: {flight.get('summary') or 'unknown (no case in flight)'}"
        if phase == "minimize":  # the property had caught it; the crash came while minimizing
            merged.setdefault("property", {}).update(fixture_error=note)
            phase = "property"
        elif phase == "property":
            merged["property"] = {"caught": crashed and valid, "crashed": crashed, "timed_out": timed_out,
                                  "checks": [how.split(" (")[0]],
                                  "examples": flight.get("examples", 0), "seconds": flight.get("seconds", 0.0),
                                  "message": note + ("" if valid else " (the case was not valid: not counted)"),
                                  "error": "" if crashed and valid else note + "\n" + tail}
        else:
            merged[phase] = {"caught": crashed and valid, "crashed": crashed, "timed_out": timed_out,
                             "detail": note, "cases": 0}
        remaining = [p for p in remaining if p not in merged]
    merged["wall_s"] = round(time.monotonic() - started, 2)
    return merged


# ---------------------------------------------------------------------------------------------
# The report


HEADER = ("| mutant | expected bug | tritonfuzz caught? | by check | examples to first failure | seconds "
          "| fixture bytes | judge-cases baseline | KernelBench baseline |\n"
          "|---|---|---|---|---|---|---|---|---|")


def _short(text: str, n: int = 90) -> str:
    text = " ".join(text.replace("|", "\\|").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _caught_cell(entry: dict | None, correct: bool) -> str:
    if entry is None:
        return "not run"
    if entry.get("interrupted"):
        return "interrupted"
    if entry.get("timed_out"):
        return "timed out"
    if entry.get("error") and not entry.get("caught"):
        return "error"
    if entry.get("crashed"):
        return "crashed" if entry.get("caught") else "crashed (invalid case)"
    if correct:
        return "FALSE POSITIVE" if entry.get("caught") else "no (correct)"
    return "yes" if entry.get("caught") else "**no**"


def _baseline_cell(entry: dict | None, correct: bool) -> str:
    if entry is None:
        return "not run"
    if entry.get("interrupted"):
        return "interrupted"
    if entry.get("timed_out"):
        return "timed out"
    if entry.get("crashed"):
        return "crashed" if entry.get("caught") else "crashed (invalid case)"
    if correct:
        return "FALSE POSITIVE" if entry.get("caught") else "pass"
    return "caught" if entry.get("caught") else "missed"


def render_op(op: str, rows: list[tuple[Mutant, dict]]) -> str:
    """One op's table: a row per manifest entry, then the op's totals."""
    lines = [f"### {op}", "", HEADER]
    for m, r in rows:
        prop = r.get("property")
        checks = ", ".join((prop or {}).get("checks", [])) or "—"
        if prop is not None and m.correct and prop.get("risks") and not prop.get("caught"):
            checks = f"— ({prop['risks']} example(s) with a judge risk)"
        if r.get("error"):
            checks = f"load error: {_short(r['error'], 60)}"
        examples = (prop or {}).get("examples", "")
        seconds = f"{prop['seconds']:.1f}" if prop and "seconds" in prop else ""
        fbytes = str((prop or {}).get("fixture_bytes", ""))
        lines.append(f"| {m.name} | {_short(m.wrong)} | {_caught_cell(prop, m.correct)} | {checks} | {examples} "
                     f"| {seconds} | {fbytes} | {_baseline_cell(r.get('judge'), m.correct)} "
                     f"| {_baseline_cell(r.get('kernelbench'), m.correct)} |")
    lines += ["", totals_line(op, rows)]
    return "\n".join(lines)


def tally(rows: list[tuple[Mutant, dict]]) -> dict:
    """Per harness: mutants caught, and correct variants flagged (false positives)."""
    out = {"mutants": sum(not m.correct for m, _ in rows), "correct": sum(m.correct for m, _ in rows)}
    for phase in PHASES:
        entries = [(m, r.get(phase) or {}) for m, r in rows]
        out[phase] = {"caught": sum(bool(e.get("caught")) for m, e in entries if not m.correct),
                      "false_positives": sum(bool(e.get("caught")) for m, e in entries if m.correct)}
    return out


HARNESS_NAMES = {"property": "tritonfuzz", "judge": "judge cases", "kernelbench": "KernelBench"}


def totals_line(label: str, rows: list[tuple[Mutant, dict]]) -> str:
    t = tally(rows)
    caught = ", ".join(f"{HARNESS_NAMES[p]} {t[p]['caught']}/{t['mutants']}" for p in PHASES)
    fps = ", ".join(f"{HARNESS_NAMES[p]} {t[p]['false_positives']}/{t['correct']}" for p in PHASES)
    stopped = sum(any((r.get(p) or {}).get("interrupted") for p in PHASES) for _, r in rows)
    return (f"**Totals ({label}):** {t['mutants']} mutants, {t['correct']} correct variants. "
            f"Mutants caught: {caught}. False positives among correct variants: {fps}."
            + (f" {stopped} file(s) interrupted (stopped from outside: no verdict, counted as not caught)."
               if stopped else ""))


def render(ops: list[str], results: dict[str, dict[str, dict]], *, profile: str, wall_s: float) -> str:
    """The whole report: a header saying what ran, a table per op, the totals over every op."""
    where = torch.cuda.get_device_name() if gpu_available() else "CPU (Triton interpreter)"
    head = ["## Mutation power: tritonfuzz vs the judge's cases vs KernelBench", "",
            f"Device {where}; Hypothesis profile `{profile}` ({profile_settings(profile).max_examples} examples "
            f"at most per file). tritonfuzz = the op's property with the sanitizers and the determinism "
            f"check on, fuzzing only (no fixture corpus); 'examples' and 'seconds' run up to its first "
            f"failure (the whole run when nothing failed); 'fixture bytes' = the minimized fixture's JSON. "
            f"Judge cases = oracles.tools.power.judge_cases_baseline; KernelBench = "
            f"oracles.tools.power.kernelbench_baseline (atol, rtol = {KERNELBENCH_TOLERANCE}). "
            f"Wall time {wall_s:.0f} s.", ""]
    per_op = {op: [(m, results[op][m.name]) for m in manifest(op) if m.name in results.get(op, {})] for op in ops}
    per_op = {op: rows for op, rows in per_op.items() if rows}
    body = "\n\n".join(render_op(op, rows) for op, rows in per_op.items())
    everything = [row for rows in per_op.values() for row in rows]
    return "\n".join(head + [body, "", totals_line("all ops", everything)]) + "\n"


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oracles.tools.power", description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", choices=sorted(OPS),
                   help="only this op (repeatable; default: every op with a tests/mutants/<op>/MANIFEST.md)")
    p.add_argument("--profile", default="ci", help="Hypothesis profile for tritonfuzz's property (default: ci)")
    p.add_argument("--out", metavar="FILE.md", help="also write the tables to this file")
    p.add_argument("--json", metavar="FILE.json", help="also write the raw results as JSON")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="child processes at once (default: CPUs)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a child may run (default 900)")
    p.add_argument("--shrink-budget", type=float, default=10.0,
                   help="seconds Hypothesis may shrink the first failure (default 10; 0: no shrinking)")
    p.add_argument("--minimize-budget", type=float, default=20.0,
                   help="seconds for oracles.harness.failures.minimized before the fixture is written (default 20)")
    p.add_argument("--phases", default=",".join(PHASES), help=f"harnesses to run (default: {','.join(PHASES)})")
    p.add_argument("--fixtures-dir", metavar="DIR",
                   help="keep the minimized fixtures here, one folder per file (default: a temporary directory, "
                        "removed when the run ends)")
    p.add_argument("--only", action="append", metavar="FILE.py", help="only these mutant files (by name)")
    p.add_argument("--one", metavar="FILE", help=argparse.SUPPRESS)       # child mode: one file, JSON on stdout
    p.add_argument("--progress", metavar="FILE", help=argparse.SUPPRESS)  # child mode: results so far
    p.add_argument("--stacks-at", type=float, help=argparse.SUPPRESS)  # child mode: dump stacks at this time.time()
    return p


def _child(args) -> int:
    if args.stacks_at:
        print_stacks_after(max(args.stacks_at - time.time(), 0.1), file=sys.stderr)
    freeze_local_constants()  # before the mutant loads: the pool the suite's test_mutants draws with
    path = Path(args.one).resolve()
    op = path.parent.name
    listed = {m.path.resolve(): m for m in manifest(op)}
    mutant = listed.get(path) or Mutant(op, path, "(not in the manifest)", "", "")
    phases = [p for p in args.phases.split(",") if p]
    with contextlib.redirect_stdout(sys.stderr):  # Hypothesis and kernels print; stdout carries the JSON
        record = run_one(mutant, profile=args.profile, phases=phases, shrink_budget_s=args.shrink_budget,
                         minimize_budget_s=args.minimize_budget,
                         progress=Path(args.progress) if args.progress else None,
                         fixtures_dir=Path(args.fixtures_dir) if args.fixtures_dir else None)
    print(json.dumps(record))
    return 0


def run_order(mutants: list[Mutant]) -> list[Mutant]:
    """The order children start in: every wrong kernel first, then the correct variants, each
    group in manifest order. A wrong kernel ends at its first failure; a correct variant runs to
    its timeout. Started last, an op's wrong kernels shared the GPU with correct variants holding it
    for their whole timeout: sigmoid_gate_topk_renorm's, 16 children at once on one H200, drew
    5.8 s an example and one went uncaught (tests/results/2026-12-07-session24.md)."""
    return sorted(mutants, key=lambda m: m.correct)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # numpy inside the interpreter, as pyproject says
    if args.one:
        return _child(args)
    ops = args.op or [op for op in OPS if manifest(op)]
    phases = [p for p in args.phases.split(",") if p]
    todo = run_order([m for op in ops for m in manifest(op) if not args.only or m.name in args.only])
    for op in ops:
        for path in unlisted(op):
            print(f"note: {path} is not in {op}'s MANIFEST.md; not run", file=sys.stderr)
    started = time.monotonic()
    results: dict[str, dict[str, dict]] = {op: {} for op in ops}
    fixtures = Path(args.fixtures_dir) if args.fixtures_dir else Path(tempfile.mkdtemp(prefix="tritonfuzz-power-"))

    def work(m: Mutant) -> tuple[Mutant, dict]:
        r = run_isolated(m, profile=args.profile, phases=phases, shrink_budget_s=args.shrink_budget,
                         minimize_budget_s=args.minimize_budget, timeout_s=args.timeout,
                         fixtures_dir=fixtures / f"{m.op}-{m.path.stem}", jobs=args.jobs)
        prop = r.get("property") or {}
        print(f"[power] {m.op}/{m.name}: tritonfuzz {_caught_cell(prop, m.correct)} "
              f"({', '.join(prop.get('checks', [])) or '-'}; {prop.get('examples', '?')} examples, "
              f"{prop.get('seconds', 0):.1f} s); judge {_baseline_cell(r.get('judge'), m.correct)}; "
              f"KernelBench {_baseline_cell(r.get('kernelbench'), m.correct)}; wall {r.get('wall_s', 0):.0f} s"
              + (f"; the child {r['ended_after_results']} on its way out" if r.get("ended_after_results") else ""),
              file=sys.stderr, flush=True)
        return m, r

    def save() -> str:
        text = render(ops, results, profile=args.profile, wall_s=time.monotonic() - started)
        for path, content in ((args.out, text), (args.json, json.dumps(results, indent=1))):
            if path:
                write_atomically(Path(path), content)
        return text

    # A run stopped from outside (a shell's timeout sends SIGTERM, Ctrl-C SIGINT) still leaves the
    # tables of every file that ended: they are rewritten as each one ends, and once more here.
    previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    interrupted = False
    futures = [pool.submit(work, m) for m in todo]
    try:
        for future in as_completed(futures):
            m, r = future.result()
            results[m.op][m.name] = r
            save()
    except KeyboardInterrupt:
        interrupted = True
        print(f"[power] interrupted: {sum(map(len, results.values()))} of {len(todo)} file(s) ended; "
              f"the tables hold those", file=sys.stderr, flush=True)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        stopping = time.monotonic()
        while interrupted and not all(f.done() for f in futures):  # a child may start while we stop the others
            # SIGKILL for a child that outlives SIGTERM by STOP_GRACE_S (a handler, a stuck device call)
            stop_children(signal.SIGTERM if time.monotonic() - stopping < STOP_GRACE_S else signal.SIGKILL)
            wait(futures, timeout=0.5)
        pool.shutdown(wait=True)
        signal.signal(signal.SIGTERM, previous)
        for future in futures:  # the files in flight at the interrupt, as "interrupted"
            if future.done() and not future.cancelled() and future.exception() is None:
                m, r = future.result()
                results[m.op].setdefault(m.name, r)
        if not args.fixtures_dir:
            shutil.rmtree(fixtures, ignore_errors=True)
    print(save())
    return 130 if interrupted else 0


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it, renamed over it: a reader sees
    the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
