"""The oracles are tested themselves: oracle64 against the task reference on ordinary inputs
(the float32 reference must sit inside the accuracy bound, which proves the bound is not too
tight for a correct float32 computation) and against mpmath at 50 digits on tiny cases."""

import dataclasses
import mpmath
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles.ops import hc_head as hc_oracle
from strategies.hc_head import hc_head_cases, judge_cases

mpmath.mp.dps = 50


@given(case=hc_head_cases(min_tokens=1, max_tokens=4, max_hidden=300))
@settings(max_examples=60)
def test_hc_head_reference_within_bound_of_oracle64(case):
    """The task's float32 reference is a correct float32 evaluation: it passes the accuracy
    check, except on degenerate tokens (its own normalizer over- or underflows), which are a
    risk of that kind -- never a failure, and never `ftz` (the CPU reference keeps subnormals)."""
    ref = hc_oracle.reference(**case.inputs)
    checks = {c.name: c for c in hc_oracle.verdict_checks(case, {"y": ref}, {"y": ref})}
    accuracy = checks["accuracy"]
    assert accuracy.status == "pass" or (accuracy.status == "risk" and accuracy.kind == "degenerate"), str(accuracy)


@pytest.mark.parametrize("case", judge_cases()[:4], ids=lambda c: c.label)
def test_hc_head_oracle64_matches_reference_on_judge_cases(case):
    ref = hc_oracle.reference(**case.inputs)
    checks = {c.name: c for c in hc_oracle.verdict_checks(case, {"y": ref}, {"y": ref})}
    assert checks["accuracy"].status == "pass", checks["accuracy"].message
    assert checks["specials"].status == "pass", checks["specials"].message


def mp_hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    T, h, H = x.shape
    K = h * H
    out = []
    for t in range(T):
        f = [mpmath.mpf(float(v)) for v in x[t].reshape(-1).tolist()]
        r = 1 / mpmath.sqrt(sum(v * v for v in f) / K + mpmath.mpf(norm_eps))
        pre = []
        for j in range(h):
            m = r * sum(mpmath.mpf(float(w)) * v for w, v in zip(hc_fn[j].tolist(), f))
            z = m * mpmath.mpf(float(hc_scale[0])) + mpmath.mpf(float(hc_base[j]))
            pre.append(1 / (1 + mpmath.exp(-z)) + mpmath.mpf(hc_eps))
        out.append([sum(pre[j] * mpmath.mpf(float(x[t, j, d])) for j in range(h)) for d in range(H)])
    return out


@given(case=hc_head_cases(min_tokens=1, max_tokens=2, max_hc_mult=3, max_hidden=9, dtypes=(torch.float32,)))
@settings(max_examples=30)
def test_hc_head_oracle64_against_mpmath(case):
    """float64 keeps ~1e-12 relative accuracy on finite tiny cases (mixture of scales)."""
    o = hc_oracle.oracle64(**case.inputs)
    if not bool(o.y.isfinite().all()):
        return  # specials: the float64 oracle defines no value to compare here
    exact = mp_hc_head(**case.inputs)
    for t, row in enumerate(exact):
        for d, v in enumerate(row):
            got = o.y[t, d].item()
            scale = float(sum(abs(o.pre[t, j].item() * case.inputs["x"][t, j, d].item())
                              for j in range(o.pre.shape[1])))
            assert abs(got - float(v)) <= 1e-12 * scale + 1e-300, (t, d, got, float(v))


# =============================================================================================
# sigmoid_gate_topk_renorm (sgtr): the reference passes its own tie-aware verdict (the bounds
# are not too tight), the float64 oracle agrees with mpmath, the indices check accepts every
# order among ties and rejects a skipped larger score, NaN ranks as in torch.topk, and the
# accuracy bound is not so loose that a wrong weight passes.

import itertools  # noqa: E402
import math  # noqa: E402

from oracles.ops import sigmoid_gate_topk_renorm as sgtr_oracle  # noqa: E402
from oracles.verdict import Verdict  # noqa: E402
from strategies.sigmoid_gate_topk_renorm import build_case as sgtr_case  # noqa: E402
from strategies.sigmoid_gate_topk_renorm import judge_cases as sgtr_judge_cases  # noqa: E402
from strategies.sigmoid_gate_topk_renorm import sigmoid_gate_topk_renorm_cases  # noqa: E402

sgtr = pytest.mark.sigmoid_gate_topk_renorm


def sgtr_checks(case, indices=None, *, outputs=None, judge_exact=False):
    """The verdict for outputs that follow the float32 reference on `indices` (default: the
    reference's own choice), as {check name: Check}."""
    reference = dict(zip(sgtr_oracle.OUTPUT_NAMES, sgtr_oracle.reference(**case.inputs)))
    if outputs is None:
        idx = reference["indices"] if indices is None else torch.tensor(indices, dtype=torch.int32)
        routed_w, shared_w = sgtr_oracle.weights_float32(case.inputs["logits"], idx, case.inputs["n_shared_experts"],
                                                         case.inputs["route_scale"], case.inputs["global_scale"])
        outputs = {"routed_w": routed_w, "indices": idx, "shared_w": shared_w}
    checks = sgtr_oracle.verdict_checks(case, outputs, reference, judge_exact=judge_exact)
    return {c.name: c for c in checks}, Verdict(checks)


def scores_case(bias, *, logits=None, k, S=0, dtype=torch.float32):
    """One token whose selection scores are sigmoid(logits) + bias (logits default to 0: sel = 0.5 + bias)."""
    N = len(bias)
    x = torch.zeros(1, N + S) if logits is None else torch.tensor([logits + [0.0] * S])
    return sgtr_case(logits=x.to(dtype), k=k, n_shared_experts=S, bias=torch.tensor(bias, dtype=torch.float32))


@sgtr
@given(case=sigmoid_gate_topk_renorm_cases(max_tokens=4, max_experts=70))
@settings(max_examples=80)
def test_sgtr_reference_passes_its_own_verdict(case):
    """The task's float32 reference is a correct float32 evaluation: its indices are a valid top-k
    within the score tolerance and its weights sit inside the accuracy bound (ties, NaN, inf,
    huge logits, every bias kind and layout included)."""
    checks, verdict = sgtr_checks(case)
    assert not verdict.failures(judge_exact=True), verdict.render()
    assert checks["indices"].status == "pass"


