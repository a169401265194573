"""moe_fused_gate MUTANT shared_weight_times_rsf (tests/mutants/moe_fused_gate/MANIFEST.md): a shared slot's weight is rsum * rsf instead of rsum / rsf.

A copy of kernels/moe_fused_gate.py with that one change; `moe_fused_gate` is its grouped design.

The bundled kernel's own docstring follows:

moe_fused_gate: a DeepSeek-V3-style MoE router, one fused launch.

Per row m of scores [M, N] (upcast to float32: exact for bf16 and fp16), bias [N] (.float()):

    act, sel   sigmoid:       act = sigmoid(s)             sel = act + bias
               sqrtsoftplus:  act = sqrt(softplus(s))      sel = act + bias
               anything else: l = c tanh(s / c) (c = moe_softcapping != 0) or s;
                              sel = l + bias               act = softmax(sel) over all N
    groups     G = num_expert_group > 1: experts g*N/G .. (g+1)*N/G - 1 form group g; its score
               is the sum of its two largest sel (an equal maximum counts twice); the topk_group
               best groups are kept, sel of every other expert becomes -inf (act is not masked)
    routed     the KR = topk - num_fused_shared_experts largest sel, descending:
               weights[:, :KR] = act there (never sel), indices[:, :KR] = the experts
    shared     slot KR + j: weight rsum / routed_scaling_factor (rsum = the sum of the routed
               weights), index N + j
    renorm     renormalize: every weight / (rsum if rsum > 0 else 1)   (NaN > 0 is false)
    scale      apply_routed_scaling_factor_on_output: every weight * routed_scaling_factor
    -> weights [M, topk] float32, indices [M, topk] int32

Order, as torch.topk ranks: sel is compared through an int32 key (float32 bits with negative
magnitudes flipped, every NaN to INT32_MAX, -0.0 to +0.0): NaN above +inf, equal keys a tie,
the smaller expert first. A dropped group's experts get the key of -inf, exactly what the
reference's masking gives them (they are still chosen once the kept experts run out, as
torch.topk chooses them); a chosen expert and the padding lanes get INT32_MIN, below every
real key: a lane is retired by a live-lane mask, never by a value sentinel, so real -inf
experts are chosen once each and padding never wins while KR <= N. A group's second score is
the largest key after the FIRST lane holding its maximum is set aside (one copy, not every lane
equal to the maximum). Its two values are decoded back from their keys, so a NaN stays NaN.

Two designs of the same function (both fuzzed, see IMPLEMENTATIONS at the end):

- `moe_fused_gate_grouped` (the entry): BLOCK_M rows a program as a [BLOCK_M, G_PAD, E_PAD]
  tile, expert g * (N / G) + j at lane (g, j): each group is padded on its own, so a group size
  that is not a power of two never misaligns groups, and a group's two maxima are one reduction.
- `moe_fused_gate_flat`: BLOCK_M rows a program as a [BLOCK_M, N_PAD] tile, expert e at lane e
  and in group e // (N / G); the group scores are a loop over groups. No padding beyond N_PAD.

Only tl.max / tl.min / tl.sum / tl.where, loads and stores: no tl.sort, tl.topk or tl.argmax
(Kunlunxin's Triton has no tl.topk), no atomics. Approximate operations (exp, log, sqrt, the
divisions) are within a few float32 ulps; oracles/ops/moe_fused_gate.py derives the bound.
"""

import numbers

import torch
import triton
import triton.language as tl

# Programs launched at most; beyond it each program strides over row blocks (65535: every
# backend the judge runs accepts a grid that large).
_MAX_PROGRAMS = 65535
_INT32_LIMIT = 2**31
_SCORE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_BIAS_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
# Lanes of one program's tile: rows are added until the tile holds this many.
_MAX_TILE = 2048


