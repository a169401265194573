"""The three severities, tested on hand-built cases and outputs: what is a `fail`, what is a
`risk` of which kind, what is `unsupported`; and that distinct bugs get distinct signatures.

Each test feeds the verdict an output a real kernel produces (a GPU kernel that flushes
subnormals, a kernel that normalizes before its dot products, a kernel that refuses a dtype)
and a wrong one next to it: the classification must never turn a wrong answer into a risk."""

import math

import pytest
import torch

from oracles.ops import hc_head as hc_oracle
from oracles.ops import sigmoid_gate_topk_renorm as sgtr_oracle
from oracles.harness.differential import RunOptions, refusal_check
from oracles.harness.failures import Failure, failure_exception, failure_signature
from oracles.verdict import FAIL, PASS, RISK, UNSUPPORTED, Check, Verdict
from strategies.hc_head import build_case as hc_case
from strategies.hc_head import judge_cases as hc_judge_cases
from strategies.sigmoid_gate_topk_renorm import judge_cases as sgtr_judge_cases

TINY = torch.finfo(torch.float32).tiny


def hc_checks(case, y):
    """{check name: Check} for a kernel output y on an hc_head case (reference on the CPU)."""
    ref = hc_oracle.reference(**case.inputs)
    return {c.name: c for c in hc_oracle.verdict_checks(case, {"y": y}, {"y": ref})}


def one_token(values, dtype=torch.bfloat16, **kw):
    x = torch.tensor(values, dtype=torch.float32).reshape(1, 2, -1).to(dtype)
    return hc_case(x=x, **kw)


# ---------------------------------------------------------------------------------------------
# hc_head: ftz and degenerate tokens


@pytest.mark.hc_head
def test_zero_token_with_subnormal_eps_nan_is_an_ftz_risk():
    """An all-zero token with norm_eps = 2^-140 (a float32 subnormal): the reference gives
    r = 2^70, y = 0; a GPU kernel whose rsqrt.approx.ftz flushes the subnormal input gets
    r = inf, 0 * inf = NaN. That is `ftz`, not a bug; a finite value other than 0 is."""
    case = one_token([0.0] * 8, norm_eps=2.0 ** -140)
    flushed = torch.full((1, 4), math.nan, dtype=torch.bfloat16)
    checks = hc_checks(case, flushed)
    assert checks["specials"].status == RISK and checks["specials"].kind == "ftz", checks["specials"]
    assert not [c for c in checks.values() if c.status == FAIL], checks
    assert hc_checks(case, torch.zeros(1, 4, dtype=torch.bfloat16))["specials"].status == PASS
    wrong = hc_checks(case, torch.full((1, 4), 5.0, dtype=torch.bfloat16))
    assert wrong["accuracy"].status == FAIL, wrong["accuracy"]


@pytest.mark.hc_head
def test_subnormal_token_with_zero_eps_is_degenerate():
    """A token of bf16 subnormals with norm_eps = 0: every square underflows to 0 in float32, so
    the reference's own r = inf. Dot first then scale (the reference: finite) and scale first then
    dot (inf - inf: NaN) are both valid float32; both are `degenerate`, neither fails."""
    case = one_token([1e-39, -2e-39, 3e-39, 1e-39, -1e-39, 2e-39, 1e-39, 4e-39], norm_eps=0.0)
    ref = hc_oracle.reference(**case.inputs)
    nan = torch.full((1, 4), math.nan, dtype=torch.bfloat16)
    for y in (nan, ref):
        checks = hc_checks(case, y)
        assert not [c for c in checks.values() if c.status == FAIL], checks
    checks = hc_checks(case, nan)
    assert checks["specials"].status == RISK and checks["specials"].kind == "degenerate", checks["specials"]
    # Outside the hull sum_j pre_j x_jd, pre_j in [hc_eps, 1 + hc_eps], it is a failure all the same.
    wrong = hc_checks(case, torch.full((1, 4), 1e-30, dtype=torch.bfloat16))
    assert wrong["accuracy"].status == FAIL, wrong["accuracy"]


@pytest.mark.hc_head
def test_ordinary_token_nan_is_a_failure():
    case = one_token([1.0, -2.0, 0.5, 3.0, 1.0, 1.0, -1.0, 0.25])
    checks = hc_checks(case, torch.full((1, 4), math.nan, dtype=torch.bfloat16))
    assert checks["specials"].status == FAIL, checks["specials"]


