"""hc_head: the op's contract, the task reference, the float64 oracle, the judge domain and the verdict.

The contract, from the task and the official reference and test (flagos-ai/FlagGems-sglang:
reference/hc_head.py, tests/test_hc_head.py; they win wherever the task text differs).
DeepSeek-V4's hyper-connection head folds each token's hc_mult residual streams into one vector:

    hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps) -> y        (called by keyword)
    x [T, hc_mult, hidden]: bfloat16 in the task (float16 and float32 are drawn too);
    hc_fn float32 [hc_mult, hc_mult * hidden]; hc_scale float32 [1]; hc_base float32 [hc_mult];
    norm_eps, hc_eps Python floats; y [T, hidden] in x.dtype, on x's device.

Math, per token t, K = hc_mult * hidden, f = x[t] flattened and upcast to float32:
    r      = 1 / sqrt(sum_i f_i^2 / K + norm_eps)
    mixes_j = r * sum_i hc_fn[j, i] f_i
    pre_j  = sigmoid(mixes_j * hc_scale + hc_base_j) + hc_eps
    y[t,d] = sum_j pre_j x[t, j, d]            (stored in x.dtype, round to nearest even)

The reference (`reference` below, operation for operation) is float32 throughout: flatten,
upcast, torch.rsqrt, F.linear, torch.sigmoid, a sum over the streams, then .to(x.dtype). NaN and
inf are what that code gives: an all-zero token with norm_eps = 0 gives r = inf and mixes =
0 * inf = NaN; squares overflowing float32 give r = 0 where oracle64 stays finite.

The official test: seven cases (T, hc_mult, hidden) = (1, 2, 128), (37, 4, 256), (129, 2, 512),
(1, 4, 7168), (128, 4, 7168), (2048, 4, 7168), (8192, 4, 7168), the last four also the benchmark
(score = reference time / kernel time by triton.testing.do_bench, averaged). Each is built on the
chip under test from one torch.Generator(device).manual_seed(0), drawing in order x = randn(T,
hc_mult, hidden) float32 cast to bf16, hc_fn = 0.02 randn, hc_base = 0.1 randn; hc_scale = [1.5],
norm_eps 1e-6, hc_eps 1e-3 (strategies/hc_head.py judge_cases). The reference runs first, then
the kernel on the same tensors. Check: torch.testing.assert_close of both cast to float32 at the
bfloat16 tolerance, atol = rtol = 1.5e-2 (oracles/tolerances.py), equal_nan off: one NaN or one
element over fails the case.

Judge domain (JUDGE_DOMAIN below): x bfloat16 and contiguous, 1 <= T <= 65536, hc_mult in {2, 4},
hidden a multiple of 128 up to 16384; the other tensors float32, contiguous, on x's device; eps
of any value. The margins take in model shapes without claiming what the judge never sends.

Competition rules the gate reflects (static rules, the `launch` check): the core computation runs
in Triton, with no try/except, device checks or branches falling back to torch; a path that
launches no Triton kernel scores nothing. A submission is a .zip holding hc_head.py and optional
hc_head_<vendor>.py files.

Two kinds of token are told apart from a kernel's bug (oracles/verdict.py, risk kinds):
- degenerate: the float32 reference's own normalizer breaks -- sum f^2 or a dot overflows
  (r = 0, or inf * 0), or sum f^2 / K + norm_eps underflows to 0 in float32 while it is positive
  (r = inf). Then NaN and finite outputs both follow from valid float32 orders of operations
  (a dot product before or after the scaling by r).
- ftz: flushing subnormal float32 intermediates of the normalizer to zero (squares, the mean,
  norm_eps, the rsqrt input: what GPUs' rsqrt.approx.ftz, sqrt.approx.ftz and div.full.ftz do)
  moves r beyond float32 rounding, e.g. an all-zero token with a subnormal norm_eps (r = inf,
  0 * inf = NaN, where the reference gives 0), or a 1e-20 token with norm_eps = 0.
On such tokens every gate pre_j = sigmoid(.) + hc_eps still lies in [hc_eps, 1 + hc_eps], so a
kernel's y must lie in the hull sum_j pre_j x[t, j, d] over that range (or be NaN where r can be
inf): inside it the difference is a risk of that kind; outside it, a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from oracles.tolerances import (DIV_ULPS, EXP_ARG_ULPS, EXP_ULPS, FLT32_MAX, FLT32_TINY, RSQRT_ULPS, U32, gamma,
                                overflow_threshold, ulp)
from oracles.verdict import (DEGENERATE, FTZ, PASS, Check, bounded_check, contract_check, judge_check, judge_on_rows,
                             on_device, specials_check)
from oracles.ops import OpSpec
from strategies import hc_head as drawn
from strategies.case import Case, beyond_int32_violation

OUTPUT_NAMES = ("y",)
ROW_INPUTS = ("x",)  # inputs whose dim 0 is the token: each token is computed independently


def reference(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """The judge's reference, verbatim in its operations: float32 throughout, then .to(dtype)."""
    shape, dtype = x.size(), x.dtype
    x = x.flatten(1).float()
    rsqrt = torch.rsqrt(x.square().mean(-1, keepdim=True) + norm_eps)
    mixes = F.linear(x, hc_fn) * rsqrt
    pre = torch.sigmoid(mixes * hc_scale + hc_base) + hc_eps
    y = torch.sum(pre.unsqueeze(-1) * x.view(shape), dim=1)
    return y.to(dtype)


