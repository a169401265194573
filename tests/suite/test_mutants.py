"""The suite's power, as a test: every mutant in tests/mutants/<op>/ is caught by the op's property
under the `ci` profile, and no correct variant there is flagged.

Each file is run by oracles.tools.power.fuzz -- the function `python -m oracles.tools.power` runs -- in this
process: the op's case strategy at SIZES[device], the ci profile's examples, every case through
run_case with the sanitizers and the determinism check on (oracles.tools.power.power_options), no
shrinking. The profile is ci whatever --hypothesis-profile says: the claim is about ci.
tests/mutants/<op>/MANIFEST.md says what each file gets wrong, which input exposes it and which
check should catch it; `python -m oracles.tools.power` adds the two baselines and fixture sizes.
"""

from __future__ import annotations

import pytest

from oracles.ops import OPS
from oracles.platform.device import gpu_available
from oracles.tools.power import fuzz, load, manifest, power_options, unlisted

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
    result = fuzz(load(mutant), profile=PROFILE, options=power_options(run_options.device), shrink_budget_s=0)
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
