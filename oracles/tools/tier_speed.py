"""How fast the fuzzing tier itself runs, against the goals of issue 14, in one command.

    python -m oracles.tools.tier_speed [--steps gates,suite,mutants,hidden] [--op OP] [--gate-budget S]
                                       [--gate-shards N] [--hidden OP=PATH] [--time-limit S]
                                       [--out FILE.md] [--json FILE.json]

Each step runs what a user runs, in a child process, and reads what that prints or writes:

  gates    per op, the property alone on the bundled kernel: `pytest --kernel=OP=kernels/OP.py
           -k test_kernel_agrees --gate-budget S --gate-shards N`, sanitizers on; from its JSON
           report, the drawn cases and rows and the drawn phase's own time (its longest shard).
           Goals: 50 examples/s and 100,000 rows/s an op.
  suite    `pytest -n auto --hypothesis-profile ci -rsx`, timed by pytest (its log, kept with --keep,
           gives each skip's reason). Goal: 150 s.
  mutants  `python -m oracles.tools.power --profile gate --phases property`: every file of
           tests/mutants under the gate profile, each in a child with --mutant-timeout. Goal: every
           mutant caught, and (not a goal of the issue, a condition of a sound suite) no correct
           variant flagged.
  hidden   with --hidden OP=PATH, a whole gate on that kernel, `--gate-budget 30`: a third-party
           kernel with `hidden` as a constexpr compiles once per hidden size. Goal: 90 s of wall
           time with 1,000 rows checked or more.

The goals are for one GPU (issue 14 names an H200); on the CPU the same steps run under Triton's
interpreter and the table says "not a GPU". --time-limit bounds the whole run: each step gets
what is left, and a step cut short says so. The last thing printed is a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from oracles.platform.interrupts import raise_keyboard_interrupt, signal_group

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("gates", "suite", "mutants", "hidden")

# Issue 14's goals, on one GPU.
EXAMPLES_PER_S = 50.0
ROWS_PER_S = 100_000.0
SUITE_S = 150.0
HIDDEN_WALL_S = 90.0
HIDDEN_ROWS = 1_000
MIN_STEP_S = 10.0  # a step started with less left than this would only be stopped
HIDDEN_GOAL = f"<= {HIDDEN_WALL_S:g} s, >= {HIDDEN_ROWS:,} rows"
SUITE_SUBJECT = "pytest -n auto --hypothesis-profile ci"
MUTANTS_SUBJECT = "tests/mutants, gate profile"
MAX_NAMED = 5  # failing tests the suite's row names (a red run's table alone then says which)

# pytest's last line: "946 passed, 24 skipped in 328.09s (0:05:28)" under -q, framed by "=" otherwise
SUMMARY_LINE = re.compile(r"^=*\s*(?P<body>\d+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)\b[^\n]*?) "
                          r"in (?P<seconds>[\d.]+)s\b", re.MULTILINE)


@dataclass
class Measure:
    """One line of the table: what was measured, the goal, and whether it was met (None: no goal
    applies, or the step gave no number)."""
    step: str
    subject: str
    value: str
    goal: str
    met: bool | None
    detail: str = ""


# ---------------------------------------------------------------------------------------------
# Reading what the children wrote (pure)

def gate_measures(report: dict, *, wall_s: float) -> list[Measure]:
    """An op's throughput from a gate's JSON report (oracles/gate/report.schema.json)."""
    out = []
    for impl in report["implementations"]:
        examples, rows = impl["examples"]["fuzz"], impl["rows"]["fuzz"]
        drawn_s = impl["budget"].get("drawn_s") or 0.0
        risks = ", ".join(f"{k} {v}" for k, v in sorted(impl["risk_counts"].items())) or "none"
        detail = (f"{impl['verdict'].upper()}; {examples:,} examples, {rows:,} rows in {drawn_s:.1f} s drawn "
                  f"({wall_s:.0f} s wall); risks: {risks}")
        if not drawn_s or not examples:
            out.append(Measure("gates", impl["op"], "no drawn case", f">= {EXAMPLES_PER_S:g} examples/s", False, detail))
            continue
        per_s, rows_per_s = examples / drawn_s, rows / drawn_s
        out.append(Measure("gates", impl["op"], f"{per_s:.1f} examples/s", f">= {EXAMPLES_PER_S:g} examples/s",
                           per_s >= EXAMPLES_PER_S and impl["verdict"] == "pass", detail))
        out.append(Measure("gates", impl["op"], f"{_number(rows_per_s)} rows/s", f">= {ROWS_PER_S:,.0f} rows/s",
                           rows_per_s >= ROWS_PER_S and impl["verdict"] == "pass", detail))
    return out


def _number(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def suite_measure(output: str, *, returncode: int, wall_s: float) -> Measure:
    """The suite's time from pytest's last summary line."""
    found = list(SUMMARY_LINE.finditer(output))
    if not found:
        return Measure("suite", SUITE_SUBJECT, "no summary line",
                       f"<= {SUITE_S:g} s, green", False, f"exit {returncode} after {wall_s:.0f} s")
    last = found[-1]
    seconds = float(last.group("seconds"))
    green = returncode == 0 and not re.search(r"\b(failed|errors?)\b", last.group("body"))
    return Measure("suite", SUITE_SUBJECT, f"{seconds:.1f} s",
                   f"<= {SUITE_S:g} s, green", green and seconds <= SUITE_S,
                   f"{last.group('body')}; {wall_s:.0f} s wall{failing_tests(output)}")


def failing_tests(output: str) -> str:
    """'; failing: ID, ...' from pytest's short summary lines (the first MAX_NAMED), or ''."""
    failing = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)
    if not failing:
        return ""
    more = f" and {len(failing) - MAX_NAMED} more" if len(failing) > MAX_NAMED else ""
    return f"; failing: {', '.join(failing[:MAX_NAMED])}{more}"