@dataclass(frozen=True)
class Oracle64:
    """The float64 result and the magnitudes the accuracy bound is built from (all [T, ...])."""
    y: torch.Tensor          # [T, H]
    sumsq: torch.Tensor      # [T]      sum_i f_i^2
    r: torch.Tensor          # [T]
    dot: torch.Tensor        # [T, h]   sum_i W_ji f_i
    dot_abs: torch.Tensor    # [T, h]   sum_i |W_ji f_i|
    z: torch.Tensor          # [T, h]   mixes * scale + base
    sigma: torch.Tensor      # [T, h]
    pre: torch.Tensor        # [T, h]


def oracle64(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps) -> Oracle64:
    """The same math with every input upcast to float64, on x's device: on a GPU the judge's
    8192-token case is 235M values, seconds of float64 on one CPU core and milliseconds there."""
    T, h, H = x.shape
    xd = x.detach().double()                             # upcast: exact for bf16/fp16/fp32 inputs
    f = xd.reshape(T, h * H)
    W = on_device(x, hc_fn).double()
    scale = on_device(x, hc_scale).double().reshape(())
    base = on_device(x, hc_base).double()
    sumsq = (f * f).sum(-1)
    r = torch.rsqrt(sumsq / (h * H) + norm_eps) if h * H else torch.zeros(T, dtype=torch.float64, device=x.device)
    dot = f @ W.T
    dot_abs = f.abs() @ W.abs().T
    mixes = dot * r[:, None]
    z = mixes * scale + base
    sigma = torch.sigmoid(z)
    pre = sigma + hc_eps
    y = (pre[:, :, None] * xd).sum(1)
    return Oracle64(y, sumsq, r, dot, dot_abs, z, sigma, pre)


