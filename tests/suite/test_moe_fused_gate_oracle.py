"""moe_fused_gate's oracle and strategies, tested themselves.

The oracle: the task reference passes its own tie-aware verdict on every drawn case (so the
float32 bounds are not too tight for a correct float32 evaluation) and on the judge's cases; the
float64 scores agree with mpmath at 50 digits; the indices check accepts every order among
tied experts and tied groups (exact or within float32 rounding, NaN with NaN, dropped experts at
-inf) and rejects a skipped larger score, a group kept against the scores, a repeated or outside
expert, a wrong shared index and an ascending order; an underflowing row is a risk, a weight out
of every float32 evaluation's reach a failure; a weight a few ulps of its bound off fails.

The strategies: every promised feature is reachable, bad arguments raise InvalidArgument naming
the argument, drawn cases and the minimizer's moves are valid for the official reference, the
judge's cases are built as its test builds them and lie inside the judge domain.
"""

import itertools
import math

import mpmath
import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from oracles.ops import moe_fused_gate as oracle
from oracles.tolerances import EXP_ARG_ULPS
from oracles.verdict import Verdict
from strategies.values import JUDGE_FORM
from strategies.moe_fused_gate import (JUDGE_CASES, bench_cases, build_case, judge_cases, model_cases,
                                       moe_fused_gate_cases, smaller_cases)

pytestmark = pytest.mark.moe_fused_gate
mpmath.mp.dps = 50

CASES = moe_fused_gate_cases(max_rows=4, max_experts=130, max_routed=10)
FIRST = settings(max_examples=3000, database=None, deadline=None, suppress_health_check=list(HealthCheck),
                 phases=[Phase.generate])


def reach(condition, strategy=CASES):
    """A drawn case satisfying `condition` (the first found: no shrinking)."""
    return find(strategy, condition, settings=FIRST)


def checks_of(case, indices=None, *, weights=None, judge_exact=False):
    """The verdict for the kernel outputs (weights, indices): by default the reference's own;
    `indices` alone gives the weights the reference's float32 steps compute for that choice."""
    reference = dict(zip(oracle.OUTPUT_NAMES, oracle.reference(**case.inputs)))
    if indices is None:
        idx = reference["indices"]
    else:
        idx = torch.tensor(indices, dtype=torch.int32)
    if weights is None:
        KR = case.inputs["topk"] - case.inputs["num_fused_shared_experts"]
        N = case.inputs["scores"].shape[1]
        routed = idx[:, :KR].long()
        inside = bool(((routed >= 0) & (routed < N)).all())
        weights = oracle.weights_float32(case, routed) if inside else reference["weights"]
    checks = oracle.verdict_checks(case, {"weights": weights, "indices": idx}, reference, judge_exact=judge_exact)
    return {c.name: c for c in checks}, Verdict(checks)


def row(sel_like, *, topk, bias=None, dtype=torch.float32, **options):
    """A one-row case with softmax scoring and no cap (sel = scores + bias exactly), so the sel
    values are what the test writes."""
    scores = torch.tensor([sel_like], dtype=torch.float64).to(dtype)
    b = torch.zeros(scores.shape[1]) if bias is None else torch.tensor(bias, dtype=torch.float32)
    return build_case(scores=scores, bias=b, topk=topk, scoring_func="softmax", renormalize=False, **options)


# ---------------------------------------------------------------------------------------------
# The reference passes its own verdict


@given(case=CASES)
@settings(max_examples=60, deadline=None)
def test_reference_passes_its_own_verdict(case):
    """torch's float32 reference is a correct float32 evaluation: its indices are a valid choice
    and its weights within the bound of oracle64 on every drawn case (ties, NaN, +-inf, floors,
    the -inf fill, every scoring, dtype and layout), except on underflowing rows, where the
    difference is a risk of kind degenerate -- never a failure, and never a tie (it is its own
    tie order, so --judge-exact passes)."""
    checks, verdict = checks_of(case)
    assert not verdict.failures(judge_exact=True), verdict.render()
    assert checks["indices"].status == "pass", checks["indices"]
    assert checks["accuracy"].status == "pass" or checks["accuracy"].kind == "degenerate", checks["accuracy"]


@pytest.mark.parametrize("case", [c for c in judge_cases() if c.inputs["scores"].shape[0] <= 512],
                         ids=lambda c: c.label.replace(" ", "-"))
def test_reference_passes_on_judge_cases(case):
    checks, verdict = checks_of(case)
    assert all(c.status == "pass" for c in checks.values()), verdict.render()


# ---------------------------------------------------------------------------------------------
# The float64 oracle against mpmath


def mp_sigmoid(x):
    return 1 / (1 + mpmath.exp(-x))


def mp_sqrt_softplus(x):
    return mpmath.sqrt(mpmath.log1p(mpmath.exp(x)))


@pytest.mark.parametrize("scoring, c", [("sigmoid", 0.0), ("sqrtsoftplus", 0.0), ("softmax", 0.0), ("softmax", 30.0),
                                        ("softmax", 1.0)])
