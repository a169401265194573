"""The oracles are tested themselves: oracle64 against the task reference on ordinary inputs
(the float32 reference must sit inside the accuracy bound, which proves the bound is not too
tight for a correct float32 computation) and against mpmath at 50 digits on tiny cases."""

import mpmath
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import hc_head as hc_oracle
from strategies.hc_head import hc_head_cases, judge_cases

mpmath.mp.dps = 50


@given(case=hc_head_cases(min_tokens=1, max_tokens=4, max_hidden=300))
@settings(max_examples=60)
def test_hc_head_reference_within_bound_of_oracle64(case):
    """The task's float32 reference is a correct float32 evaluation: it must pass the accuracy
    check (on tokens where the float32 reference does not overflow internally)."""
    ref = hc_oracle.reference(**case.inputs)
    checks = {c.name: c for c in hc_oracle.verdict_checks(case, {"y": ref}, {"y": ref})}
    assert checks["accuracy"].status == "pass", checks["accuracy"].message


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