def _cdiv(a, b):
    return -(-a // b)


def _next_pow2(n):
    return 1 << (n - 1).bit_length() if n > 1 else 1


# ---------------------------------------------------------------------------------------------
# Device helpers


@triton.jit
def _order_keys(v):
    """float32 v -> int32 key, key(a) > key(b) exactly when torch.topk ranks a above b.

    bits ^ ((bits >> 31) & 0x7FFFFFFF): an arithmetic shift, so negative floats get their
    magnitude bits flipped (a larger magnitude, a smaller key); every NaN -> INT32_MAX (above
    +inf's key 0x7F800000, all NaNs equal); -0.0 -> the key of +0.0 (they are equal)."""
    bits = v.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = tl.where(v != v, 0x7FFFFFFF, key)
    return tl.where(v == 0.0, 0, key)


@triton.jit
def _key_values(key):
    """The inverse of _order_keys (the map is its own inverse on the bits): a NaN key gives a NaN,
    the key of +-0.0 gives +0.0."""
    bits = key ^ ((key >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _sqrt_softplus(s):
    """sqrt(softplus(s)), softplus(s) = max(s, 0) + log1p(exp(-|s|)), float32.

    No overflow for any s, and no cancellation: log1p(y) for y = exp(-|s|) in (0, 1] is
    log(1 + y) * y / ((1 + y) - 1) (exact division of rounding errors, Goldberg's identity),
    or y itself where 1 + y rounds to 1. torch's softplus returns s above 20; this formula
    rounds to the same float32 there (log1p(exp(-20)) is below half an ulp of 20). s = +inf
    gives inf, s = -inf gives 0, NaN stays NaN."""
    y = tl.exp(-tl.abs(s))                      # approximate exp: EXP_ULPS in the bound
    one_y = 1.0 + y
    log1p_y = tl.where(one_y == 1.0, y, tl.log(one_y) * (y / (one_y - 1.0)))
    sp = tl.where(s > 0.0, s, 0.0) + log1p_y
    sp = tl.where(s != s, s, sp)                # NaN in, NaN out (s > 0 is false for NaN)
    return tl.sqrt(sp)                          # approximate sqrt: SQRT_ULPS in the bound


@triton.jit
def _tanh(t):
    """tanh(t), float32, odd. |t| < 0.25: its Taylor series through t^11 (the next term is below
    3e-10 of t); beyond: (1 - e) / (1 + e) with e = exp(-2|t|) <= 0.61, so 1 - e never cancels
    badly, and no overflow for any t. NaN stays NaN, +-inf gives +-1."""
    a = tl.abs(t)
    e = tl.exp(-2.0 * a)
    far = (1.0 - e) / (1.0 + e)
    a2 = a * a
    near = a * (1.0 + a2 * (-0.3333333333333333 + a2 * (0.13333333333333333 + a2 * (
        -0.05396825396825397 + a2 * (0.021869488536155203 - a2 * 0.008863235529902197)))))
    r = tl.where(a < 0.25, near, far)
    return tl.where(t < 0.0, -r, r)


# ---------------------------------------------------------------------------------------------
# Design 1: groups as a tile axis, [BLOCK_M, G_PAD, E_PAD]


@triton.jit
def _grouped_kernel(
    scores_ptr, stride_sm, stride_sn,
    bias_ptr, stride_b,
    weights_ptr, indices_ptr,
    M, N, G, EPG, TOPK_GROUP, KR, K,
    rsf, softcap, renormalize, apply_rsf,
    BLOCK_M: tl.constexpr, G_PAD: tl.constexpr, E_PAD: tl.constexpr, K_PAD: tl.constexpr,
    SCORING: tl.constexpr, SOFTCAP: tl.constexpr, GROUPED: tl.constexpr, ROW_OFFSETS_INT64: tl.constexpr,
):
    """BLOCK_M rows a program (grid-stride over row blocks); lane (g, j) holds expert g * EPG + j.

    Ungrouped calls come as G = 1, EPG = N. The weights and indices of a row are gathered into
    [BLOCK_M, K_PAD] tiles (the shared slots and the renormalization need the routed sum first),
    then stored to the wrapper's contiguous [M, K] outputs.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    rows = tl.arange(0, BLOCK_M)[:, None, None]            # [BLOCK_M, 1, 1]
    gi = tl.arange(0, G_PAD)[None, :, None]                # [1, G_PAD, 1]
    ji = tl.arange(0, E_PAD)[None, None, :]                # [1, 1, E_PAD]
    real = (gi < G) & (ji < EPG)                           # lanes that hold an expert
    expert = gi * EPG + ji                                 # expert id (aliases on padding lanes: masked)
    lane = gi * E_PAD + ji                                 # unique lane id, ordered as the experts are
    slots = tl.arange(0, K_PAD)[None, :]                   # [1, K_PAD]
    # bias is the same for every row: loaded once a program, upcast as the reference's .float()
    bias = tl.load(bias_ptr + expert * stride_b, mask=real, other=0.0).to(tl.float32)
    if ROW_OFFSETS_INT64:
        row_offs = rows.to(tl.int64) * stride_sm
    else:
        row_offs = rows * stride_sm

    for m0 in range(pid * BLOCK_M, M, num_programs * BLOCK_M):
        in_block = (m0 + rows) < M                         # [BLOCK_M, 1, 1]
        live = in_block & real
        base = tl.cast(m0, tl.int64)                       # 64-bit block base: M * stride can pass 2^31
        # upcast: bf16/fp16 -> float32 is exact
        s = tl.load(scores_ptr + base * stride_sm + row_offs + expert * stride_sn, mask=live,
                    other=0.0).to(tl.float32)
        if SCORING == 0:
            act = 1.0 / (1.0 + tl.exp(-s))                 # exp(-s) = inf below -88.7: act 0, never NaN
            sel = act + bias
        elif SCORING == 1:
            act = _sqrt_softplus(s)
            sel = act + bias
        else:
            if SOFTCAP:
                logit = softcap * _tanh(s / softcap)
            else:
                logit = s
            sel = logit + bias
            # softmax over the row's experts, the max subtracted: a NaN or +inf sel, or a row
            # of -inf, makes the whole row NaN, as torch.softmax does
            row_max = tl.max(tl.max(tl.where(live, sel, -float("inf")), axis=2), axis=1)[:, None, None]
            e = tl.where(live, tl.exp(sel - row_max), 0.0)
            act = e / tl.sum(tl.sum(e, axis=2), axis=1)[:, None, None]
        key = tl.where(live, _order_keys(sel), -2147483647 - 1)

        if GROUPED:
            # group score: its largest key, then the largest of the rest once the FIRST lane
            # holding the maximum is set aside (equal maxima both count)
            top1 = tl.max(key, axis=2)[:, :, None]                         # [BLOCK_M, G_PAD, 1]
            first = tl.min(tl.where(key == top1, ji, E_PAD), axis=2)[:, :, None]
            top2 = tl.max(tl.where(ji == first, -2147483647 - 1, key), axis=2)[:, :, None]
            group_score = _key_values(top1) + _key_values(top2)             # float32, NaN kept
            gkey = tl.where(gi < G, _order_keys(group_score), -2147483647 - 1)
            kept = (gi < 0) & (rows < 0)                                   # [BLOCK_M, G_PAD, 1], nothing kept yet
            for t in range(0, TOPK_GROUP):
                best = tl.max(gkey, axis=1)[:, None, :]                    # [BLOCK_M, 1, 1]
                pick = tl.min(tl.where(gkey == best, gi, G_PAD), axis=1)[:, None, :]
                kept = kept | (gi == pick)
                gkey = tl.where(gi == pick, -2147483647 - 1, gkey)
            # a dropped group's experts rank as -inf: the reference's masking
            key = tl.where(kept | (key == -2147483647 - 1), key, -2139095041)

        w_tile = tl.zeros([BLOCK_M, K_PAD], dtype=tl.float32)
        i_tile = tl.zeros([BLOCK_M, K_PAD], dtype=tl.int32)
        rsum = tl.zeros([BLOCK_M], dtype=tl.float32)
        for j in range(0, KR):
            best = tl.max(tl.max(key, axis=2), axis=1)[:, None, None]
            # ties: the smallest lane (= the smallest expert) holding the best key
            pick = tl.min(tl.min(tl.where(key == best, lane, G_PAD * E_PAD), axis=2), axis=1)[:, None, None]
            chosen = lane == pick
            # the one chosen act, NaN and inf included (the other lanes add exact zeros)
            w = tl.sum(tl.sum(tl.where(chosen, act, 0.0), axis=2), axis=1)
            idx = tl.sum(tl.sum(tl.where(chosen, expert, 0), axis=2), axis=1)
            w_tile = tl.where(slots == j, w[:, None], w_tile)
            i_tile = tl.where(slots == j, idx[:, None], i_tile)
            rsum += w
            key = tl.where(chosen, -2147483647 - 1, key)    # retire this lane only, never by value

        shared = (slots >= KR) & (slots < K)
        w_tile = tl.where(shared, (rsum * rsf)[:, None], w_tile)  # MUTANT: times rsf
        i_tile = tl.where(shared, N + slots - KR, i_tile)
        if renormalize:
            norm = tl.where(rsum > 0.0, rsum, 1.0)         # NaN > 0 is false: a NaN sum divides by 1
            w_tile = w_tile / norm[:, None]
        if apply_rsf:
            w_tile = w_tile * rsf
        rows2 = tl.arange(0, BLOCK_M)[:, None]
        keep = ((m0 + rows2) < M) & (slots < K)
        out = base * K + (rows2 * K + slots)               # 64-bit block base, int32 offsets inside it
        tl.store(weights_ptr + out, w_tile, mask=keep)
        tl.store(indices_ptr + out, i_tile, mask=keep)


# ---------------------------------------------------------------------------------------------
# Design 2: experts in a flat row, [BLOCK_M, N_PAD], a loop over groups


@triton.jit
def _flat_kernel(
    scores_ptr, stride_sm, stride_sn,
    bias_ptr, stride_b,
    weights_ptr, indices_ptr,
    M, N, G, EPG, TOPK_GROUP, KR, K,
    rsf, softcap, renormalize, apply_rsf,
    BLOCK_M: tl.constexpr, N_PAD: tl.constexpr, G_PAD: tl.constexpr, K_PAD: tl.constexpr,
    SCORING: tl.constexpr, SOFTCAP: tl.constexpr, GROUPED: tl.constexpr, ROW_OFFSETS_INT64: tl.constexpr,
):
    """BLOCK_M rows a program (grid-stride over row blocks); expert e at lane e, in group e // EPG.

    The group scores are computed one group at a time (each a masked pass over the row), written
    into a [BLOCK_M, G_PAD] tile of keys; the kept groups' lanes are marked as each is chosen.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    rows = tl.arange(0, BLOCK_M)[:, None]                  # [BLOCK_M, 1]
    lanes = tl.arange(0, N_PAD)[None, :]                   # [1, N_PAD]
    real = lanes < N
    groups = tl.arange(0, G_PAD)[None, :]                  # [1, G_PAD]
    slots = tl.arange(0, K_PAD)[None, :]                   # [1, K_PAD]
    group_of = lanes // EPG                                # >= G on padding lanes
    bias = tl.load(bias_ptr + lanes * stride_b, mask=real, other=0.0).to(tl.float32)
    if ROW_OFFSETS_INT64:
        row_offs = rows.to(tl.int64) * stride_sm
    else:
        row_offs = rows * stride_sm

    for m0 in range(pid * BLOCK_M, M, num_programs * BLOCK_M):
        in_block = (m0 + rows) < M                         # [BLOCK_M, 1]
        live = in_block & real
        base = tl.cast(m0, tl.int64)
        s = tl.load(scores_ptr + base * stride_sm + row_offs + lanes * stride_sn, mask=live,
                    other=0.0).to(tl.float32)              # upcast: exact
        if SCORING == 0:
            act = 1.0 / (1.0 + tl.exp(-s))
            sel = act + bias
        elif SCORING == 1:
            act = _sqrt_softplus(s)
            sel = act + bias
        else:
            if SOFTCAP:
                logit = softcap * _tanh(s / softcap)
            else:
                logit = s
            sel = logit + bias
            row_max = tl.max(tl.where(live, sel, -float("inf")), axis=1)[:, None]
            e = tl.where(live, tl.exp(sel - row_max), 0.0)
            act = e / tl.sum(e, axis=1)[:, None]
        key = tl.where(live, _order_keys(sel), -2147483647 - 1)

        if GROUPED:
            gkey = tl.full([BLOCK_M, G_PAD], -2147483647 - 1, dtype=tl.int32)
            for g in range(0, G):
                key_g = tl.where(group_of == g, key, -2147483647 - 1)
                top1 = tl.max(key_g, axis=1)[:, None]
                first = tl.min(tl.where(key_g == top1, lanes, N_PAD), axis=1)[:, None]
                top2 = tl.max(tl.where(lanes == first, -2147483647 - 1, key_g), axis=1)[:, None]
                gkey = tl.where(groups == g, _order_keys(_key_values(top1) + _key_values(top2)), gkey)
            kept = (lanes < 0) & (rows < 0)                        # [BLOCK_M, N_PAD], nothing kept yet
            for t in range(0, TOPK_GROUP):
                best = tl.max(gkey, axis=1)[:, None]
                pick = tl.min(tl.where(gkey == best, groups, G_PAD), axis=1)[:, None]
                kept = kept | (group_of == pick)
                gkey = tl.where(groups == pick, -2147483647 - 1, gkey)
            key = tl.where(kept | (key == -2147483647 - 1), key, -2139095041)

        w_tile = tl.zeros([BLOCK_M, K_PAD], dtype=tl.float32)
        i_tile = tl.zeros([BLOCK_M, K_PAD], dtype=tl.int32)
        rsum = tl.zeros([BLOCK_M], dtype=tl.float32)
        for j in range(0, KR):
            best = tl.max(key, axis=1)[:, None]
            pick = tl.min(tl.where(key == best, lanes, N_PAD), axis=1)[:, None]
            chosen = lanes == pick
            w = tl.sum(tl.where(chosen, act, 0.0), axis=1)
            w_tile = tl.where(slots == j, w[:, None], w_tile)
            i_tile = tl.where(slots == j, pick, i_tile)
            rsum += w
            key = tl.where(chosen, -2147483647 - 1, key)

        shared = (slots >= KR) & (slots < K)
        w_tile = tl.where(shared, (rsum / rsf)[:, None], w_tile)
        i_tile = tl.where(shared, N + slots - KR, i_tile)
        if renormalize:
            norm = tl.where(rsum > 0.0, rsum, 1.0)
            w_tile = w_tile / norm[:, None]
        if apply_rsf:
            w_tile = w_tile * rsf
        keep = in_block & (slots < K)
        out = base * K + (rows * K + slots)
        tl.store(weights_ptr + out, w_tile, mask=keep)
        tl.store(indices_ptr + out, i_tile, mask=keep)


# ---------------------------------------------------------------------------------------------
# Host side: validation, launch configuration, the entry


def _int_arg(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return int(value)


def _validate(scores, bias, topk, num_fused_shared_experts, num_expert_group, topk_group):
    """Check the arguments where the reference would raise (or could not run); return
    (M, N, K, KR, G, EPG, topk_group) with G = 1, EPG = N for an ungrouped call."""
    if not isinstance(scores, torch.Tensor) or scores.ndim != 2:
        raise ValueError(f"scores: expected a 2-D tensor [M, N], got "
                         f"{tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__}")
    if scores.dtype not in _SCORE_DTYPES:
        raise TypeError(f"scores: expected float32, bfloat16 or float16, got {scores.dtype}")
    M, N = scores.shape
    if not isinstance(bias, torch.Tensor) or bias.ndim != 1 or bias.shape[0] != N:
        raise ValueError(f"bias: expected a 1-D tensor of N = {N} elements, got "
                         f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    if bias.dtype not in _BIAS_DTYPES:
        raise TypeError(f"bias: expected a floating dtype, got {bias.dtype}")
    K = _int_arg("topk", topk)
    S = _int_arg("num_fused_shared_experts", num_fused_shared_experts)
    KR = K - S
    if S < 0 or not 0 <= KR <= N:
        # torch.topk raises for KR < 0 or KR > N, and a negative S cannot fill the outputs
        raise ValueError(f"topk = {K}, num_fused_shared_experts = {S}: need 0 <= S and "
                         f"0 <= topk - S <= N = {N}")
    G = _int_arg("num_expert_group", num_expert_group)
    tg = _int_arg("topk_group", topk_group)
    if G > 1:
        if N % G or N // G < 2:
            # the reference's view(M, G, N // G) and its top-2 within each group raise here
            raise ValueError(f"num_expert_group = {G}: N = {N} must be a multiple of it with at least "
                             f"two experts a group")
        if not 1 <= tg <= G:
            raise ValueError(f"topk_group = {tg}: expected 1 <= topk_group <= num_expert_group = {G}")
        EPG = N // G
    else:
        G, EPG, tg = 1, N, 1                               # the reference ignores groups when G <= 1
    if N and ((N - 1) * scores.stride(1) >= _INT32_LIMIT or (N - 1) * bias.stride(0) >= _INT32_LIMIT):
        raise ValueError(f"scores/bias: a row's extent must stay below 2^31 elements "
                         f"(strides {scores.stride()}, {bias.stride()})")
    return M, N, K, KR, G, EPG, tg


def _scalars(scoring_func, renormalize, routed_scaling_factor, apply_routed_scaling_factor_on_output,
             moe_softcapping):
    """(SCORING, SOFTCAP, rsf, softcap, renormalize, apply) as the reference reads its options:
    "sigmoid" and "sqrtsoftplus" by exact name, anything else the softmax branch; rsf None = 1.0;
    the flags by truthiness; the softcap only on the softmax branch, when nonzero."""
    scoring = 0 if scoring_func == "sigmoid" else 1 if scoring_func == "sqrtsoftplus" else 2
    rsf = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    softcap = float(moe_softcapping)
    return scoring, scoring == 2 and softcap != 0.0, rsf, softcap, int(bool(renormalize)), \
        int(bool(apply_routed_scaling_factor_on_output))


def _outputs(scores, M, K):
    return (torch.empty((M, K), dtype=torch.float32, device=scores.device),
            torch.empty((M, K), dtype=torch.int32, device=scores.device))


def grouped_config(M, G, EPG, K):
    """(BLOCK_M, G_PAD, E_PAD, K_PAD, num_warps) of the grouped design.

    Each group padded to E_PAD = next_power_of_2(N / G) lanes, G_PAD = next_power_of_2(G)
    groups; BLOCK_M rows fill up to _MAX_TILE lanes of tile (never more rows than M), so the
    judge's N = 256 rows come 8 to a program; one warp per 512 lanes of tile, at most 4 (more
    is a portability risk on Enflame). Chosen by reasoning, not measured on a GPU."""
    G_PAD, E_PAD = _next_pow2(G), _next_pow2(EPG)
    lanes = G_PAD * E_PAD
    BLOCK_M = max(1, min(_next_pow2(max(M, 1)), _MAX_TILE // lanes))
    return BLOCK_M, G_PAD, E_PAD, _next_pow2(max(K, 1)), max(1, min(4, BLOCK_M * lanes // 512))


def flat_config(M, N, G, K):
    """(BLOCK_M, N_PAD, G_PAD, K_PAD, num_warps) of the flat design (as grouped_config, a row
    padded to N_PAD = next_power_of_2(N) lanes as a whole)."""
    N_PAD = _next_pow2(max(N, 1))
    BLOCK_M = max(1, min(_next_pow2(max(M, 1)), _MAX_TILE // N_PAD))
    return BLOCK_M, N_PAD, _next_pow2(G), _next_pow2(max(K, 1)), max(1, min(4, BLOCK_M * N_PAD // 512))


def moe_fused_gate_grouped(scores, bias, topk, scoring_func="sigmoid", num_fused_shared_experts=0,
                           renormalize=True, routed_scaling_factor=1.0, apply_routed_scaling_factor_on_output=False,
                           moe_softcapping=0.0, num_expert_group=1, topk_group=1):
    """The router with groups as a tile axis. Returns (weights [M, topk] float32, indices [M, topk] int32)."""
    M, N, K, KR, G, EPG, tg = _validate(scores, bias, topk, num_fused_shared_experts, num_expert_group, topk_group)
    scoring, softcap_on, rsf, softcap, renorm, apply = _scalars(
        scoring_func, renormalize, routed_scaling_factor, apply_routed_scaling_factor_on_output, moe_softcapping)
    weights, indices = _outputs(scores, M, K)
    if M == 0 or K == 0:
        return weights, indices                            # nothing to compute (the reference's shapes)
    BLOCK_M, G_PAD, E_PAD, K_PAD, num_warps = grouped_config(M, G, EPG, K)
    # Launch: a 1-D grid of row blocks, capped at _MAX_PROGRAMS (grid-stride beyond); the outputs
    # are the contiguous tensors allocated above; num_stages=1: nothing to pipeline.
    _grouped_kernel[(min(_cdiv(M, BLOCK_M), _MAX_PROGRAMS),)](
        scores, scores.stride(0), scores.stride(1),
        bias, bias.stride(0),
        weights, indices,
        M, N, G, EPG, tg, KR, K,
        rsf, softcap, renorm, apply,
        BLOCK_M=BLOCK_M, G_PAD=G_PAD, E_PAD=E_PAD, K_PAD=K_PAD,
        SCORING=scoring, SOFTCAP=softcap_on, GROUPED=G > 1,
        ROW_OFFSETS_INT64=(BLOCK_M - 1) * scores.stride(0) + (N - 1) * scores.stride(1) >= _INT32_LIMIT,
        num_warps=num_warps, num_stages=1,
    )
    return weights, indices


def moe_fused_gate_flat(scores, bias, topk, scoring_func="sigmoid", num_fused_shared_experts=0,
                        renormalize=True, routed_scaling_factor=1.0, apply_routed_scaling_factor_on_output=False,
                        moe_softcapping=0.0, num_expert_group=1, topk_group=1):
    """The router on flat rows, a loop over groups. Returns (weights [M, topk] float32, indices [M, topk] int32)."""
    M, N, K, KR, G, EPG, tg = _validate(scores, bias, topk, num_fused_shared_experts, num_expert_group, topk_group)
    scoring, softcap_on, rsf, softcap, renorm, apply = _scalars(
        scoring_func, renormalize, routed_scaling_factor, apply_routed_scaling_factor_on_output, moe_softcapping)
    weights, indices = _outputs(scores, M, K)
    if M == 0 or K == 0:
        return weights, indices
    BLOCK_M, N_PAD, G_PAD, K_PAD, num_warps = flat_config(M, N, G, K)
    _flat_kernel[(min(_cdiv(M, BLOCK_M), _MAX_PROGRAMS),)](
        scores, scores.stride(0), scores.stride(1),
        bias, bias.stride(0),
        weights, indices,
        M, N, G, EPG, tg, KR, K,
        rsf, softcap, renorm, apply,
        BLOCK_M=BLOCK_M, N_PAD=N_PAD, G_PAD=G_PAD, K_PAD=K_PAD,
        SCORING=scoring, SOFTCAP=softcap_on, GROUPED=G > 1,
        ROW_OFFSETS_INT64=(BLOCK_M - 1) * scores.stride(0) + (N - 1) * scores.stride(1) >= _INT32_LIMIT,
        num_warps=num_warps, num_stages=1,
    )
    return weights, indices


def moe_fused_gate(scores, bias, topk, scoring_func="sigmoid", num_fused_shared_experts=0, renormalize=True,
                   routed_scaling_factor=1.0, apply_routed_scaling_factor_on_output=False, moe_softcapping=0.0,
                   num_expert_group=1, topk_group=1):
    """The entry the judge calls, by keyword -> (weights [M, topk] float32, indices [M, topk] int32).

    The grouped design for every shape: padding each group on its own never costs more than
    twice the lanes of a flat row (ceil(log2 G) + ceil(log2 N/G) <= ceil(log2 N) + 1), and its
    group scores take one reduction each where the flat design loops over the groups.
    """
    return moe_fused_gate_grouped(
        scores=scores, bias=bias, topk=topk, scoring_func=scoring_func,
        num_fused_shared_experts=num_fused_shared_experts, renormalize=renormalize,
        routed_scaling_factor=routed_scaling_factor,
        apply_routed_scaling_factor_on_output=apply_routed_scaling_factor_on_output,
        moe_softcapping=moe_softcapping, num_expert_group=num_expert_group, topk_group=topk_group)


reference = moe_fused_gate  # the entry name the competition imports

# Both designs are fuzzed (oracles/submission/loader.py). A tuple, not a dict: the judge's security scan
# rejects dict and set globals, and this file is meant to be submittable as it is.
IMPLEMENTATIONS = (
    ("grouped", moe_fused_gate_grouped),
    ("flat", moe_fused_gate_flat),
)
moe_fused_gate = moe_fused_gate_grouped  # the changed design