def test_scores64_against_mpmath(scoring, c):
    """act and sel in float64 within 1e-13 relative of 50-digit arithmetic, from -120 to 120."""
    x = torch.tensor([[-120.0, -40.0, -17.5, -1.0, -1e-3, 0.0, 2e-3, 0.7, 19.5, 20.5, 60.0, 120.0]])
    bias = torch.linspace(-0.5, 0.5, x.shape[1])
    sc = oracle.scores64(x, bias, scoring, c)
    xs = [mpmath.mpf(float(v)) for v in x[0].tolist()]
    bs = [mpmath.mpf(float(v)) for v in bias.float().tolist()]
    if scoring == "sigmoid":
        act = [mp_sigmoid(v) for v in xs]
        sel = [a + b for a, b in zip(act, bs)]
    elif scoring == "sqrtsoftplus":
        act = [mp_sqrt_softplus(v) for v in xs]
        sel = [a + b for a, b in zip(act, bs)]
    else:
        logits = [c * mpmath.tanh(v / c) if c else v for v in xs]
        sel = [v + b for v, b in zip(logits, bs)]
        top = max(sel)
        total = sum(mpmath.exp(v - top) for v in sel)
        act = [mpmath.exp(v - top) / total for v in sel]
    for j in range(x.shape[1]):
        for got, exact in ((sc.act[0, j], act[j]), (sc.sel[0, j], sel[j])):
            assert abs(float(got) - float(exact)) <= 1e-13 * abs(float(exact)) + 1e-300, (scoring, c, j, float(got),
                                                                                        float(exact))


def test_bounds_cover_a_float32_evaluation_and_little_more():
    """The per-element bounds hold for torch's float32 act and sel (a correct evaluation), and
    stay within (EXP_ARG_ULPS |x| + 32) ulps of act -- exp's argument rounding is EXP_ARG_ULPS |x| ulps of its result, the
    rest a few -- (softmax: within 2 max|z| + N + 64 ulps, z = max(sel) - sel, N for a sum of N
    terms in any order, plus twice the largest sel error: each weight moves with its own sel and
    with all of them): a bound that swallowed real errors would be useless."""
    x = torch.linspace(-100, 100, 4001)[None, :]
    bias = torch.zeros(x.shape[1])
    u = 2.0 ** -24
    for scoring, c in (("sigmoid", 0.0), ("sqrtsoftplus", 0.0), ("softmax", 30.0)):
        sc = oracle.scores64(x, bias, scoring, c)
        act32, sel32 = oracle._activations32(x, bias, scoring, c)
        assert bool(((act32.double() - sc.act).abs() <= sc.act_err).all()), scoring
        assert bool(((sel32.double() - sc.sel).abs() <= sc.tol).all()), scoring
        # away from FLT_MIN: softplus below it may flush (sqrt of a flushed value: 1e-19 absolute)
        big = sc.act.abs() > (1e-16 if scoring == "sqrtsoftplus" else 1e-30)
        ulps = (EXP_ARG_ULPS * x.double().abs() + 32) if scoring != "softmax" else \
            2 * (sc.sel.max() - sc.sel.min()) + x.shape[1] + 64 + 2 * sc.tol.max() / u
        assert bool((sc.act_err[big] <= (ulps * u * sc.act.abs())[big] + 1e-37).all()), scoring


def test_the_sigmoid_bounds_cover_a_gpu_exp():
    """exp as a GPU computes it (Triton's tl.exp, CUDA's __expf): ex2 of the float32 product of x
    and float32 log2(e). Even with an exact ex2 and an exact 1 / (1 + e) its sigmoid is up to
    (1.224 |x| + 1) ulps off (54.3 at x = -44.52, past the (|x| + 8) ulps the bounds once allowed:
    a correct kernel failed `accuracy` on an H100): both routers' bounds must cover it."""
    from oracles.ops import sigmoid_gate_topk_renorm
    x = torch.linspace(-87, 87, 200_001, dtype=torch.float32)
    e = torch.exp2(((-x) * torch.tensor(math.log2(math.e), dtype=torch.float32)).double())
    gpu = 1 / (1 + e)
    exact = torch.sigmoid(x.double())
    for bound in (oracle.sigmoid_error(x.double(), exact), sigmoid_gate_topk_renorm.sigmoid_error(x.double(), exact)):
        assert bool(((gpu - exact).abs() <= bound).all()), float(((gpu - exact).abs() / bound).max())


# ---------------------------------------------------------------------------------------------
# Indices: ties in any order, nothing else

TIED = [1.0, 3.0, 3.0, 2.0, 3.0, 0.0]  # the design card's scores: three experts tie at 3


