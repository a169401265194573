"""The strategies are tested themselves: every feature they promise is reachable (Hypothesis's
`find` runs the strategy until the condition holds), what a case shrinks to is
small, bad arguments raise InvalidArgument naming the argument, and the judge's cases and the
minimizer's moves are what they claim."""

import math

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, seed, settings
from hypothesis.errors import InvalidArgument

from oracles.ops import hc_head as hc_oracle
from oracles.ops import sigmoid_gate_topk_renorm as sgtr_oracle
from oracles.ops.sigmoid_gate_topk_renorm import reference as sgtr_reference
from strategies.hc_head import JUDGE_SHAPES, hc_head_cases
from strategies.values import JUDGE_FORM
from strategies.hc_head import judge_cases as hc_judge_cases
from strategies.sigmoid_gate_topk_renorm import (JUDGE_CASES, judge_cases, sigmoid_gate_topk_renorm_cases,
                                                 smaller_cases)

FIND = settings(max_examples=3000, database=None, deadline=None, suppress_health_check=list(HealthCheck))


# Reachability needs a case, not the smallest one: without the shrink phase (which spent most of
# these tests' time) a feature test stops at the first case that has it.
FIND_FIRST = settings(FIND, phases=[Phase.generate])


def reach(strategy, condition):
    """The smallest drawn value satisfying `condition` (fails the test when none is found)."""
    return find(strategy, condition, settings=FIND)


def reachable(strategy, condition):
    """The first drawn value satisfying `condition` (fails the test when none is found)."""
    return find(strategy, condition, settings=FIND_FIRST)


# ---------------------------------------------------------------------------------------------
# sigmoid_gate_topk_renorm

sgtr = pytest.mark.sigmoid_gate_topk_renorm
SGTR = sigmoid_gate_topk_renorm_cases(max_tokens=4, max_experts=260)


def shape(case):
    T, E = case.inputs["logits"].shape
    return T, E - case.inputs["n_shared_experts"], case.inputs["n_shared_experts"], case.inputs["k"]


def boundary_tied(case) -> bool:
    """Recomputed from the values, not the feature label: the k-th largest score is also held by an
    unchosen lane."""
    T, N, S, k = shape(case)
    if T == 0 or k == N:
        return False
    sel = torch.sigmoid(case.inputs["logits"][:, :N].float()) + case.inputs["bias"]
    top = torch.topk(sel, k, dim=-1)
    kth = top.values[:, k - 1:k]
    unchosen = torch.ones_like(sel, dtype=torch.bool).scatter_(1, top.indices, False)
    return bool(((sel == kth) & unchosen).any())


@sgtr
def test_sgtr_boundary_tie_is_reachable():
    case = reach(SGTR, boundary_tied)
    assert "boundary_tie" in case.features
    assert shape(case)[0] == 1, case  # shrinks to one token


@sgtr
@pytest.mark.parametrize("condition", [
    pytest.param(lambda c: bool(c.inputs["logits"].isnan().any()), id="nan"),
    pytest.param(lambda c: bool(c.inputs["logits"].isinf().any()), id="inf"),
    pytest.param(lambda c: shape(c)[3] == shape(c)[1] > 1, id="k=N"),
    pytest.param(lambda c: shape(c)[2] == 0 and shape(c)[0] > 0, id="S=0"),
    pytest.param(lambda c: shape(c)[2] > shape(c)[3], id="S>k"),
    pytest.param(lambda c: shape(c)[1] % 32 != 0 and shape(c)[1] > 32, id="N%32!=0"),
    pytest.param(lambda c: shape(c)[1] in (127, 129, 255, 257), id="N=block+-1"),
    pytest.param(lambda c: bool((c.inputs["bias"] < -1).all()) and shape(c)[1] > 1, id="negative-bias"),
    pytest.param(lambda c: not c.inputs["logits"].is_contiguous(), id="strided"),
])
def test_sgtr_feature_is_reachable(condition):
    reachable(SGTR, condition)