@sgtr
@pytest.mark.parametrize("case", sgtr_judge_cases()[:4], ids=lambda c: c.label)
def test_sgtr_reference_passes_on_judge_cases(case):
    checks, verdict = sgtr_checks(case)
    assert all(c.status == "pass" for c in checks.values()), verdict.render()


@sgtr
def test_sgtr_reference_passes_where_float32_sigmoid_underflows():
    """Every active logit near -100: float32 sigmoids are 0 or subnormal (0/0 = NaN on the CPU) while
    float64 has finite weights: ambiguous by design, never a failure either way."""
    case = sgtr_case(logits=torch.tensor([[-100.0, -101.0, -99.0, -100.5]]), k=2, n_shared_experts=1,
                     bias=torch.zeros(3))
    checks, verdict = sgtr_checks(case)
    assert not verdict.failures(), verdict.render()
    finite = sgtr_oracle.weights64(case.inputs["logits"], torch.tensor([[2, 0]]), 1, 1.0, torch.tensor(1.0))
    outputs = {"routed_w": finite.w[:, :2].float(), "indices": torch.tensor([[2, 0]], dtype=torch.int32),
               "shared_w": finite.w[:, 2:].float()}
    checks, verdict = sgtr_checks(case, outputs=outputs)
    assert not verdict.failures(), verdict.render()


def mp_sigmoid(x: float):
    if math.isinf(x):
        return mpmath.mpf(1 if x > 0 else 0)
    return 1 / (1 + mpmath.exp(-mpmath.mpf(x)))


@sgtr
@given(case=sigmoid_gate_topk_renorm_cases(min_tokens=1, max_tokens=2, max_experts=9, max_shared=3,
                                           dtypes=(torch.float32,)))
@settings(max_examples=40)
def test_sgtr_oracle64_against_mpmath(case):
    """Scores and weights (given the float64 top-k) keep ~1e-13 accuracy on tiny cases. Rows where
    float64 itself underflows (a sum of sigmoids below 1e-290) or a logit is NaN are left out."""
    a = case.inputs
    scores, idx, o = sgtr_oracle.oracle64(**a)
    x, bias = a["logits"].double(), a["bias"].double()
    T, E = x.shape
    N = E - a["n_shared_experts"]
    for t in range(T):
        if bool(x[t].isnan().any()) or not float(o.total[t]) > 1e-290:
            continue
        for e in range(N):
            exact = mp_sigmoid(float(x[t, e])) + mpmath.mpf(float(bias[e]))
            assert abs(float(scores.sel[t, e]) - float(exact)) <= 1e-15 * (1 + abs(float(bias[e]))), (t, e)
        lanes = idx[t].tolist() + list(range(N, E))
        p = [mp_sigmoid(float(x[t, e])) for e in lanes]
        total = sum(p)
        for j, pj in enumerate(p):
            exact = pj / total * mpmath.mpf(o.scale)
            assert abs(float(o.w[t, j]) - float(exact)) <= 1e-13 * abs(o.scale) + 1e-300, (t, j, float(o.w[t, j]), float(exact))


def sgtr_pairwise_problems(scores, t: int, chosen: list[int]) -> set[str]:
    """The indices check's rules pair by pair in plain Python, for row t of distinct in-range lanes:
    'skipped' (an unchosen lane's score lies definitely above a chosen one's: NaN above every
    number, else its interval's lower end above the other's upper end) and 'descending' (a later
    position definitely above an earlier one)."""
    lo, hi, nan = scores.lo[t].tolist(), scores.hi[t].tolist(), scores.nan[t].tolist()

    def above(a, b):
        return (nan[a] and not nan[b]) or (not nan[a] and not nan[b] and lo[a] > hi[b])
    unchosen = [e for e in range(len(lo)) if e not in chosen]
    problems = set()
    if any(above(e, c) for c in chosen for e in unchosen):
        problems.add("skipped")
    if any(above(chosen[j], chosen[i]) for i in range(len(chosen)) for j in range(i + 1, len(chosen))):
        problems.add("descending")
    return problems


@sgtr
@given(case=sigmoid_gate_topk_renorm_cases(min_tokens=1, max_tokens=3, max_experts=24), data=st.data())
@settings(max_examples=80)
def test_sgtr_indices_check_against_the_pairwise_rules(case, data):
    """The indices check decides in O(T N) (the highest unchosen lower end against the lowest
    chosen upper end; each position against the lowest upper end before it): it fails a row
    exactly when some pair breaks a rule, on the reference's choice, shuffled, or with a lane
    swapped for an unchosen one."""
    a = case.inputs
    scores = sgtr_oracle.selection_scores64(a["logits"], a["n_shared_experts"], a["bias"])
    T, N = scores.sel.shape
    k = a["k"]
    reference = sgtr_oracle.reference(**a)[1].long()
    rows = []
    for t in range(T):
        row = reference[t].tolist()
        move = data.draw(st.sampled_from(["keep", "shuffle", "swap"]), label=f"move row {t}")
        if move == "shuffle":
            row = data.draw(st.permutations(row), label=f"order row {t}")
        elif move == "swap" and k < N:
            unchosen = [e for e in range(N) if e not in row]
            row[data.draw(st.integers(0, k - 1))] = data.draw(st.sampled_from(unchosen))
        rows.append(row)
    expected = set().union(*(sgtr_pairwise_problems(scores, t, rows[t]) for t in range(T)))
    check = sgtr_oracle.indices_check(torch.tensor(rows, dtype=torch.int32), scores, reference)
    found = {rule for rule in ("skipped", "descending") if rule in check.message}
    assert (check.status == "fail") == bool(expected) and found == expected, (rows, check.message)


