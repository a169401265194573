"""oracles/tools/tier_speed.py: the tier's speed against issue 14's goals, read from what the gate,
pytest and the mutation-power tool write. A reading that calls a slow, failing or unfinished run
"met" would hide exactly what the tool exists to show."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from oracles.gate.report import ImplementationSummary, Tally, report_json
from oracles.tools import tier_speed
from oracles.verdict import FAIL
from oracles.tools.tier_speed import gate_measures, hidden_measure, mutant_measures, suite_measure

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "oracles" / "gate" / "report.schema.json").read_text())


def gate_report(*, examples: int, rows: int, drawn_s: float, passed: bool = True) -> dict:
    """A gate report as the gate writes it, from the gate's own bookkeeping."""
    summary = ImplementationSummary("gate_topk", "gate_topk.py")
    tally = Tally("gate_topk", "gate_topk.py", "fuzz", examples=examples, rows=rows, seconds=drawn_s,
                  budget_exhausted=True)
    tally.risk_counts["tie"] = 3
    if not passed:
        tally.checks["accuracy"][FAIL] += 1
    summary.merge_tally(tally.to_json(), passed=passed)
    summary.record_test("t::agrees", "call", "passed" if passed else "failed")
    report = report_json([summary], device="cuda", profile="gate", budget_s=25.0)
    jsonschema.validate(report, SCHEMA)
    return report


def test_gate_rates_are_drawn_cases_over_the_drawn_phases_time():
    fast, rows = gate_measures(gate_report(examples=2811, rows=22_117_281, drawn_s=25.0), wall_s=60)
    assert (fast.value, fast.met) == ("112.4 examples/s", True)
    assert (rows.value, rows.met) == ("884,691 rows/s", True)
    assert "PASS; 2,811 examples, 22,117,281 rows in 25.0 s drawn (60 s wall); risks: tie 3" == fast.detail


def test_a_slow_gate_or_a_failing_one_does_not_meet_the_goal():
    slow, few_rows = gate_measures(gate_report(examples=1200, rows=2_400_000, drawn_s=25.0), wall_s=40)
    assert (slow.value, slow.met) == ("48.0 examples/s", False) and (few_rows.value, few_rows.met) == ("96,000 rows/s", False)
    fast_but_failing = gate_measures(gate_report(examples=5000, rows=9_000_000, drawn_s=25.0, passed=False), wall_s=40)
    assert [m.met for m in fast_but_failing] == [False, False]
    (nothing,) = gate_measures(gate_report(examples=0, rows=0, drawn_s=0.0), wall_s=40)
    assert (nothing.value, nothing.met) == ("no drawn case", False)


@pytest.mark.parametrize("output, code, value, met", [
    ("SKIPPED [8] tests/kernel/test_ops.py:37: GPU only\n946 passed, 24 skipped in 128.09s (0:02:08)\n", 0, "128.1 s", True),
    ("FAILED tests/a.py::t - in 3.0s\n1 failed, 945 passed, 24 skipped in 128.09s (0:02:08)\n", 1, "128.1 s", False),
    ("...\n=========== 903 passed, 32 skipped, 1 xfailed in 119.50s (0:01:59) ===========\n", 0, "119.5 s", True),
    ("== 1 failed, 902 passed, 32 skipped, 1 xfailed in 119.50s (0:01:59) ==\n", 1, "119.5 s", False),
    ("== 929 passed, 24 skipped in 168.20s (0:02:48) ==\n", 0, "168.2 s", False),
    ("== 929 passed, 2 errors in 100.00s ==\n", 1, "100.0 s", False),
    ("collecting ... (killed at the time limit)", -2, "no summary line", False),
])
def test_the_suite_is_met_only_green_and_within_150_s(output, code, value, met):
    measured = suite_measure(output, returncode=code, wall_s=130)
    assert (measured.value, measured.met) == (value, met), measured


def test_a_red_suite_names_its_failing_tests():
    """A red native run's row says which tests failed (two failed on an H100 and the table said
    only "2 failed", 2026-12-07): pytest's short summary lines, the first MAX_NAMED of them."""
    output = ("FAILED tests/suite/test_mps.py::test_a - AssertionError\nERROR tests/b.py::test_b\n"
              + "".join(f"FAILED tests/c.py::t{i}\n" for i in range(6))
              + "7 failed, 1 error, 940 passed in 93.60s (0:01:33)\n")
    detail = suite_measure(output, returncode=1, wall_s=101).detail
    assert detail.endswith("failing: tests/suite/test_mps.py::test_a, tests/b.py::test_b, tests/c.py::t0, "
                           "tests/c.py::t1, tests/c.py::t2 and 3 more"), detail
    assert "failing" not in suite_measure("946 passed in 99.00s\n", returncode=0, wall_s=100).detail