@sgtr
@pytest.mark.parametrize("feature", ["ties", "boundary_tie", "near_tie", "bias_tie", "all_equal", "nan", "inf",
                                     "huge", "k=1", "k=N", "S=0", "S>k", "tail", "layout=padded",
                                     "global_scale=[1]", "global_scale=0-dim", "global_scale=0-dim on host",
                                     "bias=large_negative"])
def test_sgtr_feature_label_is_reachable(feature):
    reachable(SGTR, lambda c: feature in c.features)


@sgtr
def test_sgtr_nan_case_shrinks_small():
    """What a case that needs a NaN logit shrinks to: one token, one routed expert, no shared
    (one shared in the judge's form, the shrink target of its first choice)."""
    case = reach(SGTR, lambda c: bool(c.inputs["logits"].isnan().any()))
    assert shape(case) == ((1, 1, 1, 1) if JUDGE_FORM in case.features else (1, 1, 0, 1)), case
    assert case.inputs["logits"].is_contiguous()


@sgtr
@pytest.mark.parametrize("kwargs, argument", [
    (dict(min_tokens=3, max_tokens=2), "min_tokens"),
    (dict(max_experts=0), "max_experts"),
    (dict(max_shared=-1), "max_shared"),
    (dict(max_k=0), "max_k"),
    (dict(dtypes=(torch.int32,)), "dtypes"),
    (dict(dtypes=()), "dtypes"),
])
def test_sgtr_cases_validate_their_arguments(kwargs, argument):
    with pytest.raises(InvalidArgument, match=argument):
        sigmoid_gate_topk_renorm_cases(**kwargs)


@sgtr
def test_sgtr_drawn_cases_are_valid_for_the_official_reference():
    """Every drawn case is one the official reference accepts (it calls global_scale.float() and
    bias.float(): a Python-float global_scale raised there), and every form of global_scale is a
    float32 tensor."""
    @given(case=sigmoid_gate_topk_renorm_cases(max_tokens=3, max_experts=40))
    @settings(max_examples=60, deadline=None, database=None)
    def check(case):
        gs = case.inputs["global_scale"]
        assert isinstance(gs, torch.Tensor) and gs.dtype == torch.float32 and gs.numel() == 1
        sgtr_reference(**case.inputs)
    check()


@sgtr
def test_sgtr_judge_cases_are_the_judges():
    cases = judge_cases()
    assert len(cases) == 9
    for case, (T, N, S, k, route_scale, gs) in zip(cases, JUDGE_CASES):
        assert shape(case) == (T, N, S, k)
        assert case.inputs["logits"].dtype == torch.bfloat16
        # torch.tensor(gs, device=device, dtype=torch.float32): 0-dim, on the chip (no host input)
        assert case.inputs["global_scale"].dim() == 0 and float(case.inputs["global_scale"]) == pytest.approx(gs)
        assert case.inputs["global_scale"].dtype == torch.float32 and not case.host_inputs
        assert not sgtr_oracle.judge_domain_violations(case), sgtr_oracle.judge_domain_violations(case)
        assert isinstance(case.inputs["route_scale"], float) and case.inputs["route_scale"] == route_scale
        assert case.inputs["bias"].shape == (N,) and case.inputs["bias"].dtype == torch.float32
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 131, generator=gen)
    assert torch.equal(cases[1].inputs["logits"], x.to(torch.bfloat16))
    assert torch.equal(cases[1].inputs["bias"], 0.1 * torch.randn(128, generator=gen))