@sgtr
def test_sgtr_judge_on_the_rows_it_judges_is_a_tie_risk_when_only_a_nan_row_is_wrong():
    """As for gate_topk: a token whose NaN logit is never chosen fails `indices`, the judge leaves
    it out (NaN weights in its reference), and a tie order on the finite token it judges is a
    tie risk; a wrong choice there still fails the judge."""
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0], [1.0, math.nan, 0.0, 2.0, -1.0, 0.5]])
    case = sgtr_case(logits=logits, k=2, n_shared_experts=0, bias=torch.zeros(6))
    reference = sgtr_oracle.reference(**case.inputs)[1].tolist()
    tie_order = [2, 1] if reference[0] == [2, 4] else [2, 4]
    checks, _ = sgtr_checks(case, [tie_order, [3, 0]])
    assert checks["indices"].status == "fail" and "row 1" in checks["indices"].message
    assert checks["judge"].status == "risk" and checks["judge"].kind == "tie", checks["judge"]
    checks, _ = sgtr_checks(case, [[2, 3], [3, 0]])
    assert checks["judge"].status == "fail" and "not a tie order" in checks["judge"].message


@sgtr
def test_sgtr_indices_order_is_checked_against_every_earlier_position():
    """Rounding intervals overlap without being transitive: scores a < b < c, each within float32
    rounding of the next but c definitely above a. The order [a, b, c] puts c after a: not
    descending, though no neighbouring pair is inverted; [c, b, a] and [b, c, a] are valid."""
    base = scores_case([0.25, 0.25, 0.25], k=3)
    tol = float(sgtr_oracle.selection_scores64(base.inputs["logits"], 0, base.inputs["bias"]).tol.max())
    steps = [0.25 + 1.5 * tol * i for i in range(3)]
    case = scores_case(steps, k=3)
    scores = sgtr_oracle.selection_scores64(case.inputs["logits"], 0, case.inputs["bias"])
    sel, t = scores.sel[0], scores.tol[0]
    assert float(sel[1] - sel[0]) < float(t[0] + t[1]) and float(sel[2] - sel[1]) < float(t[1] + t[2])
    assert float(sel[2] - sel[0]) > float(t[0] + t[2])
    reference = sgtr_oracle.reference(**case.inputs)[1]
    for choice, valid in (([0, 1, 2], False), ([2, 1, 0], True), ([1, 2, 0], True)):
        check = sgtr_oracle.indices_check(torch.tensor([choice], dtype=torch.int32), scores, reference)
        assert (check.status == "pass") == valid, (choice, check.message)
        if not valid:
            assert "position 0 lane 0" in check.message and "position 2 lane 2" in check.message, check.message


@sgtr
def test_sgtr_indices_a_nan_score_left_out_is_skipped():
    """torch.topk ranks a NaN score above every number: leaving it out for a number fails."""
    case = scores_case([0.0, 0.0, 0.0], logits=[0.0, math.nan, 1.0], k=1)
    checks, _ = sgtr_checks(case, [[2]])
    assert checks["indices"].status == "fail" and "skipped lane 1 (sel NaN)" in checks["indices"].message
    checks, _ = sgtr_checks(case, [[1]])
    assert checks["indices"].status == "pass", checks["indices"].message


# sel = 0.5 + bias: scores [1.5, 3.5, 3.5, 2.5, 3.5, 0.5] -- the design card's [1, 3, 3, 2, 3, 0]
TIED = [1.0, 3.0, 3.0, 2.0, 3.0, 0.0]


@sgtr
@pytest.mark.parametrize("k", [1, 2, 3])
def test_sgtr_indices_accept_any_order_among_exact_ties(k):
    case = scores_case(TIED, k=k)
    for choice in itertools.permutations([1, 2, 4], k):
        checks, verdict = sgtr_checks(case, [list(choice)])
        assert checks["indices"].status == "pass", (choice, checks["indices"].message)
        assert checks["accuracy"].status == "pass", (choice, checks["accuracy"].message)
        expected = "pass" if list(choice) == sgtr_oracle.reference(**case.inputs)[1][0].tolist() else "risk"
        assert checks["judge"].status == expected, (choice, checks["judge"])
        if expected == "risk":
            assert "row 0" in checks["judge"].message and "exact tie" in checks["judge"].message
            assert [c.name for c in verdict.failures(judge_exact=True)] == ["judge"]
            assert not verdict.failures()


@sgtr
@pytest.mark.parametrize("choice, why", [
    ([[1, 3]], "skipped"),            # 2.5 chosen while 3.5 (lanes 2, 4) is left out
    ([[3, 1]], "skipped"),
    ([[1, 0]], "skipped"),
    ([[1, 1]], "repeated"),
    ([[1, 6]], "outside"),            # a padding lane
    ([[-1, 1]], "outside"),
])
def test_sgtr_indices_reject_a_skipped_larger_score(choice, why):
    case = scores_case(TIED, k=2)
    reference = dict(zip(sgtr_oracle.OUTPUT_NAMES, sgtr_oracle.reference(**case.inputs)))
    outputs = {**reference, "indices": torch.tensor(choice, dtype=torch.int32)}
    checks, verdict = sgtr_checks(case, outputs=outputs)
    assert checks["indices"].status == "fail" and why in checks["indices"].message, checks["indices"]
    assert checks["judge"].status == "fail"


@sgtr
def test_sgtr_indices_reject_an_ascending_order():
    case = scores_case(TIED, k=4)
    checks, _ = sgtr_checks(case, [[3, 1, 2, 4]])
    assert checks["indices"].status == "fail" and "descending" in checks["indices"].message
    checks, _ = sgtr_checks(case, [[4, 1, 2, 3]])
    assert checks["indices"].status == "pass", checks["indices"].message


@sgtr
def test_sgtr_indices_accept_either_order_within_float32_rounding():
    """Two scores one float32 ulp apart: a kernel whose sigmoid is one ulp off may swap them."""
    b = 0.25
    up = float(torch.nextafter(torch.tensor(0.5 + b), torch.tensor(2.0)) - 0.5)  # sel one ulp above 0.75
    case = scores_case([b, up, -1.0], k=2)
    assert sgtr_oracle.reference(**case.inputs)[1].tolist() == [[1, 0]]
    for choice in ([[1, 0]], [[0, 1]]):
        checks, _ = sgtr_checks(case, choice)
        assert checks["indices"].status == "pass", (choice, checks["indices"].message)
    checks, _ = sgtr_checks(case, [[0, 1]])
    assert checks["judge"].status == "risk" and "within float32 rounding" in checks["judge"].message
    checks, _ = sgtr_checks(case, [[0, 2]])
    assert checks["indices"].status == "fail"