@pytest.mark.parametrize("k", [1, 2, 3])
def test_any_order_among_tied_experts_passes(k):
    case = row(TIED, topk=k)
    reference = oracle.reference(**case.inputs)[1][0].tolist()
    for choice in itertools.permutations([1, 2, 4], k):
        checks, verdict = checks_of(case, [list(choice)])
        assert checks["indices"].status == "pass", (choice, checks["indices"].message)
        assert checks["accuracy"].status == "pass", (choice, checks["accuracy"].message)
        expected = "pass" if list(choice) == reference else "risk"
        assert checks["judge"].status == expected, (choice, checks["judge"])
        if expected == "risk":
            assert checks["judge"].kind == "tie" and "exact tie" in checks["judge"].message
            assert [c.name for c in verdict.failures(judge_exact=True)] == ["judge"]
            assert not verdict.failures()


@pytest.mark.parametrize("choice, why", [
    ([[1, 3]], "left out"),        # 2 chosen while two 3s are left out
    ([[3, 1]], "left out"),
    ([[1, 1]], "repeated"),
    ([[1, 6]], "outside"),         # a padding lane
    ([[-1, 1]], "outside"),
])
def test_a_skipped_larger_score_a_repeat_or_an_outside_expert_fails(choice, why):
    case = row(TIED, topk=2)
    checks, _ = checks_of(case, choice)
    assert checks["indices"].status == "fail" and why in checks["indices"].message, checks["indices"]
    assert checks["judge"].status == "fail"


def test_descending_order_is_required():
    case = row(TIED, topk=4)
    checks, _ = checks_of(case, [[3, 1, 2, 4]])
    assert checks["indices"].status == "fail" and "descending" in checks["indices"].message
    checks, _ = checks_of(case, [[4, 1, 2, 3]])
    assert checks["indices"].status == "pass", checks["indices"].message


def test_a_near_tie_within_float32_rounding_is_a_tie_and_beyond_it_is_not():
    """sigmoid(x) + bias: two experts whose float64 sel differ by far less than float32 rounding
    may come in either order; 1e-3 apart they may not."""
    x = torch.tensor([[0.5, 0.5, -3.0]])
    near = build_case(scores=x, bias=torch.tensor([0.0, 3e-9, 0.0]), topk=1)
    assert float(oracle.scores64(x, near.inputs["bias"]).sel[0, 1] - oracle.scores64(x, near.inputs["bias"]).sel[0, 0]) > 0
    for choice in ([[0]], [[1]]):
        checks, _ = checks_of(near, choice)
        assert checks["indices"].status == "pass", (choice, checks["indices"])
    far = build_case(scores=x, bias=torch.tensor([0.0, 1e-3, 0.0]), topk=1)
    checks, _ = checks_of(far, [[0]])
    assert checks["indices"].status == "fail", checks["indices"]


def test_nan_ranks_first_and_nans_tie():
    nan = math.nan
    case = row([1.0, nan, 3.0, nan, math.inf], topk=3)
    for choice in ([[1, 3, 4]], [[3, 1, 4]]):
        checks, _ = checks_of(case, choice)
        assert checks["indices"].status == "pass", (choice, checks["indices"])
    for choice in ([[4, 1, 3]], [[1, 4, 3]], [[1, 3, 2]]):
        checks, _ = checks_of(case, choice)
        assert checks["indices"].status == "fail" and "NaN" in checks["indices"].message, (choice, checks["indices"])
    checks, _ = checks_of(case)
    assert checks["judge"].status == "skip"  # softmax of a row with NaN: the reference's weights are NaN


def test_the_judge_on_the_rows_it_judges_is_a_tie_risk_when_only_a_nan_row_is_wrong():
    """A row whose NaN is never chosen fails `indices`; the judge leaves it out (softmax of a NaN
    row: NaN weights in the reference), and a tie order on the finite row it judges is a tie
    risk, described with that row's own choice. A wrong choice there still fails the judge."""
    scores = torch.tensor([TIED, [1.0, math.nan, 0.0, 2.0, -1.0, 0.5]], dtype=torch.float32)
    case = build_case(scores=scores, bias=torch.zeros(6), topk=2, scoring_func="softmax", renormalize=False)
    reference = oracle.reference(**case.inputs)[1].tolist()
    tie_order = [2, 1] if reference[0] == [2, 4] else [2, 4]
    checks, _ = checks_of(case, [tie_order, [3, 0]])
    assert checks["indices"].status == "fail" and "row 1" in checks["indices"].message
    assert checks["judge"].status == "risk" and checks["judge"].kind == "tie", checks["judge"]
    assert "exact tie" in checks["judge"].message
    checks, _ = checks_of(case, [[2, 3], [3, 0]])
    assert checks["judge"].status == "fail" and "not a tie order" in checks["judge"].message


