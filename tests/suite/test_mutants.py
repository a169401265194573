"""The suite's power, as a test: every mutant in tests/mutants/<op>/ is caught by the op's property
under the `ci` profile, and no correct variant there is flagged.

Each file is run by oracles.tools.power.fuzz -- the function `python -m oracles.tools.power` runs -- in this
process: the op's case strategy at SIZES[device], the ci profile's examples, every case through
run_case with the sanitizers and the determinism check on (oracles.tools.power.power_options; the
gfx942 compile off, since it can only add a risk and the test reads failures), no shrinking.
The profile is ci whatever --hypothesis-profile says: the claim is about ci.
tests/mutants/<op>/MANIFEST.md says what each file gets wrong, which input exposes it and which
check should catch it; `python -m oracles.tools.power` adds the two baselines and fixture sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracles.ops import OPS
from oracles.platform.device import gpu_available
from oracles.tools.power import child_env, fuzz, load, manifest, power_options, run_order, unlisted

PROFILE = "ci"

# Mutants the ci profile's examples do not reach: real gaps of the strategies, each with why.
# Strict: once a strategy change catches one, the xfail turns into a failure to remove it here.
CI_GAPS: dict[str, str] = {}  # none: every mutant is caught within the ci profile's examples
# The same on a GPU, where the ci profile draws GPU-sized cases (another derandomized sequence).
# softcap_ignored and softmax_without_bias escaped the 20 GPU-sized examples on 2026-12-01 and are
# caught since moe_fused_gate draws its softmax branch twice as often (tests/results/mutation-power.md).
GPU_CI_GAPS: dict[str, str] = {
    # Since GPU cases carry bulk rows, a single-row case needs a single-row structure and no bulk:
    # the ci profile's 20 GPU-sized cases hold none (its derandomized sequence repeats a few
    # structures; simulated on the CPU, 2026-12-02). The gate's judge cases (M = 1) catch it.
    # Since the GPU pools hold whole structures (2026-12-04) the native ci run catches the three
    # listed here before (hc_head square_before_upcast, moe rsf_scales_routed_only, gate_topk
    # torch_fallback_full_sort): XPASS on an H200 (tests/results/2026-12-04-h200-session13.md).
    "moe_fused_gate/torch_fallback_single_row.py": "no single-row case among the 20 GPU-sized examples",
}


def mutant_params():
    params = []
    for op in OPS:
        for m in manifest(op):
            key = f"{op}/{m.name}"
            marks = [getattr(pytest.mark, op)]
            if key in CI_GAPS:
                marks.append(pytest.mark.xfail(reason=f"ci gap: {CI_GAPS[key]}", strict=True))
            elif key in GPU_CI_GAPS and gpu_available():
                marks.append(pytest.mark.xfail(reason=f"ci gap on a GPU: {GPU_CI_GAPS[key]}", strict=True))
            params.append(pytest.param(m, id=key, marks=marks))
    return params


@pytest.mark.parametrize("mutant", mutant_params())
def test_mutant_is_caught_and_correct_variant_is_clean(mutant, run_options):
    # Caught and clean read failures only; the gfx942 compile (portability) can only add a risk,
    # and from a cold Triton cache it was 13 of hc_head correct_tokens_tile's 35 s on the CPU.
    options = power_options(run_options.device, portability=False)
    result = fuzz(load(mutant), profile=PROFILE, options=options, shrink_budget_s=0)
    assert not result.error, f"{mutant.option}: the harness failed: {result.error}"
    where = f"{mutant.option} under the {PROFILE} profile ({result.examples} examples, {result.seconds:.1f} s)"
    if mutant.correct:
        assert not result.caught, (f"correct variant flagged by {', '.join(result.checks)} in {where} "
                                   f"(a false positive, or the variant is wrong):\n{result.message}")
    else:
        assert result.caught, (f"mutant not caught in {where}.\nWhat is wrong: {mutant.wrong}\n"
                               f"Exposing input: {mutant.exposing}\nExpected check: {mutant.expected}")


@pytest.mark.parametrize("op", [op for op in OPS if manifest(op)])
def test_manifest_lists_every_mutant_file(op):
    rows = manifest(op)
    assert not unlisted(op), f"tests/mutants/{op}/ files missing from MANIFEST.md: {[p.name for p in unlisted(op)]}"
    missing = [m.name for m in rows if not m.path.exists()]
    assert not missing, f"tests/mutants/{op}/MANIFEST.md lists files that do not exist: {missing}"
    names = [m.name for m in rows]
    assert len(names) == len(set(names)), f"tests/mutants/{op}/MANIFEST.md lists a file twice"
    incomplete = [m.name for m in rows if not (m.wrong and m.exposing and m.expected)]
    assert not incomplete, f"tests/mutants/{op}/MANIFEST.md rows with an empty cell: {incomplete}"
    assert sum(not m.correct for m in rows) >= 15 and sum(m.correct for m in rows) >= 4, \
        f"{op}: expected at least 15 mutants and 4 correct variants, got {len(rows)} rows"


def test_children_share_the_cores_unless_the_user_set_their_threads(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert child_env({}, jobs=16)["OMP_NUM_THREADS"] == "1"
    assert child_env({}, jobs=4)["OMP_NUM_THREADS"] == "4"
    assert child_env({}, jobs=32)["OMP_NUM_THREADS"] == "1"
    assert child_env({"OMP_NUM_THREADS": "8"}, jobs=16)["OMP_NUM_THREADS"] == "8"
    assert child_env({"PYTHONPATH": "/x"}, jobs=1)["PYTHONPATH"].endswith("/x")


def test_every_wrong_kernel_starts_before_any_correct_variant_in_manifest_order():
    """A correct variant holds its child (and the GPU) for its whole timeout; the wrong kernels go
    first so that none waits behind them."""
    rows = [m for op in OPS for m in manifest(op)]
    ordered = run_order(rows)
    assert sorted(map(str, ordered)) == sorted(map(str, rows))
    first_correct = next(i for i, m in enumerate(ordered) if m.correct)
    assert not any(m.correct for m in ordered[:first_correct]) and all(m.correct for m in ordered[first_correct:])
    assert [m for m in ordered if not m.correct] == [m for m in rows if not m.correct]
    assert [m for m in ordered if m.correct] == [m for m in rows if m.correct]


def test_a_child_past_its_timeout_says_where_it_was():
    """`python -m oracles.tools.power` runs each file in a child process with a timeout; a child that
    runs into it dumps its Python stacks first, and the report carries them (a correct variant runs
    the gate profile's 400 examples, far longer than 15 s here)."""
    from oracles.tools.power import run_isolated
    variant = next(m for m in manifest("gate_topk") if m.correct)
    result = run_isolated(variant, profile="gate", phases=("property",), timeout_s=15)
    prop = result["property"]
    assert prop["timed_out"] and not prop["caught"], prop
    assert "Thread 0x" in prop["error"] and 'File "' in prop["error"], prop["error"][-2000:]


@pytest.mark.parametrize("written", [
    {"caught": False, "examples": 400, "seconds": 117.2},                     # a correct variant, clean
    {"caught": True, "checks": ["indices"], "examples": 3, "seconds": 2.5},   # a mutant caught and minimized
])
def test_a_child_stopped_after_writing_every_result_keeps_them(monkeypatch, written):
    """A child whose harnesses all ended, stopped on its way out (its exit ran past the timeout),
    is reported with the results it wrote, not as a property that timed out on no case: on an
    H200 a correct variant's 400 clean examples came back as "timed out, 0 examples" (2026-12-07)."""
    import subprocess

    from oracles.tools import power

    def child_that_exits_late(cmd, *, env, timeout_s):
        progress = Path(cmd[cmd.index("--progress") + 1])
        progress.write_text(json.dumps({"results": {"property": written},
                                        "in_flight": {"phase": "", "case": None, "summary": ""}}))
        raise subprocess.TimeoutExpired(cmd, timeout_s, output="", stderr="")
    monkeypatch.setattr(power, "_run_child", child_that_exits_late)
    variant = next(m for m in manifest("gate_topk") if m.correct)
    result = power.run_isolated(variant, profile="gate", phases=("property",), timeout_s=120)
    assert result["property"] == written
    assert result["ended_after_results"] == "timed out after 120 s"


def test_a_child_ended_by_a_signal_from_outside_is_interrupted_not_caught():
    """SIGINT, SIGTERM and SIGHUP come from a shell or a person, not from the kernel: a child they
    end is "interrupted"; a crash signal (a segfault) is still a crash."""
    import signal

    from oracles.tools.power import child_ending
    assert child_ending(0) is None
    assert child_ending(-signal.SIGTERM) == "interrupted (SIGTERM)"
    assert child_ending(-signal.SIGINT) == "interrupted (SIGINT)"
    assert child_ending(-signal.SIGHUP) == "interrupted (SIGHUP)"
    assert child_ending(-signal.SIGSEGV) == f"crashed (signal {int(signal.SIGSEGV)})"
    assert child_ending(3) == "exited with code 3"
    assert child_ending(-signal.SIGKILL, stopping=True) == f"interrupted (signal {int(signal.SIGKILL)})"


def test_a_run_stopped_from_outside_keeps_its_tables_and_leaves_no_child(tmp_path):
    """`timeout` sends SIGTERM to power (here to it alone, not its children): it stops its children,
    writes the tables of what ran -- the file in flight as interrupted, not caught -- and exits 130."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from processes import processes_naming
    root = Path(__file__).resolve().parents[2]
    variant = next(m for m in manifest("gate_topk") if m.correct)
    marker = tmp_path / "fixtures-of-this-test"  # in every child's command line

    def children() -> list[int]:
        return list(processes_naming(str(marker)))

    run = subprocess.Popen([sys.executable, "-m", "oracles.tools.power", "--op", "gate_topk", "--only", variant.name,
                            "--profile", "gate", "--phases", "property", "--jobs", "1", "--timeout", "300",
                            "--fixtures-dir", str(marker), "--json", str(tmp_path / "r.json"),
                            "--out", str(tmp_path / "r.md")],
                           cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not [pid for pid in children() if pid != run.pid] and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # the child imports and starts drawing
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, err[-3000:]
    entry = json.loads((tmp_path / "r.json").read_text())["gate_topk"][variant.name]["property"]
    assert entry["interrupted"] and not entry["caught"] and not entry["crashed"], entry
    table = (tmp_path / "r.md").read_text()
    assert f"| {variant.name} |" in table and "1 file(s) interrupted" in table and "interrupted" in out, out[-2000:]
    assert not children(), f"children left running: {children()} (pid {os.getpid()})"