@sgtr
def test_sgtr_nan_ranks_above_every_number_as_in_torch_topk():
    nan, inf = math.nan, math.inf
    case = scores_case([0.0] * 5, logits=[1.0, nan, 3.0, nan, inf], k=3)
    ref = sgtr_oracle.reference(**case.inputs)[1][0].tolist()
    assert set(ref[:2]) == {1, 3} and ref[2] == 4  # torch.topk: the NaN lanes first, then +inf
    checks, verdict = sgtr_checks(case)
    assert checks["indices"].status == "pass", checks["indices"].message
    assert checks["judge"].status == "skip", checks["judge"]  # NaN weights: the judge never draws these
    for choice in ([[3, 1, 4]], [[1, 3, 4]]):
        checks, _ = sgtr_checks(case, choice)
        assert checks["indices"].status == "pass", (choice, checks["indices"].message)
    for choice in ([[1, 4, 3]], [[4, 1, 3]], [[1, 4, 2]]):
        checks, _ = sgtr_checks(case, choice)
        assert checks["indices"].status == "fail" and "NaN" in checks["indices"].message, (choice, checks["indices"])


@sgtr
def test_sgtr_nan_weights_follow_the_kernels_own_choice():
    """NaN logits in unchosen lanes leave the weights finite; a chosen or shared NaN makes the row NaN."""
    case = scores_case([5.0, 0.0, 0.0], logits=[1.0, math.nan, 2.0], k=1, S=1)
    reference = dict(zip(sgtr_oracle.OUTPUT_NAMES, sgtr_oracle.reference(**case.inputs)))
    assert reference["indices"].tolist() == [[1]] and reference["routed_w"].isnan().all()
    bad = {**reference, "routed_w": torch.zeros(1, 1), "shared_w": torch.ones(1, 1)}
    checks, _ = sgtr_checks(case, outputs=bad)
    assert checks["specials"].status == "fail" and "NaN placement" in checks["specials"].message


@sgtr
@pytest.mark.parametrize("dtype, eps_off", [(torch.bfloat16, 3), (torch.float16, 3), (torch.float32, 32)])
def test_sgtr_accuracy_bound_is_not_loose(dtype, eps_off):
    """A weight a few output ulps off fails accuracy: in bf16/fp16 the bound is about 1 ulp; in
    float32 the worst-case rounding bound is 12-19 eps on the judge's cases (the reference's own
    error is under 2 eps), 30 times sharper than the judge's 1e-4."""
    case = sgtr_judge_cases()[0]
    case = case.with_inputs(logits=case.inputs["logits"].float().to(dtype))
    reference = dict(zip(sgtr_oracle.OUTPUT_NAMES, sgtr_oracle.reference(**case.inputs)))
    w = reference["routed_w"].clone()
    w[0, 0] = (w[0, 0].double() * (1 + eps_off * torch.finfo(dtype).eps)).to(dtype)
    checks, _ = sgtr_checks(case, outputs={**reference, "routed_w": w})
    assert checks["accuracy"].status == "fail" and "routed_w[0, 0]" in checks["accuracy"].message, checks["accuracy"]


@sgtr
def test_sgtr_underflowing_row_is_an_ftz_risk_not_a_failure():
    """Every active logit in (-103, -87): float32 sigmoids are subnormal, so the CPU reference has
    finite weights while a GPU kernel that flushes subnormals gets 0/0 = NaN. Both are float32
    evaluations of the same row: specials and the judge report an `ftz` risk, nothing fails."""
    case = sgtr_case(logits=torch.tensor([[-88.0, -88.5, -95.0, -88.25]]), k=2, n_shared_experts=1,
                     bias=torch.zeros(3))
    reference = dict(zip(sgtr_oracle.OUTPUT_NAMES, sgtr_oracle.reference(**case.inputs)))
    assert bool(reference["routed_w"].isfinite().all())
    flushed = {**reference, "routed_w": torch.full((1, 2), math.nan), "shared_w": torch.full((1, 1), math.nan)}
    checks, verdict = sgtr_checks(case, outputs=flushed)
    assert not verdict.failures(), verdict.render()
    assert checks["judge"].status == "risk" and checks["judge"].kind == "ftz" and "FLT_MIN" in checks["judge"].message
    assert checks["specials"].status == "risk" and checks["specials"].kind == "ftz", checks["specials"]
    # A weight no normalized q in [0, 1] gives is still a failure on the same row.
    wrong = {**flushed, "routed_w": torch.tensor([[2.0, math.nan]])}
    checks, verdict = sgtr_checks(case, outputs=wrong)
    assert checks["accuracy"].status == "fail" or checks["specials"].status == "fail", verdict.render()


# =============================================================================================
# gate_topk: the reference passes its own tie-aware verdict, the float64 oracle agrees with a
# plain Python sort (NaN first, ties and +-0.0 by column), the indices check accepts every order
# among equal values and rejects a skipped larger value, a repeated or outside column and an
# ascending order, and the values must be the elements themselves.

from oracles.ops import gate_topk as gt_oracle  # noqa: E402
from strategies.gate_topk import build_case as gt_case  # noqa: E402
from strategies.gate_topk import gate_topk_cases  # noqa: E402
from strategies.gate_topk import judge_cases as gt_judge_cases  # noqa: E402

gt = pytest.mark.gate_topk


def gt_checks(case, indices=None, *, outputs=None, judge_exact=False):
    """The verdict for outputs whose values are x at `indices` (default: the reference's own
    choice), as ({check name: Check}, Verdict)."""
    reference = dict(zip(gt_oracle.OUTPUT_NAMES, gt_oracle.reference(**case.inputs)))
    if outputs is None:
        idx = reference["indices"] if indices is None else torch.tensor(indices, dtype=torch.int32)
        outputs = {"values": case.inputs["x"].gather(1, idx.long()), "indices": idx}
    checks = gt_oracle.verdict_checks(case, outputs, reference, judge_exact=judge_exact)
    return {c.name: c for c in checks}, Verdict(checks)