@pytest.mark.hc_head
def test_flushed_squares_on_a_tiny_token_are_an_ftz_risk():
    """A 1e-20 token with norm_eps = 0: its squares (1e-40) are float32 subnormals. The reference
    keeps them (r = 1e20); flushing them gives r = inf, every gate saturates to 0 or 1 + hc_eps.
    That output is `ftz`; the same gates on an ordinary token would be a failure."""
    values = [1e-20, -2e-20, 3e-20, 1e-20, -1e-20, 2e-20, 1e-20, 4e-20]
    case = one_token(values, dtype=torch.float32, norm_eps=0.0)
    x = case.inputs["x"].double()
    W, base, scale = (case.inputs[k].double() for k in ("hc_fn", "hc_base", "hc_scale"))
    z = torch.where((W @ x.reshape(-1)) > 0, math.inf, -math.inf) * scale + base   # mixes = dot * inf
    pre = torch.sigmoid(z) + 1e-3
    flushed = (pre[:, None] * x[0]).sum(0, keepdim=True).float()
    checks = hc_checks(case, flushed)
    assert checks["accuracy"].status in (RISK, PASS) and not [c for c in checks.values() if c.status == FAIL], checks
    assert any(c.status == RISK and c.kind == "ftz" for c in checks.values()), checks
    ordinary = one_token([v * 1e20 for v in values], dtype=torch.float32, norm_eps=0.0)
    xo = ordinary.inputs["x"].double()
    saturated = (pre[:, None] * xo[0]).sum(0, keepdim=True).float()
    assert hc_checks(ordinary, saturated)["accuracy"].status == FAIL


# ---------------------------------------------------------------------------------------------
# sigmoid_gate_topk_renorm: tie risks and --judge-exact


@pytest.mark.sigmoid_gate_topk_renorm
def test_judge_exact_fails_tie_risks_only():
    verdict = Verdict([Check("judge", RISK, "tie", kind="tie"), Check("specials", RISK, "ftz", kind="ftz"),
                       Check("contract", UNSUPPORTED, "refused", kind="x.dtype=float16")])
    assert verdict.failures() == []
    assert [c.kind for c in verdict.failures(judge_exact=True)] == ["tie"]
    assert [c.status for c in verdict.failures(strict=True)] == [UNSUPPORTED]
    with pytest.raises(ValueError, match="kind"):
        Check("judge", RISK, "a risk without a kind")


# ---------------------------------------------------------------------------------------------
# Refusals: inside the judge domain a failure, outside it unsupported


@pytest.mark.hc_head
def test_refusal_inside_the_judge_domain_fails():
    case = hc_judge_cases("cpu")[0]  # what the competition sends
    check = refusal_check("hc_head", case, AssertionError("x must be float16"), "raised AssertionError")
    assert check.status == FAIL and "inside the judge's domain" in check.message


@pytest.mark.hc_head
@pytest.mark.parametrize("change, input_class", [
    (lambda c: c.with_inputs(x=c.inputs["x"].float()), "x.dtype=float32"),
    (lambda c: c.with_inputs(x=c.inputs["x"][:, :, ::2]), "x.layout=strided"),
    (lambda c: c.with_inputs(x=c.inputs["x"][:0]), "T=0"),
])
def test_refusal_outside_the_judge_domain_is_unsupported(change, input_class):
    case = change(hc_judge_cases("cpu")[0])
    check = refusal_check("hc_head", case, NotImplementedError("only bf16"), "raised NotImplementedError")
    assert check.status == UNSUPPORTED and input_class in check.details, check
    assert check.kind.startswith("NotImplementedError"), check.kind


@pytest.mark.hc_head
def test_a_device_fault_outside_the_judge_domain_is_still_a_failure():
    case = hc_judge_cases("cpu")[0].with_inputs(x=hc_judge_cases("cpu")[0].inputs["x"][:0])
    fault = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert refusal_check("hc_head", case, fault, "raised RuntimeError").status == FAIL


@pytest.mark.sigmoid_gate_topk_renorm
def test_router_judge_domain():
    case = sgtr_judge_cases("cpu")[1]
    assert not sgtr_oracle.judge_domain_violations(case)
    host = type(case)(case.op, case.inputs, case.features, case.label, frozenset({"global_scale"}))
    assert any("host" in v for v in sgtr_oracle.judge_domain_violations(host))
    one = case.with_inputs(global_scale=torch.tensor([0.8]))
    assert any(v.startswith("global_scale=") for v in sgtr_oracle.judge_domain_violations(one))
    no_shared = case.with_inputs(logits=case.inputs["logits"][:, :128].contiguous(), n_shared_experts=0)
    assert "n_shared_experts=0" in sgtr_oracle.judge_domain_violations(no_shared)


# ---------------------------------------------------------------------------------------------
# Distinct bugs, distinct signatures