def max_sigmoid_slope(z: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
    """max of sigmoid'(t) over |t - z| <= dz: sigmoid' peaks at 0 and falls off symmetrically."""
    nearest = (z.abs() - dz).clamp_min(0)
    # sigmoid(t) * sigmoid(-t), not s * (1 - s): 1 - sigmoid(45) is 0 in float64, which once
    # made the bound 0 where a correct kernel's exp error shows (found by the gate, fixture
    # tests/regressions/hc_head/2983950b89fa303d.json).
    return torch.sigmoid(nearest) * torch.sigmoid(-nearest)


def normalizer_error(o: Oracle64, K: int) -> torch.Tensor:
    """rel(r) of accuracy_bound's derivation, [T, 1]. Squares, the mean and the sum with norm_eps
    that land in the subnormal range are rounded to a multiple of 2^-149 (gradual underflow, as
    IEEE float32 and the CPU reference do): 2^-150 absolute each, 3 roundings on ms. Flushing
    them to zero instead (FTZ) is not covered: token_classes tells those tokens apart."""
    ms = o.r.pow(-2)[:, None]  # sum f^2 / K + norm_eps, float64, [T, 1]
    rel_ms = gamma(K + 1) + 2 * U32 + 3 * SUBNORMAL_HALF_SPACING / ms
    return rel_ms / 2 + RSQRT_ULPS * U32


def accuracy_bound(o: Oracle64, x: torch.Tensor, hc_scale, hc_base, hc_eps, out_dtype) -> torch.Tensor:
    """Allowed |kernel - oracle64| per output element, float64 [T, H].

    Derivation (first order, Higham's gamma_n = n u / (1 - n u), u = 2^-24; every bound holds for
    any summation order, blocking or FMA use, so a correct kernel can never exceed it):
      s  = sum f_i^2, nonnegative terms:     |ds| <= gamma_{K+1} s            (products + sum)
      ms = s / K + norm_eps (nonnegative):   rel(ms) <= gamma_{K+1} + 2u + 3 * 2^-150 / ms
                                             (divide, add; subnormal results: normalizer_error)
      r  = rsqrt(ms):                        rel(r)  <= rel(ms)/2 + RSQRT_ULPS u
      m_j = r * D_j, D_j = sum W_ji f_i:     |dm_j| <= r (gamma_{K+2} A_j + (K+2) 2^-150) + |m_j| (rel(r) + u)
              (A_j = sum |W_ji f_i|; K+2 covers normalizing f before the dot, r*f rounded;
               2^-150 per product or partial sum rounded into the subnormal range)
      z_j = m_j scale + base_j:              |dz_j| <= |scale| |dm_j| + 2u (|m_j scale| + |base_j|)
      sigma_j via exp: exp(-z) = 2^(-z log2 e), rel error (EXP_ARG_ULPS |z| + EXP_ULPS) u; then 1/(1+e):
                                             |dsigma_j| <= S'_j (|dz_j| + (|z_j| + EXP_ULPS) u)
                                                           + DIV_ULPS u sigma_j + 2 FLT_MIN
              (S'_j = max sigmoid slope within |dz_j| of z_j; 2 FLT_MIN: exp overflow gives
               sigmoid = 0 where the true value is below FLT_MIN, and FTZ; at most 1, the
               sigmoid's range)
      pre_j = sigma_j + hc_eps:             |dpre_j| <= |dsigma_j| + u (sigma_j + |hc_eps|)
      y_d = sum_j pre_j x_jd:               |dy_d| <= sum_j |x_jd| |dpre_j| + gamma_h sum_j |pre_j x_jd|
                                                       + h FLT_MIN (FTZ of subnormal products)
      output cast to out_dtype:             + 1 ulp(out_dtype, |y_d|)   (round to nearest: 1/2 ulp,
                                                       the other 1/2 covers the value crossing a binade)
    """
    T, h, H = x.shape
    K = h * H
    xd = x.detach().double().abs()
    scale = float(hc_scale.detach().double().reshape(()))
    base = on_device(x, hc_base).double().abs()
    rel_r = normalizer_error(o, K)
    mixes = (o.dot * o.r[:, None]).abs()
    dm = o.r[:, None] * (gamma(K + 2) * o.dot_abs + (K + 2) * SUBNORMAL_HALF_SPACING) + mixes * (rel_r + U32)
    dz = abs(scale) * dm + 2 * U32 * (mixes * abs(scale) + base)
    slope = max_sigmoid_slope(o.z, dz)
    dsigma = slope * (dz + (EXP_ARG_ULPS * o.z.abs() + EXP_ULPS) * U32) + DIV_ULPS * U32 * o.sigma + 2 * FLT32_TINY
    dsigma = dsigma.clamp_max(1.0)  # both sigmoids lie in [0, 1]
    dpre = dsigma + U32 * (o.sigma + abs(hc_eps))
    pre_x = o.pre.abs()[:, :, None] * xd                               # [T, h, H]
    dy = (xd * dpre[:, :, None]).sum(1) + gamma(h) * pre_x.sum(1) + h * FLT32_TINY
    return dy + ulp(o.y, out_dtype)


# ---------------------------------------------------------------------------------------------
# The judge domain: what the competition sends (its official test), with honest margins.

JUDGE_DOMAIN = ("x: bfloat16, contiguous (no storage offset), [T, hc_mult, hidden] with 1 <= T <= 65536, hc_mult in "
                "{2, 4}, hidden a multiple of 128 up to 16384; hc_fn float32 [hc_mult, hc_mult * hidden], hc_scale "
                "float32 [1], hc_base float32 [hc_mult], all contiguous on x's device; norm_eps, hc_eps Python floats "
                "(any value)")


def judge_domain_violations(case: Case) -> list[str]:
    """How `case` lies outside JUDGE_DOMAIN, one short 'name=value' item each (empty: inside),
    the form first (dtype, layout), then the shapes.
    The judge's own cases have T in {1, 37, 128, 129, 2048, 8192}, hc_mult 2 or 4 and hidden in
    {128, 256, 512, 7168}; the margins take in model shapes (T to 64K tokens a batch, hidden
    sizes of real models, all multiples of 128) without claiming what the judge never sends."""
    args = case.inputs
    x = args["x"]
    T, h, H = x.shape
    out = beyond_int32_violation(case)
    if x.dtype != torch.bfloat16:
        out.append(f"x.dtype={str(x.dtype).removeprefix('torch.')}")
    if not (x.is_contiguous() and x.storage_offset() == 0):
        out.append("x.layout=strided")
    if not 1 <= T <= 65536:
        out.append(f"T={T}")
    if h not in (2, 4):
        out.append(f"hc_mult={h}")
    if H % 128 or not 128 <= H <= 16384:
        out.append(f"hidden={H}")
    for name, shape in (("hc_fn", (h, h * H)), ("hc_scale", (1,)), ("hc_base", (h,))):
        t = args[name]
        if t.dtype != torch.float32 or tuple(t.shape) != shape or not t.is_contiguous() or t.storage_offset():
            out.append(f"{name}=non-judge form")
    if case.host_inputs:
        out.append("host tensors=" + ",".join(sorted(case.host_inputs)))
    return out


# ---------------------------------------------------------------------------------------------
# Tokens where float32 itself, or flushing subnormals, leaves oracle64's value


def reference_divergent_tokens(o: Oracle64, x: torch.Tensor) -> torch.Tensor:
    """Tokens whose float32 evaluation overflows somewhere inside (x^2 sums, the hc_fn dot): there
    the float32 reference legitimately differs from oracle64 (e.g. r = 0 instead of a tiny r), and
    whether a float32 sum overflows can depend on summation order. [T] bool."""
    margin = 2.0 ** -4  # order-dependent overflow sets in below FLT_MAX once terms are large
    return (o.sumsq >= FLT32_MAX * margin) | (o.dot_abs.amax(-1) >= FLT32_MAX * margin if o.dot_abs.numel()
                                               else torch.zeros_like(o.sumsq, dtype=torch.bool))


SUBNORMAL_HALF_SPACING = 2.0 ** -150  # rounding a float32 result into the subnormal range


def _flush(v: torch.Tensor) -> torch.Tensor:
    """Flush-to-zero of float32 subnormals, applied to float64 values."""
    return torch.where(v.abs() < FLT32_TINY, torch.zeros_like(v), v)


@dataclass(frozen=True)
class TokenClasses:
    """Per token [T] bool: where oracle64's value is not the only valid float32 result."""
    degenerate: torch.Tensor   # the float32 reference's normalizer over- or underflows
    ftz: torch.Tensor          # flushing subnormal intermediates moves r beyond rounding (not degenerate)
    may_nan: torch.Tensor      # r can be inf or 0 * inf there: a NaN output follows a valid path


def token_classes(o: Oracle64, x: torch.Tensor, norm_eps: float, rel_r: torch.Tensor) -> TokenClasses:
    """Degenerate and ftz tokens (module docstring). `rel_r` [T, 1]: the accuracy bound's
    relative error of r; a flush that moves r by more than that changes the result."""
    T, h, H = x.shape
    K = h * H
    f = x.detach().reshape(T, K)
    # The reference's own float32 normalizer, as it computes it (torch keeps subnormals, on the
    # CPU and in its CUDA kernels).
    ms32 = f.float().square().mean(-1) + norm_eps if K else torch.zeros(T, device=x.device)
    ms64 = o.sumsq / max(K, 1) + norm_eps
    underflow = (ms32 == 0) & (ms64 > 0)
    degenerate = reference_divergent_tokens(o, x) | underflow | (ms32.isinf() & ms64.isfinite())
    # Flush variants: every normalizer intermediate flushed (squares, mean, norm_eps, the sum), or
    # only the approximate rsqrt's input.
    fd = f.double()
    mean_all = _flush(_flush(fd * fd).sum(-1) / max(K, 1))
    variants = (_flush(mean_all + float(_flush(torch.tensor(float(norm_eps))))), _flush(ms64))
    ftz = torch.zeros(T, dtype=torch.bool, device=x.device)
    may_nan = degenerate.clone()
    for ms in variants:
        r = torch.rsqrt(ms)
        moved = (r - o.r).abs() > rel_r[:, 0] * o.r
        moved |= r.isinf() != o.r.isinf()
        ftz |= moved & o.r.isfinite()
        may_nan |= moved & r.isinf()
    return TokenClasses(degenerate, ftz & ~degenerate, may_nan)


def hull_accepts(y: torch.Tensor, x: torch.Tensor, hc_eps: float, may_nan: torch.Tensor) -> torch.Tensor:
    """[T, H] bool: the kernel's y is one that SOME gate values pre_j in [hc_eps, 1 + hc_eps]
    give, within float32 rounding of the stream sum and the output cast; NaN where `may_nan`
    [T]; +-inf where the hull reaches past the output dtype's range."""
    T, h, H = x.shape
    xd = x.detach().double()
    lo_pre, hi_pre = float(hc_eps), 1.0 + float(hc_eps)
    a, b = lo_pre * xd, hi_pre * xd
    lo, hi = torch.minimum(a, b).sum(1), torch.maximum(a, b).sum(1)           # [T, H]
    big = torch.maximum(a.abs(), b.abs()).sum(1)
    slack = (gamma(h) + 4 * U32) * big + ulp(torch.maximum(lo.abs(), hi.abs()), x.dtype) + h * FLT32_TINY
    yk = on_device(x, y).double()
    inside = (yk >= lo - slack) & (yk <= hi + slack)
    limit = overflow_threshold(x.dtype) * (1 - 2.0 ** -8)
    inside |= (yk == math.inf) & (hi + slack >= limit) | (yk == -math.inf) & (lo - slack <= -limit)
    inside |= yk.isnan() & may_nan[:, None]
    return inside


def verdict_checks(case: Case, outputs: dict, reference: dict, *, judge_exact: bool = False) -> list[Check]:
    args = case.inputs
    x = args["x"]
    T, h, H = x.shape
    y, y_ref = outputs["y"], reference["y"]
    bad_contract = contract_check("y", y, shape=(T, H), dtype=x.dtype, device=y_ref.device)
    if bad_contract:
        return [bad_contract]
    checks = [Check("contract", PASS)]
    o = oracle64(**args)
    allowed = accuracy_bound(o, x, args["hc_scale"], args["hc_base"], args["hc_eps"], x.dtype)
    classes = token_classes(o, x, args["norm_eps"], normalizer_error(o, h * H))
    explained = {}
    special = (classes.degenerate | classes.ftz).nonzero().flatten()
    if special.numel():  # the hull only where it is needed: judge-sized cases have no such token
        in_hull = torch.zeros(T, H, dtype=torch.bool, device=x.device)
        in_hull[special] = hull_accepts(on_device(x, y)[special], x.detach()[special], args["hc_eps"],
                                        classes.may_nan[special])
        explained = {DEGENERATE: classes.degenerate[:, None] & in_hull, FTZ: classes.ftz[:, None] & in_hull}
    # Overflow of the output itself may round either way near the threshold.
    near_overflow = (o.y.abs() + allowed) >= overflow_threshold(x.dtype) * (1 - 2.0 ** -8)
    checks.append(specials_check("y", y, y_ref, ambiguous_inf=near_overflow, explained=explained))
    checks.append(bounded_check("accuracy", "y", y, o.y, y_ref, allowed, explained=explained,
                                bound_doc="1 ulp(out) + float32 rounding bound from the case's magnitudes"))
    # The reference is itself a float32 evaluation within `allowed` of oracle64
    # (tests/suite/test_oracles.py), so kernel and reference may sit 2 * allowed apart.
    checks.append(judge_on_rows(
        lambda out, ref: judge_check(out, ref, rounding_allowed={"y": 2 * allowed},
                                     explained={k: {"y": m} for k, m in explained.items()}),
        {"y": y}, {"y": y_ref}, ~y_ref.isfinite().all(-1),
        "the reference itself is non-finite there; the judge never draws such inputs"))
    return checks


def tuning_sweep(device: str, sizes=None):
    """The bundled two_launch design's launch parameters at large sizes, for oracles/tools/bench.py:
    (sub-tiles of 4 tokens a program, target programs for launch 1); the first is the default."""
    from kernels.hc_head import _TARGET_PROGRAMS, _two_launch, _validate, two_launch_config
    from strategies.hc_head import BENCH_HC_MULT, BENCH_HIDDEN, bench_inputs
    seen = set()
    for T in sizes or (128, 2048, 8192):
        inputs = bench_inputs(T, device)
        for sub, target in ((None, _TARGET_PROGRAMS), (2, _TARGET_PROGRAMS), (1, _TARGET_PROGRAMS),
                            (None, _TARGET_PROGRAMS // 2), (None, _TARGET_PROGRAMS * 2)):
            cfg = two_launch_config(T, BENCH_HC_MULT, BENCH_HIDDEN, sub=sub, target_programs=target)
            value = f"SUB={cfg['SUB']},chunks={cfg['n_chunks']}"
            if (T, value) in seen:
                continue  # the same configuration as one already timed
            seen.add((T, value))

            def run(cfg=cfg, **kw):
                _validate(**kw)
                y = torch.empty((kw["x"].shape[0], BENCH_HIDDEN), dtype=kw["x"].dtype, device=kw["x"].device)
                return _two_launch(kw["x"], kw["hc_fn"], kw["hc_scale"], kw["hc_base"], kw["norm_eps"],
                                   kw["hc_eps"], y, cfg)
            yield {"case": f"T={T}", "param": "two_launch", "value": value,
                   "default": sub is None and target == _TARGET_PROGRAMS, "run": run, "inputs": inputs}


SPEC = OpSpec(
    name="hc_head", params=("x", "hc_fn", "hc_scale", "hc_base", "norm_eps", "hc_eps"),
    output_names=OUTPUT_NAMES, row_inputs=ROW_INPUTS, reference=reference, oracle64=oracle64,
    verdict_checks=verdict_checks, judge_domain=JUDGE_DOMAIN, judge_domain_violations=judge_domain_violations,
    cases=drawn.hc_head_cases, sizes=drawn.SIZES, judge_cases=drawn.judge_cases,
    smaller_cases=drawn.smaller_cases, bench_cases=drawn.bench_cases,
    beyond_int32_bytes=drawn.BEYOND_INT32_BYTES, beyond_int32_inputs=drawn.beyond_int32_inputs,
    bench_goal_x_eager=8.0, bench_goal_copy_pct=(2048, 80.0), tuning_sweep=tuning_sweep)