@sgtr
def test_sgtr_smaller_cases_stay_valid():
    """Every move keeps 1 <= k <= N, the bias [N] and the reference callable; a strided case first
    becomes contiguous."""
    case = find(SGTR, lambda c: shape(c)[0] >= 2 and shape(c)[2] >= 1 and shape(c)[1] >= 8
                and not c.inputs["logits"].is_contiguous(), settings=FIND)
    moves = list(smaller_cases(case))
    assert moves and moves[0].inputs["logits"].is_contiguous()
    for move in moves:
        T, N, S, k = shape(move)
        assert 1 <= k <= N and move.inputs["bias"].shape == (N,)
        sgtr_oracle.reference(**move.inputs)
    assert any(shape(m)[0] < shape(case)[0] for m in moves)
    assert any(shape(m)[1] < shape(case)[1] for m in moves)
    assert any(shape(m)[2] < shape(case)[2] for m in moves)


# ---------------------------------------------------------------------------------------------
# hc_head

hc = pytest.mark.hc_head
HC = hc_head_cases(max_tokens=4, max_hidden=300)


@hc
@pytest.mark.parametrize("condition", [
    pytest.param(lambda c: bool(c.inputs["x"].isnan().any()), id="nan"),
    pytest.param(lambda c: c.inputs["x"].shape[2] % 32 != 0 and c.inputs["x"].shape[2] > 32, id="hidden%32!=0"),
    pytest.param(lambda c: c.inputs["x"].shape[1] == 1, id="hc_mult=1"),
    pytest.param(lambda c: c.inputs["norm_eps"] == 0.0, id="norm_eps=0"),
    pytest.param(lambda c: "zero_token" in c.features, id="zero_token"),
    pytest.param(lambda c: not c.inputs["x"].is_contiguous(), id="strided"),
])
def test_hc_head_feature_is_reachable(condition):
    reachable(HC, condition)


@hc
def test_hc_head_nan_case_shrinks_small():
    """One token of one element, or in the judge's form (the shrink target of its first
    choice) its smallest shape."""
    case = reach(HC, lambda c: bool(c.inputs["x"].isnan().any()))
    assert tuple(case.inputs["x"].shape) == ((1, 2, 128) if JUDGE_FORM in case.features else (1, 1, 1)), case
    assert math.isnan(float(case.inputs["x"].reshape(-1)[0]))


@hc
def test_hc_head_judge_cases_are_the_judges():
    """As the official test builds them: one generator seeded 0 per case on the device, drawing x
    (float32 randn cast to bf16), then hc_fn = randn * 0.02, then hc_base = 0.1 randn; every case
    inside the judge domain."""
    cases = hc_judge_cases("cpu")
    assert [tuple(c.inputs["x"].shape) for c in cases] == list(JUDGE_SHAPES)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 4, 256, generator=gen, dtype=torch.float32).to(torch.bfloat16)
    hc_fn = torch.randn(4, 1024, generator=gen, dtype=torch.float32) * 0.02
    hc_base = 0.1 * torch.randn(4, generator=gen, dtype=torch.float32)
    case = cases[1]
    assert torch.equal(case.inputs["x"], x) and torch.equal(case.inputs["hc_fn"], hc_fn)
    assert torch.equal(case.inputs["hc_base"], hc_base)
    assert torch.equal(case.inputs["hc_scale"], torch.tensor([1.5])) and not case.host_inputs
    assert (case.inputs["norm_eps"], case.inputs["hc_eps"]) == (1e-6, 1e-3)
    for c in cases:
        assert not hc_oracle.judge_domain_violations(c), (c.label, hc_oracle.judge_domain_violations(c))