def test_distinct_bugs_get_distinct_exception_types():
    class Impl:
        op, name = "hc_head", "k.py"
    inside = hc_judge_cases("cpu")[0]
    outside = inside.with_inputs(x=inside.inputs["x"].half())
    options = RunOptions()
    accuracy = Verdict([Check("accuracy", FAIL, "off"), Check("judge", FAIL, "off")])
    specials = Verdict([Check("specials", FAIL, "NaN")])
    signatures = {failure_signature(Failure(c, Impl, v, options))
                  for c, v in ((inside, accuracy), (outside, accuracy), (inside, specials))}
    assert signatures == {"accuracy (judge domain)", "accuracy (outside the judge domain: x.dtype)",
                          "specials (judge domain)"}
    types = {failure_exception(s) for s in signatures}
    assert len(types) == 3 and all(issubclass(t, AssertionError) for t in types)
    assert failure_exception("specials (judge domain)") is failure_exception("specials (judge domain)")


@pytest.mark.hc_head
def test_minimizing_one_bug_never_turns_it_into_another(run_options):
    """A kernel with two bugs (strides of x ignored; hc_mult = 3 wrong): the failure found on a
    strided x with 4 streams must minimize to a smaller strided case, not to the contiguous
    hc_mult = 3 case of the other bug, which fails the same check but is another bug with its
    own fixture (seen on a public hc_head: three distinct bugs minimized into one case)."""
    from kernels.hc_head import hc_head as bundled
    from oracles.harness.differential import run_case
    from oracles.harness.failures import minimized

    def two_bugs(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
        y = bundled(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)
        if not x.is_contiguous():
            y = y * 1.5
        if x.shape[1] == 3:
            y = y * 0.5
        return y

    class Impl:
        op, name, fn = "hc_head", "two_bugs.py", staticmethod(two_bugs)
    options = RunOptions(device=run_options.device)
    base = torch.randn(3, 4, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    strided = hc_case(x=base[:, :, ::2])
    verdict = run_case("hc_head", two_bugs, strided, options)
    found = Failure(strided, Impl, verdict, options)
    assert failure_signature(found) == "accuracy (outside the judge domain: x.layout)"
    three = hc_case(x=base[:, :3, :16].contiguous())  # the other bug, one structural move away
    assert failure_signature(Failure(three, Impl, run_case("hc_head", two_bugs, three, options), options)) \
        == "accuracy (outside the judge domain: hc_mult)"

    small = minimized(found, budget_s=120)
    assert failure_signature(small) == failure_signature(found)
    assert not small.case.inputs["x"].is_contiguous()
    assert small.case.inputs["x"].numel() < strided.inputs["x"].numel()  # shrunk with its layout kept


@pytest.mark.hc_head
def test_a_compile_error_outside_the_judge_domain_is_unsupported():
    """A specialization sm_90 cannot compile fails every GPU call with a CompilationError: inside
    the judge domain a failure, outside it (hc_mult 3 through a power-of-two tl.arange) a refusal."""
    from oracles.harness.differential import compile_refusal
    broken = Check("gpu-compile", FAIL, "CompilationError: arange's range must be a power of 2")
    inside = hc_judge_cases("cpu")[0]
    assert compile_refusal("hc_head", inside, broken).status == FAIL
    outside = inside.with_inputs(x=inside.inputs["x"][:, :1])
    check = compile_refusal("hc_head", outside, broken)
    assert check.status == UNSUPPORTED and "hc_mult=1" in check.details, check
    assert compile_refusal("hc_head", outside, Check("gpu-compile", PASS)).status == PASS


@pytest.mark.parametrize("op", ["hc_head", "sigmoid_gate_topk_renorm"])
def test_rows_of_an_input_beyond_int32_elements_lie_outside_the_judge_domain(op):
    """The beyond-2^31 test judges a few rows of a 2.15e9-element input: a bug there (a 32-bit
    offset overflow) is outside the judge domain (T <= 65536) even though the rows alone are not,
    and the signature names that class first."""
    from dataclasses import replace

    from oracles.ops import get_op
    from strategies.case import BEYOND_INT32
    inside = get_op(op).judge_cases("cpu")[1]
    spec = get_op(op)
    assert not spec.judge_domain_violations(inside)
    rows = replace(inside, features=inside.features | {BEYOND_INT32})
    assert spec.judge_domain_violations(rows)[0].startswith("elements=beyond 2^31")


# ---------------------------------------------------------------------------------------------
# The judge's check, row by row


@pytest.mark.hc_head
def test_the_judge_check_leaves_out_only_the_tokens_whose_reference_is_not_finite():
    """A GPU case carries thousands of bulk tokens, a few with NaN: the judge's check used to be
    skipped for the whole case whenever any reference token was non-finite, so a token the judge
    rejects went unjudged in nearly every bulk case. Now the NaN tokens are left out (and named)
    and the rest are judged, with their own indices."""
    x = torch.randn(3, 2, 4).to(torch.bfloat16)
    x[0, 0, 0] = math.nan
    case = hc_case(x=x)
    ref = hc_oracle.reference(**case.inputs)
    right = hc_checks(case, ref)["judge"]
    assert right.status == PASS and "1 row(s) left out ([0])" in right.message, right
    wrong = ref.clone()
    wrong[2, 1] += 4.0
    judged = hc_checks(case, wrong)["judge"]
    assert judged.status == FAIL and "(2, 1)" in judged.message and "left out ([0])" in judged.message, judged
    every = hc_case(x=torch.full((2, 2, 4), math.nan, dtype=torch.bfloat16))
    assert hc_checks(every, hc_oracle.reference(**every.inputs))["judge"].status == "skip"


@pytest.mark.gate_topk
def test_router_judge_checks_judge_the_rows_whose_reference_has_no_nan():
    """gate_topk: a row of NaN values in the reference is left out; a wrong value in another row
    still fails the judge's check (it was a SKIP for the whole case)."""
    from oracles.ops import gate_topk as topk_oracle
    from strategies.gate_topk import build_case as topk_case
    x = torch.tensor([[math.nan, 1.0, 2.0, 3.0], [4.0, 1.0, 2.0, 3.0]])
    case = topk_case(x=x, k=2)
    ref = dict(zip(topk_oracle.OUTPUT_NAMES, topk_oracle.reference(x=x, k=2)))
    right = {"values": ref["values"].clone(), "indices": ref["indices"].int()}
    wrong = {"values": ref["values"].clone(), "indices": ref["indices"].int()}
    wrong["values"][1, 1] = 2.5
    checks = {c.name: c for c in topk_oracle.verdict_checks(case, wrong, ref)}
    assert checks["judge"].status == FAIL and "1 row(s) left out ([0])" in checks["judge"].message, checks["judge"]
    right = {c.name: c for c in topk_oracle.verdict_checks(case, right, ref)}
    assert right["judge"].status == PASS, right["judge"]


@pytest.mark.gate_topk
def test_a_bug_only_nan_inputs_show_never_hides_a_bug_on_finite_ones(run_options):
    """Two bugs of one check on the judge's shapes: one kernel drops NaN (as most public routers
    do; the judge never sends NaN), another also picks the wrong column on finite rows. With one
    signature for both, the gate kept one failure per signature and shrank to the simplest case:
    a NaN row hid the finite bug (flagos-ai's Hygon moe_fused_gate, 2026-12-07: an H100 gate
    reported only its NaN fixture, while its tie bug fails judge-domain cases). A case holding NaN
    is judged again with its NaN set to 0: the bug that still fails is the finite one."""
    from kernels.gate_topk import gate_topk as bundled
    from oracles.harness.differential import run_case
    from oracles.harness.failures import ONLY_NONFINITE
    from strategies.gate_topk import build_case as gt_case

    def drops_nan(x, k):
        values, indices = bundled(torch.nan_to_num(x, nan=-1e30), k)
        return torch.where(torch.isnan(x).any(1, keepdim=True), x.gather(1, indices.long()), values), indices

    def drops_nan_and_last_row_wrong(x, k):
        values, indices = drops_nan(x, k)
        indices[-1] = indices[-1].flip(0)  # a finite row's choice, out of order
        return x.gather(1, indices.long()), indices

    class Impl:
        op, name = "gate_topk", "k.py"
    options = RunOptions(device=run_options.device)
    x = torch.arange(24, dtype=torch.float32).reshape(3, 8) / 8
    x[0, 5] = float("nan")
    with_nan = gt_case(x=x, k=3)

    def signature(fn, case):
        Impl.fn = staticmethod(fn)
        verdict = run_case("gate_topk", fn, case, options)
        failure = Failure(case, Impl, verdict, options)
        return failure_signature(failure), failure.finite_twin

    nan_only = signature(drops_nan, with_nan)
    assert nan_only == (f"indices (judge domain; {ONLY_NONFINITE})", "passes")
    finite = signature(drops_nan_and_last_row_wrong, with_nan)
    assert finite == ("indices (judge domain)", "fails")
    # the same bug on a finite case: one signature, so Hypothesis and the gate count it once
    assert signature(drops_nan_and_last_row_wrong, gt_case(x=torch.nan_to_num(x, nan=0.0), k=3))[0] == finite[0]
    assert failure_exception(nan_only[0]) is not failure_exception(finite[0])
    assert not run_case("gate_topk", drops_nan, gt_case(x=torch.nan_to_num(x, nan=0.0), k=3), options).failures()

    # rows of an input beyond 2^31 elements: their bug needs the whole input, so no twin runs
    from strategies.case import BEYOND_INT32
    rows = gt_case(x=x, k=3, features=(BEYOND_INT32,))
    failure = Failure(rows, Impl, run_case("gate_topk", drops_nan, with_nan, options), options)
    ran = []
    assert failure_signature(failure, run=ran.append) == "indices (outside the judge domain: elements)"
    assert ran == [] and failure.finite_twin == ""