def test_a_nan_bias_is_chosen_first_and_its_weights_stay_finite():
    """sigmoid: the bias enters sel only, so a NaN bias makes that expert rank first (NaN) while
    its weight, sigmoid(score), stays finite -- the judge compares it."""
    case = build_case(scores=torch.tensor([[0.1, 0.9, 0.5]]), bias=torch.tensor([0.0, 0.0, math.nan]), topk=2)
    weights, indices = oracle.reference(**case.inputs)
    assert indices[0, 0] == 2 and bool(weights.isfinite().all())
    checks, verdict = checks_of(case)
    assert not verdict.failures() and checks["judge"].status == "pass", verdict.render()
    checks, _ = checks_of(case, [[1, 2]])
    assert checks["indices"].status == "fail"


# ---------------------------------------------------------------------------------------------
# Groups


def grouped(values, *, topk, G, topk_group, bias=None):
    return row(values, topk=topk, bias=bias, num_expert_group=G, topk_group=topk_group)


def test_equal_maxima_count_twice_in_a_group_score():
    """Group 0 holds (5, 5): score 10; group 1 holds (6, 3): score 9. With one group kept the
    experts come from group 0; a kernel that sets aside every copy of the maximum (5 + next
    distinct) would keep group 1 and fails."""
    case = grouped([5.0, 5.0, 1.0, 6.0, 3.0, 0.0], topk=2, G=2, topk_group=1)
    assert set(oracle.reference(**case.inputs)[1][0].tolist()) == {0, 1}
    for choice in ([[0, 1]], [[1, 0]]):
        checks, verdict = checks_of(case, choice)
        assert not verdict.failures(), verdict.render()
    checks, _ = checks_of(case, [[3, 4]])
    assert checks["indices"].status == "fail" and "groups" in checks["indices"].message, checks["indices"]


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_a_group_holding_nan_of_either_sign_scores_nan(device):
    """NaN ranks above every number, so a group's top two hold it and its score is NaN, for a
    negative-sign NaN too (CUDA's radix select ranks -NaN below -inf: pytorch/pytorch#190781)."""
    sel = torch.tensor([[0.5, -math.nan, 0.25, 1.0, 3.0, 2.0, math.nan, -1.0]], dtype=torch.float64, device=device)
    zero = torch.zeros_like(sel)
    g = oracle.groups64(oracle.Scores64(sel, zero, sel, zero), G=4, topk_group=2)
    assert g.score.isnan().tolist() == [[True, False, False, True]], g.score
    assert g.score[0, 1].item() == 1.25 and g.score[0, 2].item() == 5.0, g.score


def test_tied_groups_may_be_kept_either_way_but_not_mixed():
    case = grouped([4.0, 1.0, 2.0, 2.0, 1.0, 4.0], topk=2, G=2, topk_group=1)  # scores 6 and 6
    for choice in ([[0, 2]], [[5, 3]]):
        checks, verdict = checks_of(case, choice)
        assert checks["indices"].status == "pass" and not verdict.failures(), (choice, verdict.render())
    checks, _ = checks_of(case, [[0, 5]])  # one expert of each group: no kept set allows it
    assert checks["indices"].status == "fail", checks["indices"]
    reference = oracle.reference(**case.inputs)[1]
    other = [[5, 3]] if set(reference[0].tolist()) == {0, 2} else [[0, 2]]
    checks, _ = checks_of(case, other)
    assert checks["judge"].status == "risk" and "kept groups differ" in checks["judge"].message, checks["judge"]


def test_the_inf_fill_takes_dropped_experts_in_any_order_once_each():
    """topk 4 with one group of 2 kept: the last two slots hold the dropped group's experts (all
    -inf to torch.topk), in any order, each once; their weights are their own act."""
    case = grouped([3.0, 2.0, 1.0, 0.0], topk=4, G=2, topk_group=1)
    for choice in ([[0, 1, 2, 3]], [[0, 1, 3, 2]]):
        checks, verdict = checks_of(case, choice)
        assert not verdict.failures(), (choice, verdict.render())
    checks, _ = checks_of(case, [[0, 1, 2, 2]])
    assert checks["indices"].status == "fail" and "repeated" in checks["indices"].message
    checks, _ = checks_of(case, [[0, 2, 1, 3]])
    assert checks["indices"].status == "fail"


def test_shared_slots_must_hold_n_plus_j():
    case = build_case(scores=torch.randn(2, 8), bias=torch.zeros(8), topk=4, num_fused_shared_experts=2)
    _, indices = oracle.reference(**case.inputs)
    assert indices[:, 2:].tolist() == [[8, 9], [8, 9]]
    wrong = indices.clone()
    wrong[:, 3] = 8
    checks, _ = checks_of(case, wrong.tolist())
    assert checks["indices"].status == "fail" and "shared slots" in checks["indices"].message


# ---------------------------------------------------------------------------------------------
# Weights