def test_mutants_stopped_or_never_started_are_no_verdict_and_keep_the_goal_unmet():
    files = {"hc_head": {"caught.py": False, "missed.py": False, "timed_out.py": False, "stopped.py": False,
                         "unstarted.py": False,
                         "correct_clean.py": True, "correct_flagged.py": True, "correct_unjudged.py": True}}
    results = {"hc_head": {
        "caught.py": {"property": {"caught": True, "seconds": 4.2}},
        "missed.py": {"property": {"caught": False, "examples": 400, "seconds": 61.0}},
        "timed_out.py": {"property": {"caught": False, "timed_out": True, "examples": 15, "seconds": 118.4}},
        "stopped.py": {"property": {"caught": False, "interrupted": True}},
        "correct_clean.py": {"property": {"caught": False, "timed_out": True, "examples": 226}},
        "correct_flagged.py": {"property": {"caught": True}},
        # timed out before its first example was judged (GPU, 2026-12-07): checked on nothing
        "correct_unjudged.py": {"property": {"caught": False, "timed_out": True, "examples": 0}},
    }}
    mutants, variants = mutant_measures(results, files)
    assert (mutants.value, mutants.met) == ("1/5 caught", False)
    assert mutants.detail == ("missed: hc_head/missed.py (400 examples in 61.0 s), hc_head/timed_out.py "
                              "(15 examples in 118.4 s, timed out); no verdict (stopped or never started): hc_head/stopped.py, "
                              "hc_head/unstarted.py; slowest catch 4.2 s (hc_head/caught.py)")
    assert (variants.value, variants.met) == ("1/3 flagged, 1 clean", False)
    assert variants.detail == ("flagged: hc_head/correct_flagged.py; no verdict (stopped, never started or no "
                               "example judged): hc_head/correct_unjudged.py")

    everything = {"hc_head": {name: {"property": {"caught": not correct, "seconds": 1.0, "examples": 3}}
                              for name, correct in files["hc_head"].items()}}
    assert [m.met for m in mutant_measures(everything, files)] == [True, True]


def test_the_hidden_constexpr_gate_needs_both_its_time_and_its_rows():
    report = gate_report(examples=400, rows=1_114_372, drawn_s=22.0)
    assert hidden_measure(report, wall_s=57, returncode=0, kernel="k.py").met is True
    assert hidden_measure(report, wall_s=95, returncode=0, kernel="k.py").met is False
    assert hidden_measure(gate_report(examples=3, rows=900, drawn_s=22.0), wall_s=40, returncode=0, kernel="k.py").met is False
    missing = hidden_measure(None, wall_s=12, returncode=4, kernel="k.py")
    assert (missing.value, missing.met, missing.detail) == ("no report", False, "exit 4 after 12 s")


@pytest.mark.parametrize("argv, message", [
    (["--steps", "gates,speed"], "--steps 'gates,speed': expected a comma-separated list of gates, suite, mutants, hidden"),
    (["--op", "softmax"], "--op 'softmax': expected one of"),
    (["--hidden", "kernel.py"], "--hidden 'kernel.py': expected OP=PATH"),
    (["--hidden", "hc_head=/nonexistent/k.py"], "--hidden 'hc_head=/nonexistent/k.py': /nonexistent/k.py is not a file"),
    (["--gate-budget", "0"], "argument --gate-budget: '0': expected a positive number"),
    (["--jobs", "two"], "argument --jobs: 'two': expected a positive integer"),
])
def test_bad_arguments_are_one_line_naming_the_argument(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        tier_speed.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


IGNORES_SIGINT_WITH_A_CHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(120)"])
print(grandchild.pid, flush=True)
time.sleep(120)
"""


def test_a_child_past_its_time_is_stopped_with_everything_it_started(tmp_path):
    """A step past its time (or the tool interrupted): SIGINT to the child's group, then SIGKILL;
    nothing it started outlives the step (a stuck gate worker would hold the GPU for the next)."""
    run = tier_speed.run_child([sys.executable, "-c", IGNORES_SIGINT_WITH_A_CHILD], seconds=2,
                               log=tmp_path / "log", grace_s=1)
    grandchild = int(run.output.split()[0])
    assert run.code == -signal.SIGKILL and run.stopped and run.wall_s < 30, run
    assert run.ending.endswith(", stopped at its time limit")
    deadline = time.monotonic() + 10
    while Path(f"/proc/{grandchild}").exists() and "Z" not in Path(f"/proc/{grandchild}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the grandchild outlived its step"
        time.sleep(0.1)


def test_a_step_with_no_time_left_says_so_and_counts_as_not_met(tmp_path, capsys):
    out = tmp_path / "measures.json"
    code = tier_speed.main(["--steps", "suite,mutants", "--time-limit", "0.001", "--json", str(out)])
    measures = json.loads(out.read_text())
    assert code == 1 and [(m["step"], m["value"], m["met"]) for m in measures] == [
        ("suite", "not run", False), ("mutants", "not run", False)], measures
    assert "--time-limit spent before this step" in capsys.readouterr().out


def test_a_step_stopped_at_its_time_limit_meets_no_goal_and_says_so():
    fast = gate_measures(gate_report(examples=2811, rows=22_117_281, drawn_s=25.0), wall_s=60)[0]
    assert fast.met is True
    stopped = tier_speed.noting_a_stop(fast, tier_speed.ChildRun(2, "", 300.0, stopped=True))
    assert (stopped.value, stopped.met) == ("stopped: 112.4 examples/s", False)
    assert stopped.detail.endswith("; exit 2 after 300 s, stopped at its time limit")
    unmet = tier_speed.noting_a_stop(tier_speed.Measure("hidden", "k.py", "95 s", "-", None), tier_speed.ChildRun(0, "", 1.0, False))
    assert (unmet.value, unmet.met) == ("95 s", None)


def test_the_tree_named_says_when_the_files_are_not_the_commits(tmp_path):
    """A device machine's copy of a working tree carried an older .git than its files: the table
    named a commit that was not what ran."""
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "a")
    head = tier_speed.current_commit(tmp_path)
    assert len(head) >= 7 and " " not in head, head
    (tmp_path / "a.py").write_text("x = 2\n")
    (tmp_path / "untracked.txt").write_text("")
    assert tier_speed.current_commit(tmp_path) == f"{head} with 1 tracked file(s) changed"