def mutant_measures(results: dict, files: dict[str, dict[str, bool]]) -> list[Measure]:
    """From oracles.tools.power's --json ({op: {file: {"property": {...}}}}) and each op's files
    ({file: is a correct variant}, its MANIFEST.md): mutants caught, correct variants flagged. A
    file stopped from outside or never started has no verdict: neither caught nor missed, and no
    goal is met while one is left. Nor has a correct variant that judged no example (its timeout
    came first): it was never checked, so it is not clean."""
    outcome = {True: {"flagged": [], "clean": [], "no verdict": []},       # correct variants
               False: {"caught": [], "missed": [], "no verdict": []}}      # mutants
    slowest = (0.0, "")
    for op, names in files.items():
        for name, correct in names.items():
            prop = (results.get(op, {}).get(name) or {}).get("property") or {}
            label = f"{op}/{name}"
            if not prop or prop.get("interrupted"):
                kind = "no verdict"
            elif correct:
                kind = "flagged" if prop.get("caught") else "clean" if prop.get("examples", 0) > 0 else "no verdict"
            else:
                kind = "caught" if prop.get("caught") else "missed"
            outcome[correct][kind].append(label + (_how_far(prop) if kind == "missed" else ""))
            if kind == "caught":
                slowest = max(slowest, (prop.get("seconds", 0.0), label))
    mutants, variants = outcome[False], outcome[True]
    n_mutants, n_variants = (sum(map(len, mutants.values())), sum(map(len, variants.values())))
    mutant_detail = _joined((f"missed: {', '.join(mutants['missed'])}", mutants["missed"]),
                            (f"no verdict (stopped or never started): {', '.join(mutants['no verdict'])}",
                             mutants["no verdict"]),
                            (f"slowest catch {slowest[0]:.1f} s ({slowest[1]})", slowest[1]))
    variant_detail = _joined((f"flagged: {', '.join(variants['flagged'])}", variants["flagged"]),
                             (f"no verdict (stopped, never started or no example judged): "
                              f"{', '.join(variants['no verdict'])}", variants["no verdict"]))
    return [Measure("mutants", MUTANTS_SUBJECT, f"{len(mutants['caught'])}/{n_mutants} caught",
                    "every mutant caught", len(mutants["caught"]) == n_mutants if n_mutants else None, mutant_detail),
            Measure("mutants", "correct variants, gate profile",
                    f"{len(variants['flagged'])}/{n_variants} flagged, {len(variants['clean'])} clean",
                    "none flagged", len(variants["clean"]) == n_variants if n_variants else None, variant_detail)]


def _how_far(prop: dict) -> str:
    """How far a missed mutant's property got: all its examples drawn without a failure, or
    stopped by its timeout or a harness error (a miss of another kind: the budget, not the
    strategy, ran out)."""
    why = ("timed out" if prop.get("timed_out") else "harness error" if prop.get("error") else "")
    return f" ({prop.get('examples', 0)} examples in {prop.get('seconds', 0.0):.1f} s{', ' + why if why else ''})"