def test_a_weight_off_by_its_bound_fails_and_one_ulp_passes():
    case = judge_cases()[1]  # DeepSeek-like: 8 groups, topk 8 with one shared slot, rsf 2.5
    weights, indices = oracle.reference(**case.inputs)
    ulp = weights.clone()
    ulp[0, 3] = torch.nextafter(ulp[0, 3], torch.tensor(2.0))
    checks, verdict = checks_of(case, indices.tolist(), weights=ulp)
    assert not verdict.failures(), verdict.render()
    off = weights.clone()
    off[0, 3] *= 1 + 1e-5
    checks, _ = checks_of(case, indices.tolist(), weights=off)
    assert checks["accuracy"].status == "fail" and "weights[0, 3]" in checks["accuracy"].message, checks["accuracy"]


def test_an_underflowing_row_is_a_risk_inside_the_hull_and_a_failure_outside():
    """Every chosen sigmoid near FLT_MIN (scores about -87), renormalized: float32 may divide by
    the tiny sum or take the divide-by-1 branch; a weight in [0, 1] is a degenerate/ftz risk, a
    weight of 3 a failure."""
    scores = torch.tensor([[-87.0, -87.5, -88.0, -200.0]])
    case = build_case(scores=scores, bias=torch.tensor([1.0, 0.9, 0.8, 0.0]), topk=2)
    weights, indices = oracle.reference(**case.inputs)
    for w in (torch.tensor([[0.6, 0.4]]), torch.tensor([[0.0, 0.0]]), weights):
        checks, verdict = checks_of(case, indices.tolist(), weights=w)
        assert not verdict.failures(), (w, verdict.render())
    checks, _ = checks_of(case, indices.tolist(), weights=torch.tensor([[3.0, 0.0]]))
    assert checks["accuracy"].status == "fail" or checks["specials"].status == "fail"


def test_a_subnormal_routed_sum_moves_the_shared_weight_either_way_and_far_is_still_a_failure():
    """(rsum / r) / rsum * r with one sigmoid near FLT_MIN: rsum / r rounds to the subnormal grid and
    the division by rsum magnifies it. On an H100 (2026-12-06) the float32 reference gave
    0.999999046 and the bundled kernel 1.00000095 for a shared weight of 1 (rsf 16), and the
    kernel failed `accuracy` inside the judge's domain: a float32-degenerate row, a risk. A
    shared weight of 10 or -1 is no float32 evaluation: still a failure."""
    scores = torch.tensor([[-87.0, -100.0]], dtype=torch.bfloat16)
    case = build_case(scores=scores, bias=torch.tensor([0.1, 0.0]), topk=2, num_fused_shared_experts=1,
                      routed_scaling_factor=16.0, apply_routed_scaling_factor_on_output=True)
    weights, indices = oracle.reference(**case.inputs)
    tiny = torch.finfo(torch.float32).tiny
    assert tiny < float(torch.sigmoid(torch.tensor(-87.0))) < 16 * tiny  # the premise: rsum / 16 is subnormal
    for shared in (1.00000095, 0.999999046, 1.0, 0.0):
        w = weights.clone()
        w[0, 1] = shared
        checks, verdict = checks_of(case, indices.tolist(), weights=w)
        assert not verdict.failures(), (shared, verdict.render())
        assert checks["accuracy"].status in ("pass", "risk"), checks["accuracy"]
    for shared in (10.0, -1.0):
        w = weights.clone()
        w[0, 1] = shared
        checks, _ = checks_of(case, indices.tolist(), weights=w)
        assert checks["accuracy"].status == "fail" and "weights[0, 1]" in checks["accuracy"].message, checks["accuracy"]


def test_a_nan_routed_sum_leaves_the_row_unnormalized():
    """A NaN score is chosen first; rsum is NaN, NaN > 0 is false: the other weights stay
    unnormalized sigmoids and the shared slot is NaN. A kernel dividing by the NaN sum fails."""
    case = build_case(scores=torch.tensor([[math.nan, 1.0, 0.0]]), bias=torch.zeros(3), topk=3,
                      num_fused_shared_experts=1)
    weights, indices = oracle.reference(**case.inputs)
    assert indices[0].tolist() == [0, 1, 3] and math.isnan(weights[0, 0]) and math.isnan(weights[0, 2])
    assert abs(float(weights[0, 1]) - 1 / (1 + math.exp(-1))) < 1e-6
    all_nan = torch.full_like(weights, math.nan)
    checks, _ = checks_of(case, indices.tolist(), weights=all_nan)
    assert checks["specials"].status == "fail", checks["specials"]


def test_contract_wants_float32_weights_and_int32_indices():
    case = judge_cases()[0]
    weights, indices = oracle.reference(**case.inputs)
    checks, _ = checks_of(case, indices.tolist(), weights=weights.bfloat16())
    assert checks["contract"].status == "fail" and "float32" in checks["contract"].message
    reference = dict(zip(oracle.OUTPUT_NAMES, (weights, indices)))
    check = oracle.verdict_checks(case, {"weights": weights, "indices": indices.long()}, reference)[0]
    assert check.status == "fail" and "int32" in check.message
    assert torch.equal(indices.long(), indices)  # why: the judge's torch.equal does not see it


# ---------------------------------------------------------------------------------------------
# The judge domain


