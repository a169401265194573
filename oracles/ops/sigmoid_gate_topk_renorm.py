"""sigmoid_gate_topk_renorm: the op's contract, the task reference, the float64 oracle and the tie-aware verdict.

The contract, from the task and the official reference and test (flagos-ai/FlagGems-sglang:
reference/sigmoid_gate_topk_renorm.py, tests/test_sigmoid_gate_topk_renorm.py; they win wherever
the task text differs). DeepSeek-V3-style MoE routing: choose k routed experts by a biased
sigmoid score, renormalize their sigmoid weights together with the always-on shared experts',
and scale.

    sigmoid_gate_topk_renorm(logits, k, n_shared_experts, route_scale, global_scale, bias)
        -> (routed_w [T, k], indices [T, k] int32, shared_w [T, S])   (the entry may be `reference`)
    logits [T, N + S]: N routed experts, then S = n_shared_experts shared ones (bf16 in the judge;
    float16 and float32 are drawn too); k, n_shared_experts Python ints, 1 <= k <= N, S >= 0;
    route_scale a Python float; global_scale a 0-dim float32 tensor on the logits' device; bias
    float32 [N]. Weights in the logits dtype, on its device.

Math, per token t, all float32 in the reference:
    sel_e   = sigmoid(x_e) + bias_e                 e < N       (chooses; never a weight)
    indices = the k largest sel, descending         (torch.topk: NaN above every number)
    a       = concat(x[indices], x[N:N+S])          the RAW logits, not sel
    p_j     = sigmoid(a_j)
    w_j     = p_j / sum_i p_i * route_scale * global_scale
    routed_w = w[:k], shared_w = w[k:]              stored in the logits dtype (nearest even)
All-(-inf) active logits give 0/0 = NaN weights. The reference (`reference` below, operation for
operation) calls bias.float() and global_scale.float(): a Python-float global_scale is invalid
for it (never drawn); a [1] or a host tensor is valid, and outside the judge domain.

The official test: nine cases (T, N, S, k) = (1, 32, 1, 3), (37, 128, 3, 5) with route_scale 1.5
and global_scale 0.8, (83, 64, 1, 6) with 2.0 and 1.2, (9, 256, 4, 12), then the benchmark
(m, 128, 3, 5) with 1.5 and 0.8 for m in 1, 8, 64, 512, 4096 (scales the researched notes leave
unsaid are taken as 1.0: strategies/sigmoid_gate_topk_renorm.py JUDGE_CASES). Each is built on
the chip under test from one torch.Generator(device).manual_seed(0): logits = randn(T, N + S)
float32 cast to bf16, then bias = 0.1 randn(N) float32; global_scale = torch.tensor(gs,
device=device, dtype=torch.float32), a 0-dim tensor ON the device (an earlier reading of the
task omitted the device; the test wins); route_scale a Python float. Check: indices by
torch.equal (exact and ordered); both weight outputs by torch.testing.assert_close after a
float32 cast at the bfloat16 tolerance (1.5e-2) whatever the logits' dtype, equal_nan off (any
NaN fails). Competitors report k up to 16 in hidden cases.

Judge domain (JUDGE_DOMAIN below): logits bfloat16 and contiguous, 1 <= T <= 65536, 1 <= k <= N
<= 512, k <= 16, 1 <= S <= 8; bias float32 [N]; global_scale as the test builds it; route_scale
any float. Same competition rules as hc_head (oracles/ops/hc_head.py); the zip holds
sigmoid_gate_topk_renorm.py.

Ties: any valid top-k set in descending score order is right; torch.topk's order among equal
scores is device-dependent (tests/results/torch-topk-order.md). The verdict therefore checks the kernel's indices as *a* valid top-k
(within the float32 rounding of the scores), checks its weights against the float64 oracle
computed with the kernel's OWN indices, and reports a tie ordered differently from torch.topk
as a judge risk, not a failure (a failure under --judge-exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from oracles.tolerances import DIV_ULPS, EXP_ARG_ULPS, EXP_ULPS, FLT32_TINY, U32, gamma, overflow_threshold, ulp
from oracles.verdict import (DEGENERATE, FAIL, FTZ, MAX_LISTED, PASS, RISK, SKIP, TIE, Check, bounded_check,
                             contract_check, fmt, judge_check, judge_on_rows, on_device, oracle_rows,
                             specials_check)
from oracles.ops import OpSpec
from strategies import sigmoid_gate_topk_renorm as drawn
from strategies.case import Case, beyond_int32_violation

OUTPUT_NAMES = ("routed_w", "indices", "shared_w")
ROW_INPUTS = ("logits",)  # inputs whose dim 0 is the token: each token is computed independently


def reference(logits, k, n_shared_experts, route_scale, global_scale, bias):
    """The judge's reference (flagos-ai/FlagGems-sglang reference/sigmoid_gate_topk_renorm.py),
    operation for operation: float32 throughout, then .to(dtype). It calls bias.float() and
    global_scale.float(): a Python-float global_scale is not a valid input (AttributeError)."""
    dtype = logits.dtype
    N = logits.shape[-1] - n_shared_experts
    logits_f = logits.float()
    routed = logits_f[:, :N]
    shared = logits_f[:, N:N + n_shared_experts]
    sel = torch.sigmoid(routed) + bias.float()[None, :]
    indices = torch.topk(sel, k, dim=-1).indices
    active = torch.cat([torch.gather(routed, 1, indices), shared], dim=-1)
    p = torch.sigmoid(active)
    w = p / p.sum(dim=-1, keepdim=True)
    w = w * route_scale * global_scale.float()
    return w[:, :k].to(dtype), indices.to(torch.int32), w[:, k:].to(dtype)


def active_logits(logits, indices, n_shared_experts) -> torch.Tensor:
    """The logits that enter the weights for a GIVEN choice of indices ([T, k], each in [0, N)):
    the chosen routed ones, then the shared ones, [T, k+S] in the logits' dtype, on the CPU.
    Gathered where the logits live, so only these k+S of a row's N+S cross to the host."""
    N = logits.shape[-1] - n_shared_experts
    x = logits.detach()
    active = torch.cat([x[:, :N].gather(1, on_device(x, indices).long()), x[:, N:]], dim=-1)
    return active.cpu()