def _joined(*parts: tuple[str, object]) -> str:
    """The texts whose condition holds, joined with '; '."""
    return "; ".join(text for text, holds in parts if holds)


def _appended(detail: str, text: str) -> str:
    return f"{detail}; {text}" if detail else text


def hidden_measure(report: dict | None, *, wall_s: float, returncode: int, kernel: str) -> Measure:
    if report is None:
        return Measure("hidden", kernel, "no report", HIDDEN_GOAL, False, f"exit {returncode} after {wall_s:.0f} s")
    rows = sum(sum(i["rows"].values()) for i in report["implementations"])
    judged = [i["judge_official"] for i in report["implementations"]]
    detail = (f"verdict {report['verdict'].upper()}; judge cases passed "
              f"{sum(j['passed'] for j in judged)}, failed {sum(j['failed'] for j in judged)}")
    return Measure("hidden", kernel, f"{wall_s:.0f} s, {rows:,} rows", HIDDEN_GOAL,
                   wall_s <= HIDDEN_WALL_S and rows >= HIDDEN_ROWS, detail)


def render(measures: list[Measure], *, device: str, commit: str, date: str) -> str:
    mark = {True: "met", False: "**not met**", None: "-"}
    lines = [f"tritonfuzz tier speed, {date}, {device}, tree {commit}", "",
             "| step | subject | measured | goal (one GPU) | | detail |", "|---|---|---|---|---|---|"]
    lines += [f"| {m.step} | {m.subject} | {m.value} | {m.goal} | {mark[m.met]} | {m.detail} |" for m in measures]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Running the children

@dataclass
class ChildRun:
    code: int
    output: str
    wall_s: float
    stopped: bool  # past its time: stopped by this tool

    @property
    def ending(self) -> str:
        return f"exit {self.code} after {self.wall_s:.0f} s" + (", stopped at its time limit" if self.stopped else "")


def run_child(command: list[str], *, seconds: float, log: Path, grace_s: float = 30.0) -> ChildRun:
    """The child's exit code, output and wall time. It runs in a process group of its own; past
    `seconds`, or when this tool is interrupted, the group gets SIGINT as from a terminal's Ctrl-C
    (a gate then still writes its table and report), and SIGKILL `grace_s` later. Whatever the child
    leaves in its group when it ends (a worker stuck in a driver call, say) is killed."""
    started, stopped = time.monotonic(), False
    with open(log, "w+") as out:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
        try:
            child.wait(timeout=max(1.0, seconds))
        except subprocess.TimeoutExpired:
            stopped = True
            stop_group(child, grace_s)
        except KeyboardInterrupt:
            stop_group(child, grace_s)
            raise
        signal_group(child.pid, signal.SIGKILL)
        out.seek(0)
        return ChildRun(child.returncode, out.read(), time.monotonic() - started, stopped)


def stop_group(child: subprocess.Popen, grace_s: float) -> None:
    signal_group(child.pid, signal.SIGINT)
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_group(child.pid, signal.SIGKILL)
        child.wait()


def gate_command(op: str, kernel: str, *, budget: float, shards: int, report: Path, regressions: Path,
                 select: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "pytest", f"--kernel={op}={kernel}", "-p", "no:cacheprovider", "-q",
            f"--gate-budget={budget:g}", "--minimize-budget=5", f"--gate-shards={shards}",
            f"--gate-report={report}", f"--regressions-dir={regressions}", *select]


def read_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def mutant_files(ops) -> dict[str, dict[str, bool]]:
    """{op: {file: is a correct variant}} from each op's tests/mutants MANIFEST.md."""
    from oracles.tools.power import manifest  # imports torch: only once the mutants ran
    return {op: {m.name: m.correct for m in manifest(op)} for op in ops}