def test_judge_domain():
    for case in judge_cases() + model_cases():
        assert not oracle.judge_domain_violations(case), (case.label, oracle.judge_domain_violations(case))
    case = judge_cases()[1]
    v = oracle.judge_domain_violations
    assert v(case.with_inputs(scores=case.inputs["scores"].half())) == ["scores.dtype=float16"]
    assert v(case.with_inputs(scores=case.inputs["scores"][:, ::2], bias=case.inputs["bias"][::2].contiguous(),
                              num_expert_group=1, topk_group=1)) == ["scores.layout=strided"]
    assert v(case.with_inputs(scoring_func="Sigmoid")) == ["scoring_func='Sigmoid'"]
    assert v(case.with_inputs(routed_scaling_factor=None)) == ["routed_scaling_factor=None"]
    assert v(case.with_inputs(topk=1)) == ["routed slots=0"]
    assert v(case.with_inputs(num_expert_group=32, topk_group=4)) == ["num_expert_group=32,topk_group=4"]
    assert v(case.with_inputs(scores=case.inputs["scores"][:0])) == ["M=0"]


# ---------------------------------------------------------------------------------------------
# Strategies


def shape(case):
    a = case.inputs
    return a["scores"].shape[0], a["scores"].shape[1], a["topk"] - a["num_fused_shared_experts"]


@pytest.mark.parametrize("feature", [
    "grouped", "epg_not_pow2", "G_not_pow2", "equal_group_max", "group_tie", "group_boundary_tie", "ties",
    "boundary_tie", "near_tie", "nan", "inf", "neg_inf", "bias_nan", "KR>kept", "KR=0", "KR=1", "KR=kept",
    "shared", "softcap", "rsf=None", "apply_rsf", "scoring=sqrtsoftplus", "scoring=softmax", "scoring=odd",
    "scores=wide", "scores=negative", "scores=group_copies", "bias=large", "layout=permuted", "layout=offset",
    "bias_layout=stepped", "dtype=float32", "dtype=float16", "M=0"])
def test_feature_is_reachable(feature):
    reach(lambda c: feature in c.features)