@hc
def test_hc_head_judge_cases_are_built_when_first_read():
    """Collecting the judge's cases builds none of their tensors: the bench-size ones (117 million
    elements, 2.5 s on a CPU) were built by every process that collected them, to be skipped under
    the interpreter. Whether a case runs there is known from its declared sizes; a case is built
    when an input is read, and its tensors are the sizes it declared."""
    from oracles.ops import OPS
    from strategies.case import LazyInputs
    from strategies.hc_head import _judge_cases
    cases = _judge_cases.__wrapped__("cpu")  # fresh, not the process's cached ones
    assert all(isinstance(c.inputs, LazyInputs) for c in cases)
    runs = [OPS["hc_head"].runs_on_cpu(c) for c in cases]
    assert runs == [T * h * H <= 150_000 for T, h, H in JUDGE_SHAPES] and any(runs) and not all(runs)
    assert all(c.inputs._inputs is None for c in cases), "collected cases were built"
    for c, (T, h, H) in zip(cases, JUDGE_SHAPES):
        assert (c.inputs.numel("x"), c.inputs.numel("hc_fn"), c.inputs.numel("hc_base")) == (T * h * H, h * h * H, h)
    small = cases[1]
    assert tuple(small.inputs["x"].shape) == JUDGE_SHAPES[1] and small.inputs._inputs is not None
    assert all(small.inputs.numel(n) == small.inputs[n].numel() for n in ("x", "hc_fn", "hc_scale", "hc_base"))
    assert list(small.inputs) == ["x", "hc_fn", "hc_scale", "hc_base", "norm_eps", "hc_eps"]  # call order
    assert small.content_hash() == hc_judge_cases("cpu")[1].content_hash()


@pytest.mark.parametrize("strategy, kwargs, named", [
    (hc_head_cases, dict(max_hidden=100, structure_pool=((1, 2, 128, torch.bfloat16),)), "structure_pool"),
    (sigmoid_gate_topk_renorm_cases, dict(max_experts=10, structure_pool=((1, 0, 1, 1, torch.bfloat16),)),
     "structure_pool"),
])
def test_a_pool_outside_the_size_range_is_refused(strategy, kwargs, named):
    with pytest.raises(InvalidArgument, match=named):
        strategy(**kwargs)


# ---------------------------------------------------------------------------------------------
# gate_topk


from oracles.ops import gate_topk as gt_oracle  # noqa: E402
from strategies.gate_topk import JUDGE_CASES as GT_JUDGE_CASES  # noqa: E402
from strategies.gate_topk import gate_topk_cases  # noqa: E402
from strategies.values import next_in_dtype, special_tensor  # noqa: E402
from strategies.gate_topk import judge_cases as gt_judge_cases  # noqa: E402
from strategies.gate_topk import smaller_cases as gt_smaller_cases  # noqa: E402

gt = pytest.mark.gate_topk
GT = gate_topk_cases(max_rows=4, max_cols=300)


def gt_reach(condition):
    return reachable(GT, condition)


def gt_shape(case):
    M, N = case.inputs["x"].shape
    return M, N, case.inputs["k"]


def topk_reaches(case, predicate) -> bool:
    """Some row's top k (torch.topk's values) holds a value satisfying `predicate` (float64 [M, k])."""
    x, k = case.inputs["x"], case.inputs["k"]
    if x.shape[0] == 0:
        return False
    return bool(predicate(torch.topk(x.double(), k, dim=-1).values).any())


@gt
@pytest.mark.parametrize("condition", [
    pytest.param(lambda c: topk_reaches(c, lambda v: v == -math.inf), id="neg-inf-in-top-k"),
    pytest.param(lambda c: bool((c.inputs["x"].isnan() & torch.signbit(c.inputs["x"])).any()), id="sign-set-NaN"),
    pytest.param(lambda c: bool((c.inputs["x"].isnan().sum(-1) >= 2).any()), id="NaN-tie"),
    pytest.param(lambda c: gt_shape(c)[2] == gt_shape(c)[1] > 1, id="k=N"),
    pytest.param(lambda c: gt_shape(c)[1] in (127, 129, 255, 257), id="N=block+-1"),
    pytest.param(lambda c: gt_shape(c)[1] > 128 and gt_shape(c)[2] >= 2 and gt_shape(c)[0] >= 1, id="two-chunks"),
    pytest.param(lambda c: gt_shape(c)[0] == 0, id="M=0"),
    pytest.param(lambda c: not c.inputs["x"].is_contiguous(), id="strided"),
    pytest.param(lambda c: c.inputs["x"].storage_offset() > 0, id="offset"),
])
def test_gate_topk_feature_is_reachable(condition):
    gt_reach(condition)