def measure(args, scratch: Path, deadline: float, measures: list[Measure]) -> None:
    """Run the steps asked for, appending each one's measures as it ends (an interrupt keeps those).
    A step with under MIN_STEP_S left is not started: a line says so."""
    from oracles.ops import OPS
    ops = args.op or list(OPS)
    left = lambda: deadline - time.monotonic()  # noqa: E731
    subjects = []
    if "gates" in args.steps:
        subjects += [("gates", op, lambda op=op: gates_step(op, args, scratch, left())) for op in ops]
    if "suite" in args.steps:
        subjects.append(("suite", SUITE_SUBJECT, lambda: [suite_step(scratch, left())]))
    if "mutants" in args.steps:
        subjects.append(("mutants", MUTANTS_SUBJECT, lambda: mutants_step(ops, args, scratch, left())))
    if "hidden" in args.steps and args.hidden:
        subjects.append(("hidden", args.hidden, lambda: [hidden_step(args.hidden, scratch, left())]))
    elif "hidden" in args.steps:
        measures.append(Measure("hidden", "not run", "-", HIDDEN_GOAL, None, "no --hidden OP=PATH given"))
    for step, subject, run in subjects:
        if left() < MIN_STEP_S:
            measures.append(Measure(step, subject, "not run", "-", False,
                                    f"--time-limit spent before this step (under {MIN_STEP_S:g} s left)"))
            continue
        measures += run()


def gates_step(op: str, args, scratch: Path, seconds: float) -> list[Measure]:
    report = scratch / f"gate_{op}.json"
    command = gate_command(op, f"kernels/{op}.py", budget=args.gate_budget, shards=args.gate_shards,
                           report=report, regressions=scratch / "regressions", select=("-k", "test_kernel_agrees"))
    run = run_child(command, seconds=min(seconds, args.gate_budget * 4 + 120), log=scratch / f"gate_{op}.log")
    print(f"[tier_speed] gate {op}: {run.ending}", file=sys.stderr, flush=True)
    found = read_report(report)
    if found is None:
        return [Measure("gates", op, "no report", f">= {EXAMPLES_PER_S:g} examples/s", False,
                        f"{run.ending}: {run.output[-300:]!r}")]
    return [noting_a_stop(m, run) for m in gate_measures(found, wall_s=run.wall_s)]


def suite_step(scratch: Path, seconds: float) -> Measure:
    # -rsx: the log (kept with --keep) gives each skip's and xfail's reason; the goal counts only
    # if nothing GPU-only was skipped to meet it.
    command = [sys.executable, "-m", "pytest", "-n", "auto", "--hypothesis-profile", "ci", "-p", "no:cacheprovider",
               "-q", "-rsx"]
    run = run_child(command, seconds=seconds, log=scratch / "suite.log")
    print(f"[tier_speed] suite: {run.ending}", file=sys.stderr, flush=True)
    return noting_a_stop(suite_measure(run.output, returncode=run.code, wall_s=run.wall_s), run)


def mutants_step(ops: list[str], args, scratch: Path, seconds: float) -> list[Measure]:
    results = scratch / "power.json"
    command = [sys.executable, "-m", "oracles.tools.power", "--profile", "gate", "--phases", "property",
               "--jobs", str(args.jobs), "--timeout", f"{args.mutant_timeout:g}", "--shrink-budget", "3",
               "--minimize-budget", "3", "--json", str(results), *[f"--op={op}" for op in ops]]
    run = run_child(command, seconds=seconds, log=scratch / "power.log")
    print(f"[tier_speed] mutants: {run.ending}", file=sys.stderr, flush=True)
    found = read_report(results)
    if found is None:
        return [Measure("mutants", MUTANTS_SUBJECT, "no results", "every mutant caught", False, run.ending)]
    caught, clean = mutant_measures(found, mutant_files(ops))
    caught.detail = _appended(caught.detail, run.ending)
    return [caught, clean]


def hidden_step(option: str, scratch: Path, seconds: float) -> Measure:
    op, _, kernel = option.partition("=")
    report = scratch / "hidden.json"
    command = gate_command(op, kernel, budget=30, shards=1, report=report, regressions=scratch / "regressions_hidden")
    run = run_child(command, seconds=seconds, log=scratch / "hidden.log")
    print(f"[tier_speed] hidden {kernel}: {run.ending}", file=sys.stderr, flush=True)
    return noting_a_stop(hidden_measure(read_report(report), wall_s=run.wall_s, returncode=run.code,
                                        kernel=Path(kernel).name), run)


def noting_a_stop(measure: Measure, run: ChildRun) -> Measure:
    """The measure, saying so when the child was stopped at its time limit: a partial number, which
    meets no goal."""
    if run.stopped:
        measure.value, measure.met = f"stopped: {measure.value}", (False if measure.met else measure.met)
        measure.detail = _appended(measure.detail, run.ending)
    return measure


