"""sigmoid_gate_topk_renorm, written from the contract alone (a correct variant).

Two launches over [BLOCK_T, N_PAD] tiles (BLOCK_T tokens a program):
  1. _scores_kernel writes sel = sigmoid(x) + bias in float32 to a [T, N] workspace;
  2. _select_renorm_kernel reads the workspace, turns each score into a unique int64 key
     (order-preserving int32 image of the float, NaN above +inf, padding below -inf, shifted up 32
     bits, with N_PAD - 1 - lane in the low bits so equal scores favour the lower lane), takes the
     row max k times (retiring exactly the taken key, which is unique), gathers the raw logits of
     the chosen lanes and renormalizes them together with the shared experts.
Any logits/bias strides, S == 0, T == 0, and a 0-dim or [1] global_scale (on the logits' device,
loaded in the kernel) are handled.
"""

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _sigmoid(x):
    # exp2 form; for x << 0 the power overflows to +inf and the result is 0 (never NaN).
    return 1.0 / (1.0 + tl.exp2(-x * LOG2E))


@triton.jit
def _scores_kernel(
    logits_ptr, bias_ptr, scores_ptr,
    n_tokens, n_routed, stride_lt, stride_lg, stride_b,
    BLOCK_T: tl.constexpr, N_PAD: tl.constexpr,
):
    blk = tl.program_id(0).to(tl.int64)
    rows = blk * BLOCK_T + tl.arange(0, BLOCK_T)
    lanes = tl.arange(0, N_PAD)
    row_ok = rows < n_tokens
    lane_ok = lanes < n_routed
    m = row_ok[:, None] & lane_ok[None, :]
    x = tl.load(logits_ptr + rows[:, None] * stride_lt + lanes[None, :] * stride_lg, mask=m, other=0.0)
    b = tl.load(bias_ptr + lanes * stride_b, mask=lane_ok, other=0.0).to(tl.float32)
    sel = _sigmoid(x.to(tl.float32)) + b[None, :]
    tl.store(scores_ptr + rows[:, None] * n_routed + lanes[None, :], sel, mask=m)


@triton.jit
def _select_renorm_kernel(
    scores_ptr, logits_ptr, gscale_ptr,
    routed_w_ptr, indices_ptr, shared_w_ptr,
    n_tokens, n_routed, n_shared, k, stride_lt, stride_lg, route_scale,
    BLOCK_T: tl.constexpr, N_PAD: tl.constexpr, K_PAD: tl.constexpr, S_PAD: tl.constexpr,
):
    blk = tl.program_id(0).to(tl.int64)
    rows = blk * BLOCK_T + tl.arange(0, BLOCK_T)
    row_ok = rows < n_tokens
    lanes = tl.arange(0, N_PAD)
    lane_ok = lanes < n_routed
    m = row_ok[:, None] & lane_ok[None, :]
    sel = tl.load(scores_ptr + rows[:, None] * n_routed + lanes[None, :], mask=m, other=0.0)

    bits = sel.to(tl.int32, bitcast=True)
    key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    key = tl.where(sel != sel, 2147483647, key)
    key = tl.where(lane_ok[None, :], key, -2147483648)
    packed = (key.to(tl.int64) << 32) | (N_PAD - 1 - lanes).to(tl.int64)[None, :]

    slots = tl.arange(0, K_PAD)
    idx_tile = tl.zeros([BLOCK_T, K_PAD], dtype=tl.int32)
    p_tile = tl.zeros([BLOCK_T, K_PAD], dtype=tl.float32)
    row_base = logits_ptr + rows * stride_lt
    for i in range(k):
        top = tl.max(packed, axis=1)                          # [BLOCK_T], unique per row
        lane = (N_PAD - 1) - (top & (N_PAD - 1)).to(tl.int32)
        packed = tl.where(packed == top[:, None], -9223372036854775807 - 1, packed)
        xl = tl.load(row_base + lane * stride_lg, mask=row_ok, other=0.0).to(tl.float32)
        here = (slots == i)[None, :]
        idx_tile = tl.where(here, lane[:, None], idx_tile)
        p_tile = tl.where(here, _sigmoid(xl)[:, None], p_tile)

    s_lanes = tl.arange(0, S_PAD)
    s_ok = row_ok[:, None] & (s_lanes < n_shared)[None, :]
    xs = tl.load(row_base[:, None] + (n_routed + s_lanes)[None, :] * stride_lg, mask=s_ok, other=0.0)
    ps = tl.where(s_ok, _sigmoid(xs.to(tl.float32)), 0.0)

    total = tl.sum(p_tile, axis=1) + tl.sum(ps, axis=1)      # padding slots hold 0
    gs = tl.load(gscale_ptr).to(tl.float32)
    w = p_tile / total[:, None] * route_scale * gs
    ws = ps / total[:, None] * route_scale * gs

    k_ok = row_ok[:, None] & (slots < k)[None, :]
    out = rows[:, None] * k + slots[None, :]
    tl.store(indices_ptr + out, idx_tile, mask=k_ok)
    tl.store(routed_w_ptr + out, w.to(routed_w_ptr.dtype.element_ty), mask=k_ok)
    tl.store(shared_w_ptr + rows[:, None] * n_shared + s_lanes[None, :], ws.to(shared_w_ptr.dtype.element_ty),
             mask=s_ok)


def sigmoid_gate_topk_renorm(logits, k, n_shared_experts, route_scale, global_scale, bias):
    if logits.dim() != 2:
        raise ValueError("logits must be [T, N + S]")
    if logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"unsupported logits dtype {logits.dtype}")
    if not isinstance(global_scale, torch.Tensor) or global_scale.numel() != 1 or global_scale.dim() > 1:
        raise ValueError("global_scale must be a 0-dim or [1] tensor")
    if global_scale.device != logits.device:
        raise ValueError("global_scale must be on the logits' device")
    T, G = logits.shape
    S = int(n_shared_experts)
    N = G - S
    k = int(k)
    if S < 0 or N < 1 or not 1 <= k <= N:
        raise ValueError(f"bad sizes: N={N}, S={S}, k={k}")
    if bias.dim() != 1 or bias.shape[0] != N or bias.device != logits.device:
        raise ValueError("bias must be [N] on the logits' device")

    dev = logits.device
    routed_w = torch.empty((T, k), dtype=logits.dtype, device=dev)
    indices = torch.empty((T, k), dtype=torch.int32, device=dev)
    shared_w = torch.empty((T, S), dtype=logits.dtype, device=dev)
    if T == 0:
        return routed_w, indices, shared_w

    scores = torch.empty((T, N), dtype=torch.float32, device=dev)
    N_PAD = triton.next_power_of_2(N)
    BLOCK_T = 8 if N_PAD <= 256 else 4
    grid = (triton.cdiv(T, BLOCK_T),)
    _scores_kernel[grid](
        logits, bias, scores, T, N, logits.stride(0), logits.stride(1), bias.stride(0),
        BLOCK_T=BLOCK_T, N_PAD=N_PAD,
    )
    _select_renorm_kernel[grid](
        scores, logits, global_scale,
        routed_w, indices, shared_w,
        T, N, S, k, logits.stride(0), logits.stride(1), float(route_scale),
        BLOCK_T=BLOCK_T, N_PAD=N_PAD, K_PAD=triton.next_power_of_2(k), S_PAD=triton.next_power_of_2(max(S, 1)),
    )
    return routed_w, indices, shared_w