def row_case(values, *, k, dtype=torch.float32):
    return gt_case(x=torch.tensor([values], dtype=torch.float64).to(dtype), k=k)


@gt
@given(case=gate_topk_cases(max_rows=4, max_cols=70))
@settings(max_examples=80)
def test_gate_topk_reference_passes_its_own_verdict(case):
    """torch.topk is a correct top-k: its indices are valid and its values exact on every drawn
    case (ties, NaN of either sign, +-inf, +-0.0, floors, every dtype and layout); with its own
    indices the judge is never a tie risk, so --judge-exact passes too."""
    checks, verdict = gt_checks(case)
    assert not verdict.failures(judge_exact=True), verdict.render()
    assert checks["indices"].status == "pass" and checks["accuracy"].status == "pass"


@gt
@pytest.mark.parametrize("case", gt_judge_cases()[:4], ids=lambda c: c.label)
def test_gate_topk_reference_passes_on_judge_cases(case):
    checks, verdict = gt_checks(case)
    assert all(c.status == "pass" for c in checks.values()), verdict.render()


def python_order(row: list[float]) -> list[int]:
    """torch.topk's order by hand: NaN (any sign) first, then larger values, equal values (and
    -0.0 with +0.0) by column."""
    return sorted(range(len(row)), key=lambda j: (not math.isnan(row[j]), -row[j] if not math.isnan(row[j]) else 0, j))


# The oracles run where the case lives: on a GPU machine their sorts are CUDA's (whose radix
# path ranks a negative-sign NaN below -inf, pytorch/pytorch#190781), so they are checked there too.
ORACLE_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@gt
@pytest.mark.parametrize("device", ORACLE_DEVICES)
@given(case=gate_topk_cases(min_rows=1, max_rows=3, max_cols=40))
@settings(max_examples=60)
def test_gate_topk_oracle64_against_a_python_sort(device, case):
    x, k = case.inputs["x"], case.inputs["k"]
    o = gt_oracle.oracle64(x.to(device), k)
    for m, row in enumerate(x.double().tolist()):
        expected = python_order(row)[:k]
        assert o.indices[m].tolist() == expected, (m, row, o.indices[m].tolist(), expected)
        got = o.values[m].tolist()
        assert all((math.isnan(a) and math.isnan(row[j])) or a == row[j] for a, j in zip(got, expected))


def brute_force_top_k_problems(row: list[float], chosen: list[int]) -> set[str]:
    """The indices check's rules, pair by pair in plain Python: which of 'left out' (an unchosen
    column ranks above a chosen one) and 'descending' (a later position ranks above an earlier
    one) a row of distinct, in-range columns breaks. Rank: NaN above every number, NaNs equal,
    numbers by value."""
    def above(a, b):
        na, nb = math.isnan(row[a]), math.isnan(row[b])
        return (na and not nb) or (not na and not nb and row[a] > row[b])
    unchosen = [e for e in range(len(row)) if e not in chosen]
    problems = set()
    if any(above(e, c) for c in chosen for e in unchosen):
        problems.add("left out")
    if any(above(chosen[j], chosen[i]) for i in range(len(chosen)) for j in range(i + 1, len(chosen))):
        problems.add("descending")
    return problems


@gt
@given(case=gate_topk_cases(min_rows=1, max_rows=3, max_cols=40), data=st.data())
@settings(max_examples=80)
def test_gate_topk_indices_check_against_the_pairwise_rules(case, data):
    """The indices check decides in O(M N) (lowest chosen against highest unchosen, neighbouring
    positions): it fails a row exactly when some pair breaks a rule, on choices that are the
    reference's, shuffled, or with a column swapped for an unchosen one."""
    x, k = case.inputs["x"], case.inputs["k"]
    M, N = x.shape
    reference = gt_oracle.reference(**case.inputs)[1].long()
    rows = []
    for m in range(M):
        row = reference[m].tolist()
        move = data.draw(st.sampled_from(["keep", "shuffle", "swap"]), label=f"move row {m}")
        if move == "shuffle":
            row = data.draw(st.permutations(row), label=f"order row {m}")
        elif move == "swap" and k < N:
            unchosen = [e for e in range(N) if e not in row]
            row[data.draw(st.integers(0, k - 1))] = data.draw(st.sampled_from(unchosen))
        rows.append(row)
    expected = set().union(*(brute_force_top_k_problems(x[m].double().tolist(), rows[m]) for m in range(M)))
    check = gt_oracle.indices_check(torch.tensor(rows, dtype=torch.int32), gt_oracle.oracle64(x, k), reference)
    found = {rule for rule in ("left out", "descending") if rule in check.message}
    assert (check.status == "fail") == bool(expected) and found == expected, (rows, check.message)


@gt
def test_gate_topk_judge_on_the_rows_it_judges_is_a_tie_risk_when_only_a_nan_row_is_wrong():
    """A NaN row ranked last fails `indices`, and the judge leaves that row out (its reference has
    NaN values); on the finite rows it judges the kernel differs from torch.topk only among equal
    values: a tie risk there, not a failure of the judge (the case still fails on `indices`). A
    wrong choice on a judged row still fails the judge."""
    case = gt_case(x=torch.tensor([TIED, [1.0, math.nan, 0.0, 2.0, -1.0, 0.5]]), k=2)
    reference = gt_oracle.reference(**case.inputs)[1].tolist()
    tie_order = [2, 1] if reference[0] == [2, 4] else [2, 4]    # the other valid order of row 0
    checks, verdict = gt_checks(case, [tie_order, [3, 0]])      # row 1: the NaN left out
    assert checks["indices"].status == "fail" and "row 1" in checks["indices"].message
    assert checks["judge"].status == "risk" and checks["judge"].kind == "tie", checks["judge"]
    assert "row(s) left out ([1])" in checks["judge"].message
    checks, _ = gt_checks(case, [[2, 3], [3, 0]])                # row 0 leaves out a 3: wrong where judged
    assert checks["judge"].status == "fail" and "not a tie order" in checks["judge"].message


# [1, 3, 3, 2, 3, 0]: the design card's scores; torch.topk orders the three 3s differently on
# the CPU ([2, 4] for k = 2) and on an H200 ([2, 1])
TIED = [1.0, 3.0, 3.0, 2.0, 3.0, 0.0]