def weights_float32(logits, indices, n_shared_experts, route_scale, global_scale):
    """The reference's steps 4-6 for a GIVEN choice of indices (the kernel's own), float32 on the
    CPU, cast to the logits dtype: the special-value semantics that choice must produce."""
    dtype = logits.dtype
    active = active_logits(logits, indices, n_shared_experts).float()
    p = torch.sigmoid(active)
    w = p / p.sum(-1, keepdim=True) * route_scale * global_scale.detach().cpu().float()
    k = indices.shape[-1]
    return w[:, :k].to(dtype), w[:, k:].to(dtype)


def global_scale_value(global_scale) -> float:
    """global_scale as a Python float: a [1] tensor, a 0-dim tensor or a float."""
    if isinstance(global_scale, torch.Tensor):
        return float(global_scale.detach().cpu().double().reshape(()))
    return float(global_scale)


# ---------------------------------------------------------------------------------------------
# The float64 oracle


@dataclass(frozen=True)
class Scores64:
    """Selection scores in float64 and how far a correct float32 evaluation may be from them ([T, N])."""
    sel: torch.Tensor        # sigmoid(x) + bias, float64
    tol: torch.Tensor        # |fl32(sel) - sel| <= tol (see selection_tolerance); 0 where sel is not finite
    nan: torch.Tensor        # bool: NaN scores, which torch.topk ranks above every number

    @property
    def lo(self) -> torch.Tensor:
        return self.sel - self.tol

    @property
    def hi(self) -> torch.Tensor:
        return self.sel + self.tol