@gt
@pytest.mark.parametrize("feature", ["ties", "boundary_tie", "near_tie", "all_equal", "nan", "neg_nan", "nan_tie",
                                     "inf", "neg_inf", "signed_zero_tie", "subnormal", "k=1", "k=N", "tail",
                                     "layout=padded", "layout=stepped", "layout=permuted", "layout=offset",
                                     "dtype=float32", "dtype=float16", "values=neg_inf", "values=zeros"])
def test_gate_topk_feature_label_is_reachable(feature):
    gt_reach(lambda c: feature in c.features)


@gt
def test_gate_topk_boundary_tie_is_a_real_one():
    """Recomputed from the values, not the label: the k-th largest value is also held by a column
    outside the top k; shrinks to one row."""
    def boundary_tied(c):
        M, N, k = gt_shape(c)
        if M == 0 or k == N:
            return False
        s = torch.sort(c.inputs["x"].double(), dim=-1, descending=True, stable=True).values
        return bool(((s[:, k - 1] == s[:, k]) & s[:, k].isfinite()).any())
    case = reach(GT, boundary_tied)
    assert "boundary_tie" in case.features and gt_shape(case)[0] == 1, case


@gt
def test_gate_topk_nan_case_shrinks_small():
    case = reach(GT, lambda c: bool(c.inputs["x"].isnan().any()))
    assert gt_shape(case) == (1, 1, 1) and case.inputs["x"].is_contiguous(), case


@gt
@pytest.mark.parametrize("kwargs, argument", [
    (dict(min_rows=3, max_rows=2), "min_rows"),
    (dict(max_cols=0), "max_cols"),
    (dict(max_k=0), "max_k"),
    (dict(dtypes=(torch.int32,)), "dtypes"),
    (dict(dtypes=()), "dtypes"),
])
def test_gate_topk_cases_validate_their_arguments(kwargs, argument):
    with pytest.raises(InvalidArgument, match=argument):
        gate_topk_cases(**kwargs)


@gt
@pytest.mark.parametrize("dtype, ints", [(torch.float32, torch.int32), (torch.bfloat16, torch.int16),
                                         (torch.float16, torch.int16)])
def test_gate_topk_special_values_are_the_bits_they_claim(dtype, ints):
    nan, neg, payload = (special_tensor(n, dtype) for n in ("nan", "-nan", "nan_payload"))
    assert nan.isnan() and neg.isnan() and payload.isnan()
    assert not torch.signbit(nan) and torch.signbit(neg)
    assert int(payload.view(ints)) == int(nan.view(ints)) + 1  # the lowest payload bit
    assert float(special_tensor("-0.0", dtype)) == 0.0 and torch.signbit(special_tensor("-0.0", dtype))
    sub = special_tensor("subnormal", dtype)
    assert 0 < float(sub) < float(torch.finfo(dtype).smallest_normal)
    one = torch.tensor(1.0, dtype=dtype)
    eps = float(torch.finfo(dtype).eps)
    assert float(next_in_dtype(one, up=True)) == 1 + eps and float(next_in_dtype(one, up=False)) == 1 - eps / 2
    assert float(next_in_dtype(-one, up=True)) == -(1 - eps / 2)
    assert float(next_in_dtype(torch.tensor(0.0, dtype=dtype), up=False)) < 0


@gt
def test_gate_topk_drawn_cases_are_valid_for_the_official_reference():
    @given(case=gate_topk_cases(max_rows=3, max_cols=60))
    @settings(max_examples=60, deadline=None, database=None)
    def check(case):
        M, N, k = gt_shape(case)
        assert 1 <= k <= N
        gt_oracle.reference(**case.inputs)
    check()