@gt
@pytest.mark.parametrize("k", [1, 2, 3])
def test_gate_topk_indices_accept_any_order_among_exact_ties(k):
    case = row_case(TIED, k=k)
    reference = gt_oracle.reference(**case.inputs)[1][0].tolist()
    for choice in itertools.permutations([1, 2, 4], k):
        checks, verdict = gt_checks(case, [list(choice)])
        assert checks["indices"].status == "pass", (choice, checks["indices"].message)
        assert checks["accuracy"].status == "pass", (choice, checks["accuracy"].message)
        expected = "pass" if list(choice) == reference else "risk"
        assert checks["judge"].status == expected, (choice, checks["judge"])
        if expected == "risk":
            assert checks["judge"].kind == "tie" and "equal values" in checks["judge"].message
            rule = "follows" if list(choice) == [1, 2, 4][:k] else "does not follow"
            assert f"{rule} the task's smaller-column-first rule" in checks["judge"].message
            assert [c.name for c in verdict.failures(judge_exact=True)] == ["judge"]
            assert not verdict.failures()


@gt
@pytest.mark.parametrize("choice, why", [
    ([[1, 3]], "left out"),           # 2 chosen while the 3s of columns 2 and 4 are left out
    ([[3, 1]], "left out"),
    ([[1, 0]], "left out"),
    ([[1, 1]], "repeated"),
    ([[1, 6]], "outside"),            # a padding column
    ([[-1, 1]], "outside"),
])
def test_gate_topk_indices_reject_a_skipped_larger_value(choice, why):
    case = row_case(TIED, k=2)
    x = case.inputs["x"]
    idx = torch.tensor(choice, dtype=torch.int32)
    values = x.gather(1, idx.long().clamp(0, x.shape[1] - 1))
    checks, _ = gt_checks(case, outputs={"values": values, "indices": idx})
    assert checks["indices"].status == "fail" and why in checks["indices"].message, checks["indices"]
    assert checks["judge"].status == "fail"


@gt
def test_gate_topk_indices_reject_an_ascending_order():
    case = row_case(TIED, k=4)
    checks, _ = gt_checks(case, [[3, 1, 2, 4]])
    assert checks["indices"].status == "fail" and "descending" in checks["indices"].message
    checks, _ = gt_checks(case, [[4, 1, 2, 3]])
    assert checks["indices"].status == "pass", checks["indices"].message