def test_an_equal_group_maximum_is_a_real_one():
    """Recomputed from the float32 sel, not the label: some group's two largest sel are equal."""
    def equal_max(c):
        a = c.inputs
        M, N, _ = shape(c)
        G = a["num_expert_group"]
        if M == 0 or G == 1:
            return False
        _, sel = oracle._activations32(a["scores"], a["bias"], a["scoring_func"], a["moe_softcapping"])
        top = torch.topk(sel.view(M, G, N // G), 2, dim=-1).values
        return bool(((top[..., 0] == top[..., 1]) & top[..., 0].isfinite()).any())
    assert "equal_group_max" in reach(equal_max).features


@pytest.mark.parametrize("kwargs, argument", [
    (dict(min_rows=3, max_rows=2), "min_rows"),
    (dict(max_experts=0), "max_experts"),
    (dict(max_routed=0), "max_routed"),
    (dict(max_shared=-1), "max_shared"),
    (dict(max_groups=17), "max_groups"),
    (dict(dtypes=(torch.int32,)), "dtypes"),
])
def test_cases_validate_their_arguments(kwargs, argument):
    with pytest.raises(InvalidArgument, match=argument):
        moe_fused_gate_cases(**kwargs)


def test_drawn_cases_and_smaller_moves_are_valid_for_the_official_reference():
    @given(case=moe_fused_gate_cases(max_rows=3, max_experts=70, max_routed=8))
    @settings(max_examples=60, deadline=None, database=None)
    def check(case):
        M, N, KR = shape(case)
        assert 0 <= KR <= N
        oracle.reference(**case.inputs)
        for move in smaller_cases(case):
            oracle.reference(**move.inputs)
    check()


def test_a_gpu_run_mostly_reuses_whole_structures_and_they_are_valid():
    """SIZES["cuda"] draws most cases from GPU_STRUCTURES (each a compile at most once a
    process): every option of such a case is the pool entry's, the reference accepts it, and the
    values still vary (two draws of one structure are different cases)."""
    from strategies.moe_fused_gate import GPU_STRUCTURES
    small = tuple((min(M, 4), *rest) for M, *rest in GPU_STRUCTURES)  # few rows: the CPU draws them
    seen = []

    @given(case=moe_fused_gate_cases(max_rows=4, max_experts=384, max_routed=12, max_shared=3,
                                     structure_pool=small))
    @settings(max_examples=40, deadline=None, database=None, derandomize=True)  # shares, not a coin flip
    def check(case):
        a = case.inputs
        M, N = a["scores"].shape
        key = (M, N, a["num_expert_group"], a["topk_group"], a["topk"] - a["num_fused_shared_experts"],
               a["num_fused_shared_experts"], a["scoring_func"], a["moe_softcapping"], a["renormalize"],
               a["routed_scaling_factor"], a["apply_routed_scaling_factor_on_output"], a["scores"].dtype)
        seen.append((key in small, case.content_hash()))
        oracle.reference(**a)
    check()
    pooled = [h for hit, h in seen if hit]
    assert len(pooled) >= len(seen) // 2, f"{len(pooled)} of {len(seen)} drawn from the pool"
    assert len(set(pooled)) > len(pooled) // 2, "the pooled cases do not vary"
    with pytest.raises(InvalidArgument, match="structure"):
        moe_fused_gate_cases(max_rows=4, structure_pool=((5, 7, 2, 1, 1, 0, "sigmoid", 0.0, True, 1.0, False,
                                                          torch.bfloat16),))  # 2 groups do not divide 7


def test_nan_case_shrinks_small():
    """Hypothesis shrinks a NaN case to one expert (two in the judge's form), contiguous, bf16; rows shrink less (each row
    draws its own kind and hazard, so the NaN's row cannot simply become row 0), and the
    minimizer's row moves (smaller_cases) finish the job: one row."""
    from strategies.minimize import minimize
    case = find(CASES, lambda c: bool(c.inputs["scores"].isnan().any()),
                settings=settings(FIRST, derandomize=True, phases=[Phase.generate, Phase.shrink]))
    M, N, _ = shape(case)
    smallest = 2 if JUDGE_FORM in case.features else 1  # the judge's form (the shrink target) has N >= 2
    assert N == smallest and case.inputs["scores"].is_contiguous() and case.inputs["scores"].dtype == torch.bfloat16, case
    small = minimize(case, lambda c: bool(c.inputs["scores"].isnan().any()), smaller_cases=smaller_cases,
                     budget_s=5.0, values=False)
    assert shape(small)[:2] == (1, 1), small


def test_judge_cases_are_the_judges():
    """As tests/test_moe_fused_gate.py of flagos-ai/FlagGems-sglang builds them: a generator on the
    device seeded 0 a case, randn scores cast to the case's dtype, then 0.1 randn bias; every
    option by keyword; every case inside the judge domain."""
    cases = judge_cases()
    assert len(cases) == 10 and [shape(c)[:2] for c in cases] == [(m, n) for m, n, *_ in JUDGE_CASES]
    g = torch.Generator(device="cpu").manual_seed(0)
    scores = torch.randn(83, 64, generator=g, dtype=torch.float32).to(torch.bfloat16)
    bias = 0.1 * torch.randn(64, generator=g, dtype=torch.float32)
    third = cases[2].inputs
    assert torch.equal(third["scores"], scores) and torch.equal(third["bias"], bias)
    assert third["scoring_func"] == "sqrtsoftplus" and third["topk"] == 6
    assert cases[1].inputs["num_expert_group"] == 8 and cases[1].inputs["topk_group"] == 4
    assert cases[3].inputs["moe_softcapping"] == 30.0 and cases[3].inputs["renormalize"] is False
    assert cases[4].inputs["scores"].dtype == torch.float32 and cases[4].inputs["apply_routed_scaling_factor_on_output"]
    assert [shape(c)[0] for c in cases[5:]] == [1, 8, 64, 512, 4096]
    for case in cases:
        assert list(case.inputs) == list(oracle.reference.__code__.co_varnames[:11])
        assert not oracle.judge_domain_violations(case)


def test_bench_cases_are_the_official_grid():
    rows = bench_cases()
    assert [(label, size, bench) for label, size, bench, _ in rows][:5] == \
        [(f"m={m}", m, True) for m in (1, 8, 64, 512, 4096)]
    inputs = rows[0][3](1, "cpu")
    assert inputs["scores"].shape == (1, 256) and inputs["scores"].dtype == torch.bfloat16
    assert (inputs["topk"], inputs["num_fused_shared_experts"], inputs["num_expert_group"], inputs["topk_group"]) == \
        (8, 1, 8, 4)


@settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
@given(case=moe_fused_gate_cases(max_rows=12), seed=st.integers(0, 2**16))
def test_rows_judged_together_get_the_verdict_each_row_gets_alone(case, seed):
    """judge_choices judges rows together, batched by their candidate kept-group sets: every row's
    Choice must be the one the row gets alone (kept_sets, judge_choice), for the oracle's own
    choice and for a random one."""
    args = case.inputs
    o = oracle._options(args)
    sc = oracle.scores64(args["scores"], args["bias"], o["scoring_func"], o["c"])
    g = oracle.groups64(sc, o["G"], o["topk_group"])
    KR = o["topk"] - o["S"]
    M, N = sc.sel.shape
    if M == 0 or KR == 0:
        return
    gen = torch.Generator().manual_seed(seed)
    for routed in (oracle.oracle_choice(sc, g, KR), torch.rand(M, N, generator=gen).argsort(-1)[:, :KR]):
        together = oracle.judge_choices(routed, sc, g)
        lo, hi = sc.rank_interval()
        for m in range(M):
            alone = oracle.judge_choice(routed[m], lo[m], hi[m], g, oracle.kept_sets(g, m))
            got = together[m]
            assert got.ok == alone.ok and torch.equal(got.valid_sets, alone.valid_sets) and \
                torch.equal(got.all_sets, alone.all_sets), (m, got, alone)
            assert torch.equal(got.skipped, alone.skipped) and torch.equal(got.inverted, alone.inverted) and \
                torch.equal(got.closest, alone.closest), (m, got, alone)


@pytest.mark.parametrize("seed", range(3))
def test_rows_with_tied_groups_judged_together_match_each_row_alone(seed):
    """The same as above on rows built to tie: groups copied onto others (exact group-score ties
    at and around the topk_group boundary) and chains of group scores a fraction of a float32 ulp
    apart (a group tied with its neighbours, not with the far end: candidate sets that the
    validity filter rejects), so rows with several valid kept sets and rows settled despite ties
    both occur."""
    gen = torch.Generator().manual_seed(seed)
    for G, per in ((2, 3), (4, 2), (8, 4), (6, 5)):
        M, N = 24, G * per
        scores = torch.randn(M, N, generator=gen)
        for m in range(0, M, 2):  # every other row: group 0 copied onto 1-3 random other groups
            for h in torch.randperm(G - 1, generator=gen)[:1 + m % 3].tolist():
                scores[m, (h + 1) * per:(h + 2) * per] = scores[m, :per]
        for m in range(1, M, 4):  # chains of near ties: neighbours within rounding, the ends apart
            steps = torch.randperm(G, generator=gen).double() * (1 + m % 3) * 1e-7
            scores[m] = (0.1 + steps).repeat_interleave(per).float()
        sc = oracle.scores64(scores, torch.zeros(N), "sigmoid", 0.0)
        several = 0
        for tg in range(1, G):
            g = oracle.groups64(sc, G, tg)
            KR = min(tg * per, 5)
            lo, hi = sc.rank_interval()
            several += sum(oracle.kept_sets(g, m).shape[0] > 1 for m in range(M))
            for routed in (oracle.oracle_choice(sc, g, KR), torch.rand(M, N, generator=gen).argsort(-1)[:, :KR]):
                together = oracle.judge_choices(routed, sc, g)
                for m in range(M):
                    alone = oracle.judge_choice(routed[m], lo[m], hi[m], g, oracle.kept_sets(g, m))
                    got = together[m]
                    assert got.ok == alone.ok and torch.equal(got.valid_sets, alone.valid_sets) and \
                        torch.equal(got.all_sets, alone.all_sets) and torch.equal(got.closest, alone.closest) and \
                        torch.equal(got.skipped, alone.skipped) and torch.equal(got.inverted, alone.inverted), \
                        (G, tg, m, got, alone)
        assert several, f"G={G}: no row with several valid kept sets"


def test_softmax_lanes_that_float32_merges_are_not_a_failure():
    """A bulk row on the H200: bf16 scores near 1e30 on 18 lanes with biases below half a float32
    ulp there. float32 sel (the reference's, any float32 kernel's) makes the 18 lanes equal and
    softmax gives 1/18 each; float64 keeps them apart and gives one lane 1. The linearized bound
    (first order in the sel error, ~3e22 here) failed the reference's own 1/18. The softmax
    interval accepts any split among lanes float32 may merge, and still fails a weight no softmax
    gives there (above 1), and an ordinary row's weight 0.1% off."""
    N = 32
    scores = torch.zeros(2, N)
    scores[0, :18] = 1e30
    scores[1] = torch.randn(N, generator=torch.Generator().manual_seed(1))
    bias = (torch.randn(N, generator=torch.Generator().manual_seed(0)) * 1e22).clamp(-3e22, 3e22)
    bias[18:] = 0.0
    case = build_case(scores=scores.to(torch.bfloat16), bias=bias, topk=4, scoring_func="softmax",
                      num_fused_shared_experts=0, renormalize=False, routed_scaling_factor=1.0,
                      apply_routed_scaling_factor_on_output=False, moe_softcapping=0.0, num_expert_group=1,
                      topk_group=1)
    ref = dict(zip(oracle.OUTPUT_NAMES, oracle.reference(**case.inputs)))
    assert torch.allclose(ref["weights"][0], torch.full((4,), 1 / 18)), ref["weights"]

    def accuracy(weights):
        outputs = {"weights": weights, "indices": ref["indices"].int()}
        return {c.name: c for c in oracle.verdict_checks(case, outputs, ref)}["accuracy"]
    assert accuracy(ref["weights"].clone()).status == "pass", accuracy(ref["weights"].clone())
    above_one = ref["weights"].clone()
    above_one[0, 0] = 1.5
    assert accuracy(above_one).status == "fail", accuracy(above_one)
    ordinary_off = ref["weights"].clone()
    ordinary_off[1, 0] *= 1.001
    assert accuracy(ordinary_off).status == "fail", accuracy(ordinary_off)