@gt
def test_gate_topk_judge_cases_are_the_judges():
    """As tests/test_gate_topk.py of flagos-ai/FlagGems-sglang builds them: a CPU generator seeded
    per case, randperm(m n) reshaped, as float32, / (m n): distinct values in [0, 1); every case
    inside the judge domain."""
    cases = gt_judge_cases()
    assert len(cases) == 14 and [gt_shape(c) for c in cases] == [(m, n, k) for m, n, k, _ in GT_JUDGE_CASES]
    assert GT_JUDGE_CASES[:4] == ((1, 256, 8, 0), (37, 128, 4, 1), (512, 64, 1, 2), (128, 384, 32, 3))
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randperm(37 * 128, generator=g).reshape(37, 128).float() / (37 * 128)
    assert torch.equal(cases[1].inputs["x"], x)
    for case in cases:
        x = case.inputs["x"]
        M, N = x.shape
        assert x.dtype == torch.float32 and x.is_contiguous() and isinstance(case.inputs["k"], int)
        assert torch.equal(torch.sort((x * (M * N)).round().flatten()).values, torch.arange(M * N, dtype=torch.float32))
        assert not gt_oracle.judge_domain_violations(case)


@gt
def test_gate_topk_smaller_cases_stay_valid():
    case = gt_reach(lambda c: gt_shape(c)[0] >= 2 and gt_shape(c)[1] >= 8 and not c.inputs["x"].is_contiguous())
    moves = list(gt_smaller_cases(case))
    assert moves and moves[0].inputs["x"].is_contiguous()
    for move in moves:
        M, N, k = gt_shape(move)
        assert 1 <= k <= N
        gt_oracle.reference(**move.inputs)
    assert any(gt_shape(m)[0] < gt_shape(case)[0] for m in moves)
    assert any(gt_shape(m)[1] < gt_shape(case)[1] for m in moves)


def test_gate_topk_a_structure_outside_the_limits_is_refused():
    with pytest.raises(InvalidArgument, match="structure"):
        gate_topk_cases(max_rows=3, structure_pool=((2, 8, 9, torch.bfloat16),))  # k > N


def test_gate_topk_gpu_pool_holds_k_equal_n_in_the_judges_form_and_outside_it():
    """A kernel that hands k = N to torch.sort is caught only by a case with k = N. With it in the
    free form's pool entries only, the ci profile's 20 GPU cases held none (H100, 2026-12-06)."""
    from strategies.gate_topk import GPU_STRUCTURES, SIZES, _judge_structures
    full = [(M, N, k) for M, N, k, _ in GPU_STRUCTURES if k == N and M >= 1]
    judged = [(M, N, k) for M, N, k, _ in _judge_structures(GPU_STRUCTURES, SIZES["cuda"]["max_k"]) if k == N]
    assert full and judged, (full, judged)