def sigmoid_error(a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Bound on |fl32(sigmoid(a)) - sigmoid(a)| for an exactly representable a, float64 [..].

    sigmoid via exp: e = exp(-a) = 2^(-a log2 e); rounding the scaled argument costs EXP_ARG_ULPS
    |a| u of relative error on e and ex2.approx EXP_ULPS u more; d sigmoid = sigmoid (1 - sigmoid) rel(e).
    Then 1 / (1 + e): an add and a division, DIV_ULPS u of sigmoid. Plus 2 FLT_MIN: exp(-a)
    overflows for a < -88.7 and gives sigmoid = 0 where the true value is below FLT_MIN (torch's
    CPU float32 sigmoid does this), and a GPU may flush a subnormal result to zero (FTZ).
    """
    slope = p * torch.sigmoid(-a)  # sigmoid'(a) without the cancellation of p (1 - p)
    exp_term = torch.where(slope > 0, slope * (EXP_ARG_ULPS * a.abs() + EXP_ULPS) * U32, torch.zeros_like(slope))
    return exp_term + DIV_ULPS * U32 * p + 2 * FLT32_TINY


def selection_tolerance(x: torch.Tensor, p: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Allowed |fl32(sel_e) - sel_e| per lane, float64 [T, N].

    Derivation (x exact after the upcast; bias is float32 already):
      s32 = fl32(sigmoid(x)):          |s32 - p| <= dp = sigmoid_error(x, p)
      sel32 = fl32(s32 + bias):        |sel32 - sel| <= dp + u |s32 + bias| <= dp + u (|sel| + dp)
    Two scores are then ordered either way by some correct float32 kernel exactly when their
    intervals [sel - tol, sel + tol] overlap: a "within-rounding tie". Exact ties (the same logit
    and bias) have identical intervals.
    """
    dp = sigmoid_error(x, p)
    tol = dp + U32 * (sel.abs() + dp)
    return torch.where(sel.isfinite(), tol, torch.zeros_like(tol))


def selection_scores64(logits, n_shared_experts, bias) -> Scores64:
    """sigmoid(x) + bias for the routed lanes, every input upcast to float64, where the logits
    live ([T, N]: on a GPU, millions of values a bulk-row case)."""
    N = logits.shape[-1] - n_shared_experts
    x = logits.detach()[:, :N].double()   # upcast: exact for bf16/fp16/fp32 logits
    b = on_device(x, bias).double()
    p = torch.sigmoid(x)
    sel = p + b
    return Scores64(sel, selection_tolerance(x, p, sel), sel.isnan())


@dataclass(frozen=True)
class Weights64:
    """The float64 weights for one choice of indices, and the magnitudes the bound is built from."""
    w: torch.Tensor          # [T, k+S]  routed then shared, float64
    active: torch.Tensor     # [T, k+S]  the raw logits that enter (gathered, then shared)
    p: torch.Tensor          # [T, k+S]  sigmoid(active)
    total: torch.Tensor      # [T, 1]    sum of p
    scale: float             # route_scale * global_scale
    k: int


def weights64(logits, indices, n_shared_experts, route_scale, global_scale) -> Weights64:
    """The weights GIVEN a choice of indices ([T, k], each in [0, N)), in float64 on the CPU: the
    kernel's own valid choice is what its weights are checked against."""
    active = active_logits(logits, indices, n_shared_experts).double()   # upcast: exact
    p = torch.sigmoid(active)
    total = p.sum(-1, keepdim=True)
    scale = float(route_scale) * global_scale_value(global_scale)
    return Weights64(p / total * scale, active, p, total, scale, indices.shape[-1])


def oracle64(logits, k, n_shared_experts, route_scale, global_scale, bias) -> tuple[Scores64, torch.Tensor, Weights64]:
    """The whole op in float64: scores, a top-k of the float64 scores (NaN first), its weights."""
    scores = selection_scores64(logits, n_shared_experts, bias)
    indices = torch.topk(scores.sel, k, dim=-1).indices
    return scores, indices, weights64(logits, indices, n_shared_experts, route_scale, global_scale)


def accuracy_bound(o: Weights64, out_dtype: torch.dtype) -> torch.Tensor:
    """Allowed |kernel - oracle64| per weight, float64 [T, k+S] (routed then shared).

    Derivation (rigorous, any summation order; u = 2^-24, n = k + S terms, all p_j >= 0):
      p_j = fl32(sigmoid(a_j)):   |dp_j| <= sigmoid_error(a_j)      (exp, add, divide; 2 FLT_MIN)
      s = sum_j p_j:              |ds| <= sum_j |dp_j| + gamma_{n-1} s + n FLT_MIN
                                  (positive terms: no cancellation; FTZ of subnormal partial sums)
      q_j = p_j / s:              |q'_j - q_j| <= (|dp_j| + q_j |ds|) / (s - |ds|), used while
                                  |ds| < s/2; beyond (every p_j near or below FLT_MIN, where float32
                                  sigmoid underflows or flushes) the float32 q_j can be anything in
                                  [0, 1]: no bound, those rows are classified (underflow_rows)
      w_j = q_j * route_scale * global_scale: the division (DIV_ULPS u), route_scale and a Python
                                  float global_scale rounded to float32 (2u), two products (2u):
                                  + (DIV_ULPS + 4) u |w_j|; each may flush a subnormal result:
                                  + 3 FLT_MIN (1 + |scale|)
      cast to out_dtype:          + 1 ulp(out_dtype, |w_j|)  (1/2 for rounding, 1/2 for a binade crossing)
    """
    dp, ds = _sum_error(o)
    s = o.total
    scale = abs(o.scale)
    q = o.p / s
    # Beyond |ds| < s/2 no float32 value is more right than another: underflow_rows and
    # weight_hull_accepts classify those rows; the bound itself stays strict there.
    linear = torch.where(ds < s / 2, scale * (dp + q * ds) / (s - ds), torch.zeros_like(dp))
    rounding = (DIV_ULPS + 4) * U32 * o.w.abs() + 3 * FLT32_TINY * (1 + scale)
    return linear + rounding + ulp(o.w, out_dtype)


def _sum_error(o: Weights64) -> tuple[torch.Tensor, torch.Tensor]:
    """|dp_j| [T, n] and |ds| [T, 1] of accuracy_bound's derivation."""
    n = o.p.shape[-1]
    dp = sigmoid_error(o.active, o.p)
    ds = dp.sum(-1, keepdim=True) + gamma(max(n - 1, 0)) * o.total + n * FLT32_TINY
    return dp, ds


def underflow_rows(o: Weights64) -> torch.Tensor:
    """Rows whose float32 sum of sigmoids is within FTZ/underflow reach of zero (|ds| >= s/2 in
    accuracy_bound): there float32 may give 0/0 = NaN or finite weights depending on how sigmoid
    and the sum are evaluated. [T] bool. (A float64 sum of exactly 0 is 0 in float32 too: rows of
    all -inf, or of logits below -745, are NaN unambiguously.)"""
    _, ds = _sum_error(o)
    s = o.total
    return ((s > 0) & ~(ds < s / 2))[:, 0]


def underflow_kinds(o: Weights64, w32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Underflow rows split by what makes them ambiguous, ([T] degenerate, [T] ftz): degenerate
    where the float32 reference's own row (`w32` [T, k+S], the reference's steps with the
    kernel's indices, float32 on the CPU, subnormals kept) is non-finite or off oracle64 by more
    than 1e-3 of the scale (float32 sigmoid underflows to 0 below -88.7, gradual underflow
    quantizes the rest); ftz where float32 keeping subnormals is right and only flushing them
    (a GPU's approximate exp/division) changes the weights."""
    rows = underflow_rows(o)
    off = ~w32.isfinite().all(-1) | ((w32.double() - o.w).abs() > 1e-3 * abs(o.scale) + FLT32_TINY).any(-1)
    return rows & off, rows & ~off


def weight_hull_accepts(weights: torch.Tensor, scale: float) -> torch.Tensor:
    """[T, n] bool: a weight some normalized q in [0, 1] gives, w = q * scale (within float32
    rounding and the output cast), or NaN (0/0 once the sum underflows or flushes to zero), or
    an infinity of scale's sign (p / s with s flushed to 0 and p kept)."""
    w = weights.detach().cpu().double()
    lo, hi = min(0.0, scale), max(0.0, scale)
    slack = 8 * U32 * abs(scale) + ulp(torch.tensor(abs(scale)), weights.dtype).item() + 3 * FLT32_TINY
    inside = (w >= lo - slack) & (w <= hi + slack) | w.isnan()
    if scale:
        inside |= w == math.copysign(math.inf, scale)
    return inside


# ---------------------------------------------------------------------------------------------
# The judge domain: what the competition sends (its official test), with honest margins.

JUDGE_DOMAIN = ("logits: bfloat16, contiguous (no storage offset), [T, N + S] with 1 <= T <= 65536, 1 <= k <= N <= "
                "512, k <= 16, 1 <= S <= 8; bias float32 [N] contiguous; global_scale a 0-dim float32 tensor on the "
                "logits' device; k, n_shared_experts Python ints; route_scale a Python float (any value)")


def judge_domain_violations(case: Case) -> list[str]:
    """How `case` lies outside JUDGE_DOMAIN, one short 'name=value' item each (empty: inside),
    the form first (dtype, layout), then the shapes.
    The judge's own cases: (T, N, S, k) in (1, 32, 1, 3), (37, 128, 3, 5), (83, 64, 1, 6),
    (9, 256, 4, 12) and (m, 128, 3, 5) for m up to 4096; competitors report k up to 16 in its
    hidden cases; models route over up to 384 experts with one or two shared ones."""
    args = case.inputs
    logits, k, S = args["logits"], args["k"], args["n_shared_experts"]
    T, E = logits.shape
    N = E - S
    out = beyond_int32_violation(case)
    if logits.dtype != torch.bfloat16:
        out.append(f"logits.dtype={str(logits.dtype).removeprefix('torch.')}")
    if not (logits.is_contiguous() and logits.storage_offset() == 0):
        out.append("logits.layout=strided")
    if not 1 <= T <= 65536:
        out.append(f"T={T}")
    if not 1 <= N <= 512:
        out.append(f"N={N}")
    if not 1 <= k <= 16:
        out.append(f"k={k}")
    if not 1 <= S <= 8:
        out.append(f"n_shared_experts={S}")
    bias, gs = args["bias"], args["global_scale"]
    if bias.dtype != torch.float32 or not bias.is_contiguous() or bias.storage_offset():
        out.append("bias=non-judge form")
    if not isinstance(gs, torch.Tensor) or gs.dim() != 0 or gs.dtype != torch.float32:
        out.append("global_scale=" + (f"shape {list(gs.shape)}" if isinstance(gs, torch.Tensor) else type(gs).__name__))
    if case.host_inputs:
        out.append("host tensors=" + ",".join(sorted(case.host_inputs)))
    return out


# ---------------------------------------------------------------------------------------------
# The verdict


def _definitely_greater(lo_a, nan_a, hi_b, nan_b) -> torch.Tensor:
    """Score a ranks above score b for every correct float32 evaluation: NaN above any number,
    else the rounding intervals do not overlap."""
    return (nan_a & ~nan_b) | (~nan_a & ~nan_b & (lo_a > hi_b))


def _score(scores: Scores64, t: int, lane: int) -> str:
    if bool(scores.nan[t, lane]):
        return "NaN"
    return f"{fmt(scores.sel[t, lane])} (±{scores.tol[t, lane]:.2g})"


def _row(t: torch.Tensor) -> str:
    values = t.tolist()
    return "[" + ", ".join(map(str, values[:24])) + (", ..." if len(values) > 24 else "") + "]"


def indices_check(indices: torch.Tensor, scores: Scores64, reference_indices: torch.Tensor) -> Check:
    """Each row: k distinct indices in [0, N), a valid top-k of the selection scores (every chosen
    score >= every unchosen one), in descending order, both within the scores' own float32
    rounding; NaN scores rank above every number, as in torch.topk. Ties in any order.

    Where the scores live, in O(T N): a row leaves out a definitely larger score when its highest
    unchosen lower end lies above its lowest chosen upper end, and is out of order when a
    position's lower end lies above the lowest upper end before it (rounding intervals overlap
    without being transitive, so every earlier position counts, not only the one before); only
    the listed rows are searched for the offending pair."""
    idx = on_device(scores.sel, indices).long()
    ref = on_device(scores.sel, reference_indices).long()
    T, N = scores.sel.shape
    k = idx.shape[-1]
    problems = []
    out_of_range = ((idx < 0) | (idx >= N)).nonzero().tolist()
    if out_of_range:
        shown = "; ".join(f"indices[{t}, {j}] = {int(idx[t, j])}" for t, j in out_of_range[:MAX_LISTED])
        more = f"; ... and {len(out_of_range) - MAX_LISTED} more" if len(out_of_range) > MAX_LISTED else ""
        return Check("indices", FAIL, f"{len(out_of_range)} index(es) outside [0, N) = [0, {N}): {shown}{more}"
                                      f" (row {out_of_range[0][0]}: kernel {_row(idx[out_of_range[0][0]])}, "
                                      f"reference {_row(ref[out_of_range[0][0]])})")
    if T == 0 or k == 0:
        return Check("indices", PASS)
    ordered = idx.sort(-1).values
    dup_rows = (ordered[:, 1:] == ordered[:, :-1]).any(-1).nonzero().flatten().tolist()
    if dup_rows:
        shown = "; ".join(f"row {t}: kernel {_row(idx[t])}, reference {_row(ref[t])}" for t in dup_rows[:MAX_LISTED])
        problems.append(f"repeated index in {len(dup_rows)} row(s): {shown}")

    lo, hi, nan = scores.lo, scores.hi, scores.nan
    lo_c, hi_c, nan_c = lo.gather(1, idx), hi.gather(1, idx), nan.gather(1, idx)   # [T, k]
    chosen = torch.zeros(T, N, dtype=torch.bool, device=lo.device).scatter_(1, idx, True)
    top_nan, top_lo = _highest(lo, nan, ~chosen)                  # the highest unchosen lower end
    floor_nan, floor_hi = _lowest(hi_c, nan_c)                     # the lowest chosen upper end
    bad_rows = _definitely_greater(top_lo, top_nan, floor_hi, floor_nan).nonzero().flatten().tolist()
    if bad_rows:
        lines = []
        for t in bad_rows[:MAX_LISTED]:
            # skipped[j, e]: unchosen lane e ranks definitely above the lane chosen at position j
            skipped = _definitely_greater(lo[t][None, :], nan[t][None, :], hi_c[t][:, None], nan_c[t][:, None]) \
                & ~chosen[t][None, :]
            j, e = skipped.nonzero()[0].tolist()
            c = int(idx[t, j])
            lines.append(f"row {t}: chose lane {c} (position {j}, sel {_score(scores, t, c)}) but skipped "
                         f"lane {e} (sel {_score(scores, t, e)}); kernel {_row(idx[t])}, reference {_row(ref[t])}")
        more = f"; ... and {len(bad_rows) - MAX_LISTED} more row(s)" if len(bad_rows) > MAX_LISTED else ""
        problems.append(f"not a top-k of sel = sigmoid(x) + bias in {len(bad_rows)} row(s) (a larger score "
                        f"beyond float32 rounding left out; NaN ranks above every number): " + "; ".join(lines) + more)
    # before_nan[t, j], before_hi[t, j]: (no number, lowest upper end) of positions 0 .. j - 1
    numbers = ~nan_c
    before_hi = torch.where(numbers, hi_c, torch.full_like(hi_c, math.inf)).cummin(-1).values
    before_any = numbers.cumsum(-1) > 0
    later_above = _definitely_greater(lo_c[:, 1:], nan_c[:, 1:], before_hi[:, :-1], ~before_any[:, :-1])
    inv_rows = later_above.any(-1).nonzero().flatten().tolist()
    if inv_rows:
        lines = []
        upper = torch.ones(k, k, dtype=torch.bool, device=lo.device).triu(1)
        for t in inv_rows[:MAX_LISTED]:
            # inverted[i, j], i < j: the lane at the later position j ranks definitely above the one at i
            inverted = _definitely_greater(lo_c[t][None, :], nan_c[t][None, :], hi_c[t][:, None],
                                           nan_c[t][:, None]) & upper
            i, j = inverted.nonzero()[0].tolist()
            a, b = int(idx[t, i]), int(idx[t, j])
            lines.append(f"row {t}: position {i} lane {a} (sel {_score(scores, t, a)}) before position {j} "
                         f"lane {b} (sel {_score(scores, t, b)}); kernel {_row(idx[t])}, reference {_row(ref[t])}")
        more = f"; ... and {len(inv_rows) - MAX_LISTED} more row(s)" if len(inv_rows) > MAX_LISTED else ""
        problems.append(f"not in descending score order in {len(inv_rows)} row(s): " + "; ".join(lines) + more)
    return Check("indices", FAIL, " | ".join(problems)) if problems else Check("indices", PASS)


def _highest(values, nan, among) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the highest of `values` among the lanes `among` as (is NaN, value): NaN when the
    row has a NaN score there, else its largest value (-inf when it has none)."""
    numbers = among & ~nan
    return (among & nan).any(-1), torch.where(numbers, values, torch.full_like(values, -math.inf)).amax(-1)


def _lowest(values, nan) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the lowest of `values` as (is NaN, value): its smallest number, or NaN when every
    lane is NaN (then no score ranks definitely above it)."""
    return nan.all(-1), torch.where(~nan, values, torch.full_like(values, math.inf)).amin(-1)


def tie_description(kernel_row: torch.Tensor, reference_row: torch.Tensor, scores: Scores64, t: int) -> str:
    """The positions where two valid choices differ, with their scores: exact or within-rounding ties."""
    parts = []
    for j in (kernel_row != reference_row).nonzero().flatten().tolist()[:MAX_LISTED]:
        a, b = int(kernel_row[j]), int(reference_row[j])
        if bool(scores.nan[t, a]) and bool(scores.nan[t, b]):
            kind = "both NaN"
        elif float(scores.sel[t, a]) == float(scores.sel[t, b]):
            kind = "exact tie"
        else:
            diff = abs(float(scores.sel[t, a]) - float(scores.sel[t, b]))
            kind = (f"within float32 rounding, |diff| {diff:.3g} <= "
                    f"{float(scores.tol[t, a] + scores.tol[t, b]):.3g}")
        parts.append(f"position {j}: kernel lane {a} sel {_score(scores, t, a)}, "
                     f"reference lane {b} sel {_score(scores, t, b)} ({kind})")
    return "; ".join(parts)


# The official test compares both weight outputs at the bfloat16 tolerance whatever the logits'
# dtype (its _check: assert_close(..., dtype=torch.bfloat16)); indices by torch.equal.
JUDGE_TOLERANCE_DTYPE = torch.bfloat16


def judge_verdict(outputs: dict, reference: dict, scores: Scores64, indices_valid: bool,
                  allowed: torch.Tensor | None = None,
                  explained: dict[str, torch.Tensor] | None = None) -> Check:
    """The judge: indices torch.equal to the reference's, weights by assert_close.

    Judge RISKs, not failures (the kernel is right; the judge may still reject it):
    - tie: a valid choice that differs from torch.topk's only among (within-rounding) tied scores;
    - ill-conditioned: on rows whose indices agree, a weight the judge rejects within 2 *
      `allowed` (the kernel's accuracy bound [T, k+S]; the reference is a float32 evaluation
      within it too): float32 rounding on an ill-conditioned row (oracles/verdict.py judge_check);
    - `explained[kind]` ([T, k+S] bool, kinds degenerate / ftz): rows where every sigmoid is near
      or below FLT_MIN and the kernel's weights are ones float32 underflow or FTZ gives.
    """
    out = {n: outputs[n].detach().cpu() for n in OUTPUT_NAMES}
    ref = {n: reference[n].detach().cpu() for n in OUTPUT_NAMES}
    nonfinite = ~(ref["routed_w"].isfinite().all(-1) & ref["shared_w"].isfinite().all(-1))
    if bool(nonfinite.any()):
        return judge_on_rows(lambda out_, ref_: judge_verdict(out_, ref_, scores, indices_valid, allowed, explained),
                             outputs, reference, nonfinite,
                             "the reference itself has NaN/inf weights; the judge never draws such inputs")
    k_idx, r_idx = out["indices"].long(), ref["indices"].long()
    k = k_idx.shape[-1]
    differ = (k_idx != r_idx).any(-1)
    # A case's invalid rows may all be ones left out above (a NaN row): ask the rows judged here.
    if bool(differ.any()) and not indices_valid and \
            indices_check(k_idx[differ], oracle_rows(scores, differ), r_idx[differ]).status != PASS:
        c = judge_check(out, ref, tolerance_dtype=JUDGE_TOLERANCE_DTYPE)
        return Check("judge", FAIL, f"{c.message} (not a tie order: the kernel's choice is not a valid top-k, "
                                    f"see [indices])")
    same = ~differ

    def split(t: torch.Tensor) -> dict:
        return {"routed_w": t[same, :k], "shared_w": t[same, k:]}

    weights = judge_check({n: out[n][same] for n in OUTPUT_NAMES}, {n: ref[n][same] for n in OUTPUT_NAMES},
                          rounding_allowed=None if allowed is None else split(2 * allowed),
                          explained={kind: split(m) for kind, m in (explained or {}).items()},
                          tolerance_dtype=JUDGE_TOLERANCE_DTYPE)
    if not bool(differ.any()):
        return weights
    rows = differ.nonzero().flatten().tolist()
    ties = "; ".join(f"row {t}: kernel {_row(k_idx[t])}, reference {_row(r_idx[t])}: "
                     f"{tie_description(k_idx[t], r_idx[t], scores, t)}" for t in rows[:MAX_LISTED])
    more = f"; ... and {len(rows) - MAX_LISTED} more row(s)" if len(rows) > MAX_LISTED else ""
    tie = (f"indices differ from torch.topk's on {reference['indices'].device.type} in {len(rows)} row(s), only "
           f"among tied scores (torch.topk's tie order is device-dependent; --judge-exact fails this): {ties}{more}")
    if weights.status == FAIL:
        return Check("judge", FAIL, f"{weights.message} (rows whose indices agree) | also {tie}")
    also = f" | also ({weights.kind}) {weights.message}" if weights.status == RISK else ""
    return Check("judge", RISK, tie + also, kind=TIE)


def _merged(name: str, checks: list[Check]) -> Check:
    """One check from several outputs' checks: FAIL if any failed, else the first RISK's kind; the
    largest error margin of those that have one."""
    margin = max((c.margin for c in checks if c.margin is not None), default=None)
    failing = [c for c in checks if c.status == FAIL]
    if failing:
        return Check(name, FAIL, " | ".join(c.message for c in failing + [c for c in checks if c.status == RISK]),
                     margin=margin)
    risky = [c for c in checks if c.status == RISK]
    if risky:
        return Check(name, RISK, " | ".join(c.message for c in risky), kind=risky[0].kind, margin=margin)
    return Check(name, PASS, margin=margin)


def verdict_checks(case: Case, outputs: dict, reference: dict, *, judge_exact: bool = False) -> list[Check]:
    args = case.inputs
    logits, k, S = args["logits"], args["k"], args["n_shared_experts"]
    T, E = logits.shape
    N = E - S
    device = reference["indices"].device
    contract = [contract_check("routed_w", outputs["routed_w"], shape=(T, k), dtype=logits.dtype, device=device),
                contract_check("indices", outputs["indices"], shape=(T, k), dtype=torch.int32, device=device),
                contract_check("shared_w", outputs["shared_w"], shape=(T, S), dtype=logits.dtype, device=device)]
    contract = [c for c in contract if c is not None]
    if contract:
        return [_merged("contract", contract)]
    checks = [Check("contract", PASS)]

    scores = selection_scores64(logits, S, args["bias"])
    idx = outputs["indices"].detach().cpu().long()   # [T, k]: the weights' checks run on the host
    indices = indices_check(outputs["indices"], scores, reference["indices"])
    checks.append(indices)

    allowed = explained = None
    if bool(((idx >= 0) & (idx < N)).all()):
        o = weights64(logits, idx, S, args["route_scale"], args["global_scale"])
        allowed = accuracy_bound(o, logits.dtype)
        w32 = weights_float32(logits, idx, S, args["route_scale"], args["global_scale"])
        degenerate, ftz = underflow_kinds(o, torch.cat(w32, dim=-1))
        kernel_w = torch.cat([outputs["routed_w"].detach().cpu(), outputs["shared_w"].detach().cpu()], dim=-1)
        in_hull = weight_hull_accepts(kernel_w, o.scale)
        explained = {DEGENERATE: degenerate[:, None] & in_hull, FTZ: ftz[:, None] & in_hull}
        # Overflow of the output cast itself may round either way near the threshold.
        near_overflow = (o.w.abs() + allowed) >= overflow_threshold(logits.dtype) * (1 - 2.0 ** -8)
        parts = (("routed_w", slice(0, k)), ("shared_w", slice(k, k + S)))
        checks.append(_merged("specials", [
            specials_check(name, outputs[name], ref32, ambiguous_inf=near_overflow[:, cols],
                           explained={kind: m[:, cols] for kind, m in explained.items()})
            for (name, cols), ref32 in zip(parts, w32)]))
        checks.append(_merged("accuracy", [
            bounded_check("accuracy", name, outputs[name], o.w[:, cols], ref32, allowed[:, cols],
                          explained={kind: m[:, cols] for kind, m in explained.items()},
                          bound_doc="1 ulp(out) + float32 rounding bound from the case's magnitudes, "
                                    "oracle64 and reference computed with the kernel's own indices")
            for (name, cols), ref32 in zip(parts, w32)]))
    else:
        why = "the kernel's indices leave [0, N): its weights have no oracle (see [indices])"
        checks += [Check("specials", SKIP, why), Check("accuracy", SKIP, why)]

    checks.append(judge_verdict(outputs, reference, scores, indices.status == PASS, allowed, explained))
    return checks


def tuning_sweep(device: str, sizes=None):
    """The bundled fused design's tokens a program (BLOCK_T) at large sizes, for oracles/tools/bench.py."""
    from kernels.sigmoid_gate_topk_renorm import _fused, _validate, fused_config
    from strategies.sigmoid_gate_topk_renorm import BENCH_N, bench_inputs
    for m in sizes or (4096, 65536):
        inputs = bench_inputs(m, device)
        default_bt, seen = fused_config(m, BENCH_N)[0], set()
        for tile in (128, 256, 512, 1024):
            config = fused_config(m, BENCH_N, max_tile=tile)
            if config[0] in seen:
                continue  # the same configuration as one already timed
            seen.add(config[0])

            def run(config=config, **kw):
                T, N, S, k, gs = _validate(**kw)
                return _fused(kw["logits"], k, S, kw["route_scale"], gs, kw["bias"], config)
            yield {"case": f"m={m}", "param": "BLOCK_T", "value": config[0], "default": config[0] == default_bt,
                   "run": run, "inputs": inputs}


SPEC = OpSpec(
    name="sigmoid_gate_topk_renorm", params=("logits", "k", "n_shared_experts", "route_scale", "global_scale", "bias"),
    output_names=OUTPUT_NAMES, row_inputs=ROW_INPUTS, reference=reference, oracle64=oracle64,
    verdict_checks=verdict_checks, judge_domain=JUDGE_DOMAIN, judge_domain_violations=judge_domain_violations,
    cases=drawn.sigmoid_gate_topk_renorm_cases, sizes=drawn.SIZES, judge_cases=drawn.judge_cases,
    model_cases=drawn.model_cases, smaller_cases=drawn.smaller_cases, bench_cases=drawn.bench_cases,
    beyond_int32_bytes=drawn.BEYOND_INT32_BYTES, beyond_int32_inputs=drawn.beyond_int32_inputs,
    judge_tolerance_dtype=JUDGE_TOLERANCE_DTYPE, bench_goal_x_eager=10.0, tuning_sweep=tuning_sweep)