@gt
@pytest.mark.parametrize("device", ORACLE_DEVICES)
@pytest.mark.parametrize("cols", [3, 40, 200, 1024])
def test_gate_topk_oracle64_ranks_nan_of_either_sign_first(device, cols):
    """A row holding -NaN and +NaN among numbers (sizes on either side of CUDA's sort paths):
    both NaNs first in column order, then the numbers descending."""
    row = torch.linspace(-1, 1, cols, dtype=torch.float64)
    row[cols // 3], row[cols - 1] = -math.nan, math.nan
    assert torch.signbit(row[cols // 3])
    o = gt_oracle.oracle64(row[None].to(device).float(), min(cols, 8))
    expected = python_order(row.tolist())[:min(cols, 8)]
    assert o.indices[0].tolist() == expected, (o.indices[0].tolist(), expected)


@gt
def test_gate_topk_nan_of_either_sign_ranks_first_in_any_order():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[1.0, nan, 3.0, -nan, inf]])
    assert torch.signbit(x[0, 3]) and x[0, 3].isnan()
    case = gt_case(x=x, k=3)
    ref = gt_oracle.reference(**case.inputs)[1][0].tolist()
    assert set(ref[:2]) == {1, 3} and ref[2] == 4  # torch.topk: both NaNs first, then +inf
    checks, _ = gt_checks(case)
    assert checks["indices"].status == "pass" and checks["judge"].status == "skip", checks
    for choice in ([[3, 1, 4]], [[1, 3, 4]]):
        checks, _ = gt_checks(case, choice)
        assert checks["indices"].status == "pass", (choice, checks["indices"].message)
    for choice in ([[1, 4, 3]], [[4, 1, 3]], [[1, 4, 2]]):
        checks, _ = gt_checks(case, choice)
        assert checks["indices"].status == "fail" and "NaN" in checks["indices"].message, (choice, checks["indices"])


@gt
def test_gate_topk_signed_zeros_are_a_tie():
    """-0.0 == +0.0: either zero may come first, and a zero of the other sign as a value passes
    (torch.topk itself returns them in either order)."""
    case = row_case([-0.0, 0.0, -0.0, 0.0, -1.0], k=2)
    for choice in ([[0, 1]], [[1, 3]], [[2, 0]], [[3, 2]]):
        checks, verdict = gt_checks(case, choice)
        assert not verdict.failures(), (choice, verdict.render())
    flipped = {"values": torch.tensor([[0.0, 0.0]]), "indices": torch.tensor([[0, 2]], dtype=torch.int32)}
    checks, verdict = gt_checks(case, outputs=flipped)
    assert not verdict.failures(), verdict.render()


@gt
def test_gate_topk_a_row_of_neg_inf_is_chosen_once_each():
    case = row_case([5.0, -math.inf, -math.inf, -math.inf], k=3)
    checks, verdict = gt_checks(case, [[0, 2, 1]])
    assert not verdict.failures(), verdict.render()
    checks, _ = gt_checks(case, [[0, 1, 0]])  # a retired lane picked again (a -inf value sentinel)
    assert checks["indices"].status == "fail" and "repeated" in checks["indices"].message


@gt
@pytest.mark.parametrize("row", [[math.nan, -math.inf, 1.0], [math.inf, 2.0, math.nan], [-math.inf, 1.0]])
def test_gate_topk_an_infinity_turned_finite_fails_specials_even_beside_a_nan(row):
    """A kernel that returns +-FLT_MAX for +-inf values (indices right): accuracy skips what the
    reference holds as non-finite and the judge skips a row with NaN, so the specials check alone
    must fail it. It passed as a tie risk while the tie rule compared only NaN-ness."""
    case = row_case(row, k=len(row))
    reference = dict(zip(gt_oracle.OUTPUT_NAMES, gt_oracle.reference(**case.inputs)))
    values = reference["values"].clone()
    values[values.isinf()] = torch.sign(values[values.isinf()]) * torch.finfo(torch.float32).max
    checks, verdict = gt_checks(case, outputs={**reference, "values": values})
    assert checks["specials"].status == "fail" and "inf placement" in checks["specials"].message, checks["specials"]
    assert "specials" in {c.name for c in verdict.failures()}


@gt
def test_gate_topk_a_reference_placing_nan_lower_is_a_tie_risk_when_the_kernel_matches_oracle64():
    """torch.topk on CUDA has placed a row's NaNs below numbers for large k: a kernel whose
    values are oracle64's (NaN first) is then a tie-order risk, not a failure."""
    case = row_case([1.0, math.nan, math.inf, 2.0], k=4)
    reference = dict(zip(gt_oracle.OUTPUT_NAMES, gt_oracle.reference(**case.inputs)))
    assert reference["values"][0, 0].isnan()
    cuda_like = {"values": torch.tensor([[math.inf, 2.0, 1.0, math.nan]]),
                 "indices": torch.tensor([[2, 3, 0, 1]], dtype=torch.int32)}
    kernel = {k: v.clone() for k, v in reference.items()}
    checks = {c.name: c for c in gt_oracle.verdict_checks(case, kernel, cuda_like)}
    assert checks["specials"].status == "risk" and checks["specials"].kind == "tie", checks["specials"]


@gt
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gate_topk_values_must_be_the_elements_themselves(dtype):
    """The bound is 0: one ulp off, or a neighbour's value with valid indices, fails accuracy."""
    case = gt_judge_cases()[0]
    case = case.with_inputs(x=case.inputs["x"].to(dtype))
    reference = dict(zip(gt_oracle.OUTPUT_NAMES, gt_oracle.reference(**case.inputs)))
    off = reference["values"].clone()
    off[0, 3] = torch.nextafter(off[0, 3].float(), torch.tensor(2.0)).to(dtype) if dtype == torch.float32 else \
        (off[0, 3].float() * (1 + torch.finfo(dtype).eps)).to(dtype)
    assert off[0, 3] != reference["values"][0, 3]
    checks, _ = gt_checks(case, outputs={**reference, "values": off})
    assert checks["accuracy"].status == "fail" and "values[0, 3]" in checks["accuracy"].message, checks["accuracy"]
    swapped = reference["values"].clone()
    swapped[0, [2, 3]] = swapped[0, [3, 2]]
    checks, _ = gt_checks(case, outputs={**reference, "values": swapped})
    assert checks["accuracy"].status == "fail" and checks["indices"].status == "pass"


@gt
def test_gate_topk_contract_wants_int32_indices_and_the_input_dtype():
    case = gt_judge_cases()[0]
    reference = dict(zip(gt_oracle.OUTPUT_NAMES, gt_oracle.reference(**case.inputs)))
    checks, _ = gt_checks(case, outputs={**reference, "indices": reference["indices"].long()})
    assert checks["contract"].status == "fail" and "int32" in checks["contract"].message
    bf16 = case.with_inputs(x=case.inputs["x"].to(torch.bfloat16))
    reference = dict(zip(gt_oracle.OUTPUT_NAMES, gt_oracle.reference(**bf16.inputs)))
    checks, _ = gt_checks(bf16, outputs={**reference, "values": reference["values"].float()})
    assert checks["contract"].status == "fail" and "bfloat16" in checks["contract"].message


@gt
def test_gate_topk_judge_domain():
    for case in gt_judge_cases():
        assert not gt_oracle.judge_domain_violations(case), (case.label, gt_oracle.judge_domain_violations(case))
    case = gt_judge_cases()[1]
    assert gt_oracle.judge_domain_violations(case.with_inputs(x=case.inputs["x"].half())) == ["x.dtype=float16"]
    assert gt_oracle.judge_domain_violations(case.with_inputs(x=case.inputs["x"][:, ::2])) == ["x.layout=strided"]
    assert gt_oracle.judge_domain_violations(case.with_inputs(k=33)) == ["k=33"]
    assert gt_oracle.judge_domain_violations(case.with_inputs(x=case.inputs["x"][:0])) == ["M=0"]
    assert gt_oracle.judge_domain_violations(case.with_inputs(x=torch.zeros(2, 2000))) == ["N=2000"]


@pytest.mark.gate_topk
def test_the_verdict_on_sampled_rows_judges_those_rows_of_the_whole_run(run_options):
    """oracles/harness/sampled_rows.py (the beyond-2^31 case on a GPU, disagreements in the
    bench) on a small input: the bundled kernel passes on the sampled rows; a kernel wrong in
    its last row fails there and passes where the rows skip it; a device fault in the call is a
    failure, a clean refusal of the (beyond-2^31, so outside the judge domain) input is not."""
    from kernels.gate_topk import gate_topk
    from oracles.harness.sampled_rows import sampled_row_case
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(3)).to(run_options.device)
    inputs = {"x": x, "k": 3}

    def wrong_last_row(x, k):
        values, indices = gate_topk(x, k)
        indices[-1] = indices[-1].flip(0)
        return values, indices

    def faults(x, k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def refuses(x, k):
        raise ValueError("x is too large for this kernel")

    _, good = sampled_row_case("gate_topk", gate_topk, inputs, [0, 5])
    assert not good.failures(), good.render()
    case, bad = sampled_row_case("gate_topk", wrong_last_row, inputs, [0, 5])
    assert {c.name for c in bad.failures()} >= {"indices"} and case.inputs["x"].shape == (2, 16)
    _, skipped = sampled_row_case("gate_topk", wrong_last_row, inputs, [0, 1])
    assert not skipped.failures(), skipped.render()
    _, fault = sampled_row_case("gate_topk", faults, inputs, [0, 5])
    assert [c.name for c in fault.failures()] == ["device-fault"] and fault.device_lost
    _, refusal = sampled_row_case("gate_topk", refuses, inputs, [0, 5])  # judged as beyond 2^31: outside the domain
    assert not refusal.failures() and [c.name for c in refusal.unsupported()] == ["contract"]
    from oracles.ops.gate_topk import judge_domain_violations
    assert judge_domain_violations(case)[0].startswith("elements=beyond 2^31")  # every op tags such rows

    class LostContext(torch.Tensor):
        """After a real fault every later read of the device raises: so does this input's."""
        lost = False

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if cls.lost:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return super().__torch_function__(func, types, args, kwargs or {})

    def faults_for_good(x, k):
        LostContext.lost = True
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    try:
        lost_case, lost = sampled_row_case("gate_topk", faults_for_good, {"x": x.as_subclass(LostContext), "k": 3},
                                           [0, 5])
    finally:
        LostContext.lost = False
    assert [c.name for c in lost.failures()] == ["device-fault"] and lost_case.inputs["x"].shape == (2, 16)


@pytest.mark.gate_topk
def test_an_out_of_memory_on_sampled_rows_is_the_kernels_only_when_it_would_not_fit_alone(fuzz, run_options):
    """A CUDA out-of-memory on the beyond-2^31 case: where what the process held and asked for
    fits the GPU's total, other processes (a parallel run's workers) held the missing memory and
    the case is not judged (skip, torch's numbers in the message; the gate's test is skipped with
    it); where it does not fit, the kernel's footprint is past any such GPU and it fails like any
    fault."""
    from oracles.harness.failures import KernelCheckFailed
    from oracles.submission.loader import bundled_implementations
    from oracles.harness.sampled_rows import sampled_row_case
    inputs = {"x": torch.randn(6, 16, generator=torch.Generator().manual_seed(3)).to(run_options.device), "k": 3}

    def out_of_memory(tried, held):
        def kernel(x, k):
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of 79.19 GiB of "
                f"which 1.06 GiB is free. Including non-PyTorch memory, this process has {held} memory in "
                f"use. Of the allocated memory 9.50 GiB is allocated by PyTorch, and 12.00 MiB is reserved "
                f"by PyTorch but unallocated.")
        return kernel

    _, shared = sampled_row_case("gate_topk", out_of_memory("8.00 GiB", "10.12 GiB"), inputs, [0, 5])
    (check,) = shared.checks
    assert not shared.failures() and check.status == "skip" and "other processes" in check.message, shared.render()

    def torch_2_1_out_of_memory(x, k):  # its spelling, "capacty"
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.37 GiB. GPU 0 has a total capacty of "
                                     "79.11 GiB of which 2.93 GiB is free. Including non-PyTorch memory, this "
                                     "process has 16.17 GiB memory in use.")
    _, older = sampled_row_case("gate_topk", torch_2_1_out_of_memory, inputs, [0, 5])
    assert [c.status for c in older.checks] == ["skip"], older.render()
    for tried, held in (("70.00 GiB", "10.12 GiB"), ("512.00 MiB", "79.00 GiB")):
        _, alone = sampled_row_case("gate_topk", out_of_memory(tried, held), inputs, [0, 5])
        assert [c.name for c in alone.failures()] == ["contract"], alone.render()
    _, unparsed = sampled_row_case("gate_topk", out_of_memory("8.00 GiB", "an unknown amount of"), inputs, [0, 5])
    assert [c.name for c in unparsed.failures()] == ["contract"], unparsed.render()

    impl = bundled_implementations("gate_topk")[0]
    with pytest.raises(pytest.skip.Exception, match="beyond-2\\^31-element case: not judged: .* other processes held"):
        fuzz.check_sampled_rows(inputs, [0, 5], dataclasses.replace(impl, fn=out_of_memory("8.00 GiB", "10.12 GiB")))
    with pytest.raises(KernelCheckFailed):
        fuzz.check_sampled_rows(inputs, [0, 5], dataclasses.replace(impl, fn=out_of_memory("70.00 GiB", "10.12 GiB")))