def describe_device() -> str:
    """The device the children will see, asked of a child: this process stays off the GPU, so that
    nothing of it shares the device with the gates' MPS daemon."""
    probe = ("import torch; print(f'{torch.cuda.get_device_name()} (torch {torch.__version__})' "
             "if torch.cuda.is_available() else f'CPU, not a GPU: Triton\\'s interpreter (torch {torch.__version__})')")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return done.stdout.strip() or f"unknown device ({done.stderr.strip()[-200:]})"


def current_commit(root: Path = ROOT) -> str:
    """HEAD, and how many tracked files differ from it: a copy of a working tree (a device
    machine's) can carry an older .git than its files."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                             capture_output=True, text=True)
    if not head.stdout.strip():
        return "unknown"
    n = len(changed.stdout.splitlines())
    return head.stdout.strip() + (f" with {n} tracked file(s) changed" if n else "")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oracles.tools.tier_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="gates,suite,mutants,hidden", type=steps_option,
                   help=f"which steps, comma-separated (default: all of {','.join(STEPS)}; hidden needs --hidden)")
    p.add_argument("--op", action="append", help="only this op's gate and mutants (repeatable; default: every op)")
    p.add_argument("--gate-budget", type=positive(float), default=30.0, help="seconds of drawn cases an op (default 30)")
    p.add_argument("--gate-shards", type=positive(int), default=None,
                   help="shards of each op's gate (default: 12 on a GPU, 1 on the CPU)")
    p.add_argument("--hidden", metavar="OP=PATH", help="a third-party kernel for the hidden step")
    p.add_argument("--jobs", type=positive(int), default=os.cpu_count() or 1, help="mutant files at once (default: CPUs)")
    p.add_argument("--mutant-timeout", type=positive(float), default=120.0, help="seconds a mutant file may run (default 120)")
    p.add_argument("--time-limit", type=positive(float), default=3600.0, help="seconds for the whole run (default 3600)")
    p.add_argument("--out", metavar="FILE.md", help="also write the table here")
    p.add_argument("--json", metavar="FILE.json", help="also write the measures here")
    p.add_argument("--keep", metavar="DIR", help="keep the children's logs and reports in DIR")
    return p


def positive(kind):
    def parse(value: str):
        try:
            number = kind(value)
        except ValueError:
            number = 0
        if not number > 0:
            raise argparse.ArgumentTypeError(f"{value!r}: expected a positive {'integer' if kind is int else 'number'}")
        return number
    return parse


def steps_option(value: str) -> tuple[str, ...]:
    steps = tuple(s for s in value.split(",") if s)
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        raise argparse.ArgumentTypeError(f"--steps {value!r}: expected a comma-separated list of {', '.join(STEPS)}")
    return steps


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from oracles.ops import OPS
    for op in args.op or ():
        if op not in OPS:
            _parser().error(f"--op {op!r}: expected one of {', '.join(sorted(OPS))}")
    if args.hidden:
        op, _, kernel = args.hidden.partition("=")
        if op not in OPS or not kernel:
            _parser().error(f"--hidden {args.hidden!r}: expected OP=PATH with OP one of {', '.join(sorted(OPS))}")
        if not Path(kernel).is_file():
            _parser().error(f"--hidden {args.hidden!r}: {kernel} is not a file; expected a .py module or a .zip")
    device = describe_device()
    if args.gate_shards is None:
        args.gate_shards = 12 if not device.startswith("CPU") else 1
    deadline = time.monotonic() + args.time_limit
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # a shell's timeout stops the children too
    measures: list[Measure] = []
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="tritonfuzz-tier-speed-") as tmp:
        scratch = Path(args.keep) if args.keep else Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            measure(args, scratch, deadline, measures)
        except KeyboardInterrupt:
            interrupted = True
    text = render(measures, device=device, commit=current_commit(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    if interrupted:
        text += "\nInterrupted: the steps above ended; the one in flight and those after it did not run.\n"
    from oracles.tools.power import write_atomically
    if args.out:
        write_atomically(Path(args.out), text)
    if args.json:
        write_atomically(Path(args.json), json.dumps([asdict(m) for m in measures], indent=1))
    print(text)
    if interrupted:
        return 130
    return 0 if all(m.met is not False for m in measures) else 1


if __name__ == "__main__":
    sys.exit(main())