@pytest.mark.parametrize("op", ["hc_head", "sigmoid_gate_topk_renorm", "gate_topk", "moe_fused_gate"])
def test_every_ops_gpu_sizes_make_a_strategy_that_draws(op):
    """SIZES["cuda"] is only used on a GPU: a pool entry outside its own limits (gate_topk's 512
    rows against max_rows=300) failed every GPU test of the op on the H200 and no CPU test.
    Building the GPU strategy and drawing from it here catches that on the CPU."""
    from oracles.ops import get_op
    spec = get_op(op)
    strategy = spec.cases(**spec.sizes["cuda"])

    @settings(max_examples=3, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def draw(case):
        assert case.op == op
    draw()


# ---------------------------------------------------------------------------------------------
# The judge's own form: half the drawn cases, each inside its op's judge domain

from oracles.ops import OPS, get_op  # noqa: E402


@pytest.mark.parametrize("sizes", ["cpu", "cuda"])
@pytest.mark.parametrize("op", list(OPS))
def test_judge_form_cases_lie_inside_the_judge_domain_and_are_drawn(op, sizes):
    """Outside the judge domain a kernel's clean refusal is `unsupported`: without judge-form draws
    the ci profile's 20 GPU-sized cases held none inside it for hc_head and sgtr, and a kernel that
    failed to compile on every call escaped the property (H200, 2026-12-02)."""
    spec = get_op(op)
    # bulk rows are values, not form: 64 of them instead of up to 16,384 keep this test fast
    kwargs = {k: ((64,) if k in ("bulk_rows", "bulk_tokens") else v) for k, v in spec.sizes[sizes].items()}
    drawn = []

    @settings(max_examples=40, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(spec.cases(**kwargs))
    def draw_cases(case):
        drawn.append((JUDGE_FORM in case.features, spec.judge_domain_violations(case), case.summary()))

    draw_cases()
    outside = [(why, summary) for judge_form, why, summary in drawn if judge_form and why]
    assert not outside, f"{op}: judge-form cases outside the judge domain: {outside[:3]}"
    # a third of the draws by judge_forms; Hypothesis's derandomized sequence mutates few fresh
    # draws and keeps their first choice, so a fixed sample of 40 held 1 to 17 (2026-12-02): both
    # kinds must be there, and a collapse to either fails
    judged = sum(judge_form for judge_form, _, _ in drawn)
    assert 0 < judged < len(drawn), f"{op}: {judged} of {len(drawn)} drawn cases in the judge's form"


# ---------------------------------------------------------------------------------------------
# On a GPU, cases mostly reuse what this test has compiled (strategies.values.mostly_from)

def compiled_structure(case) -> tuple:
    """What a kernel is compiled for, roughly: the first row input's shape, dtype, strides and
    storage offset, and every integer argument (Triton specializes them on == 1 and % 16)."""
    t = case.inputs[get_op(case.op).row_inputs[0]]
    ints = tuple((k, v) for k, v in case.inputs.items() if isinstance(v, int) and not isinstance(v, bool))
    return (tuple(t.shape), t.dtype, t.stride(), t.storage_offset(), ints)


def few_rows(op: str, pool: tuple) -> tuple:
    """The op's GPU pool with at most 3 drawn rows an entry: the CPU draws them."""
    return tuple((min(entry[0], 3), *entry[1:]) for entry in pool)


@pytest.mark.parametrize("op", ["hc_head", "sigmoid_gate_topk_renorm", "gate_topk", "moe_fused_gate"])
def test_gpu_cases_mostly_reuse_a_compiled_structure_and_still_explore(op):
    """Of 160 GPU-sized cases (few rows, no bulk: the CPU draws them) nearly all have a structure
    of the pool: fewer distinct structures than the pool in both forms plus one in 8 cases
    (explore_one_in is 16), and fewer than one case in 8 has a row width no pool entry has. Some
    do (a kernel wrong only at hidden = 1000 stays findable), and the values of one structure vary."""
    from strategies.values import GPU_EXPLORE_ONE_IN
    spec = get_op(op)
    sizes = dict(spec.sizes["cuda"])
    pool = few_rows(op, sizes["structure_pool"])
    sizes.update(structure_pool=pool, **{"max_tokens" if "max_tokens" in sizes else "max_rows": 3})
    sizes.update({name: () for name in ("bulk_rows", "bulk_tokens") if name in sizes})
    seen, n = [], 160
    for run in range(2):  # two fixed seeds: shares, not a coin flip (one run of 160 once drew no fresh one)
        @seed(run)
        @settings(max_examples=n // 2, database=None, deadline=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate])
        @given(case=spec.cases(**sizes))
        def collect(case):
            seen.append((compiled_structure(case), case.content_hash()))
        collect()
    structures = [s for s, _ in seen]
    counts = {s: structures.count(s) for s in structures}
    assert GPU_EXPLORE_ONE_IN >= 8
    assert len(counts) <= 2 * len(pool) + len(seen) // 8, (len(counts), len(pool), len(seen))
    pooled_widths = {POOL_ROW_WIDTH[op](entry) for entry in pool}
    explored = [s for s in structures if s[0][1:] not in pooled_widths]
    assert 1 <= len(explored) <= len(seen) // 8, (len(explored), len(seen))
    busiest = max(counts, key=counts.get)
    assert len({h for s, h in seen if s == busiest}) > counts[busiest] // 2, "one structure's values do not vary"


# A pool entry's row shape (the first row input's shape past its rows).
POOL_ROW_WIDTH = {
    "hc_head": lambda e: (e[1], e[2]),
    "sigmoid_gate_topk_renorm": lambda e: (e[1] + e[2],),
    "gate_topk": lambda e: (e[1],),
    "moe_fused_gate": lambda e: (e[1],),
}


def test_the_frozen_constant_pool_holds_the_projects_and_path_loaded_modules_not_installed_ones(tmp_path, monkeypatch):
    """The local constants a derandomized test may draw (oracles/gate/constant_pool.py): this project's and
    those of a module loaded by its path (a kernel under test), never an installed package's, wherever
    it was installed. Hypothesis took the device runs' `pip install --target /tmp/site` for local code,
    and the GPU's ci cases differed from the CPU's simulation of them (H100, 2026-12-06)."""
    import importlib
    import importlib.util
    import sys
    from oracles.gate.constant_pool import without_installed_packages
    package = tmp_path / "site" / "installed_for_the_pool"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("MAGIC = 918273645\n")
    kernel = tmp_path / "kernel_for_the_pool.py"
    kernel.write_text("MAGIC = 546372819\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(sys.modules, "installed_for_the_pool", importlib.import_module("installed_for_the_pool"))
    spec = importlib.util.spec_from_file_location("kernel_for_the_pool", kernel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "kernel_for_the_pool", module)
    pool = set(without_installed_packages())
    assert 546372819 in pool and 918273645 not in pool
    assert "--gate-budget" in pool  # the project's own (oracles/gate/plugin.py)


def test_a_case_names_its_inputs_that_hold_nan_or_inf():
    from strategies.case import Case
    finite = torch.tensor([1.0, -2.0])
    case = Case("gate_topk", {"x": finite, "k": 1, "eps": 1e-6, "i": torch.tensor([3])})
    assert case.nonfinite_inputs() == ()
    for bad in (math.nan, math.inf, -math.inf):
        t = torch.tensor([[1.0, bad], [0.0, 0.0]], dtype=torch.bfloat16)
        assert case.with_inputs(x=t).nonfinite_inputs() == ("x",)
        assert case.with_inputs(x=t[1:]).nonfinite_inputs() == ()  # only the view's own elements count
        assert case.with_inputs(eps=bad, i=torch.tensor([7])).nonfinite_inputs() == ("eps",)
    assert case.with_inputs(x=torch.empty(0, 3)).nonfinite_inputs() == ()


def test_a_finite_twin_sets_nan_and_inf_to_zero_and_keeps_the_layout():
    from strategies.gate_topk import build_case as gt_case
    storage = torch.full((4, 6), float("nan"))
    x = storage[:, ::2]
    x.copy_(torch.arange(1, 13, dtype=torch.float32).view(4, 3))
    x[1, 1], x[2, 0] = float("nan"), float("-inf")
    twin = gt_case(x=x, k=2).finite_twin()
    y = twin.inputs["x"]
    assert (y.stride(), y.storage_offset(), y.shape) == (x.stride(), x.storage_offset(), x.shape)
    assert torch.equal(y, torch.where(torch.isfinite(x), x, torch.zeros(())))
    assert twin.nonfinite_inputs() == () and twin.inputs["k"] == 2
    gaps = y.as_strided((storage.numel() - 1,), (1,), 0)[1::2]  # the view's gaps: not its elements, left NaN
    assert bool(torch.isnan(gaps).all())
    finite = gt_case(x=torch.ones(2, 3), k=1)
    assert finite.finite_twin() == finite
    assert gt_case(x=torch.tensor([float("nan")]).expand(2, 3), k=1).finite_twin() is None  # a broadcast view
    assert finite.with_inputs(k=float("nan")).finite_twin() is None  # no value stands in for a NaN scalar