@pytest.mark.gate_topk
def test_an_error_of_the_sampled_rows_verdict_is_the_suites_not_the_kernels(fuzz, run_options, monkeypatch):
    """The beyond-2^31 test judges its rows through Fuzz.check_sampled_rows: a bug of that
    verdict (an IndexError in verdict_on_rows once printed FAIL for a public kernel on the H200)
    is a SuiteError -- the gate's own line and exit code 3 -- while a wrong row stays the kernel's."""
    import oracles.harness.sampled_rows as sampled_rows
    from kernels.gate_topk import gate_topk
    from oracles.gate.fuzz import SuiteError
    from oracles.harness.failures import KernelCheckFailed
    from oracles.submission.loader import bundled_implementations
    impl = bundled_implementations("gate_topk")[0]
    inputs = {"x": torch.randn(6, 16, generator=torch.Generator().manual_seed(3)).to(run_options.device), "k": 3}

    def wrong_last_row(x, k):
        values, indices = gate_topk(x, k)
        indices[-1] = indices[-1].flip(0)
        return values, indices
    with pytest.raises(KernelCheckFailed):
        fuzz.check_sampled_rows(inputs, [0, 5], dataclasses.replace(impl, fn=wrong_last_row))

    def broken(*args, **kwargs):
        raise IndexError("index out of range in self (a planted bug of the suite)")
    monkeypatch.setattr(sampled_rows, "verdict_on_rows", broken)
    with pytest.raises(SuiteError, match="the suite's error, not the kernel's"):
        fuzz.check_sampled_rows(inputs, [0, 5], impl)


def test_hc_head_oracle_runs_on_the_device_of_x():
    """On a GPU the float64 oracle of a judge-sized case (235M values) runs there, not on one CPU
    core. Meta tensors hold no data, so any copy to the CPU on the way raises; hc_fn, hc_scale and
    hc_base may come from the host (a drawn case's host tensors) and are moved to x's device."""
    x = torch.empty(3, 4, 128, dtype=torch.bfloat16, device="meta")
    o = hc_oracle.oracle64(x, torch.zeros(4, 512), torch.ones(1), torch.zeros(4), 1e-6, 1e-3)
    assert all(t.device.type == "meta" for t in (o.y, o.sumsq, o.r, o.dot, o.dot_abs, o.z, o.sigma, o.pre))
    assert o.y.shape == (3, 128) and o.y.dtype == torch.float64
