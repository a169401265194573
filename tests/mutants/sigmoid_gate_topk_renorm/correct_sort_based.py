"""sigmoid_gate_topk_renorm, written from the contract alone (a correct variant).

Top k without iteration: each routed lane's float32 score is mapped to an order-preserving int32
key (NaN -> INT32_MAX, above +inf; padding lanes -> INT32_MIN, below -inf), packed with its lane
into one int64 (key << 32 | lane: unique, and among equal scores the HIGHER lane is larger), and
tl.topk (a bitonic sort) returns the K_PAD largest in descending order; the first k are stored.
A grid-stride loop walks the tokens; any logits/bias strides, S == 0 and T == 0 are handled.
global_scale (0-dim or [1] tensor, any device, or a float) is read on the host.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gate_sorted_kernel(
    logits_ptr, bias_ptr,
    routed_w_ptr, indices_ptr, shared_w_ptr,
    n_tokens, n_routed, n_shared, k,
    stride_lt, stride_lg, stride_b,
    stride_wt, stride_wk, stride_it, stride_ik, stride_st, stride_ss,
    scale_a, scale_b,
    N_PAD: tl.constexpr, K_PAD: tl.constexpr, S_PAD: tl.constexpr,
):
    start = tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0).to(tl.int64)

    lanes = tl.arange(0, N_PAD)
    valid = lanes < n_routed
    b = tl.load(bias_ptr + lanes * stride_b, mask=valid, other=0.0).to(tl.float32)
    slots = tl.arange(0, K_PAD)
    slot_ok = slots < k
    s_lanes = tl.arange(0, S_PAD)
    s_ok = s_lanes < n_shared

    for t in range(start, n_tokens, step):
        row = logits_ptr + t * stride_lt
        x = tl.load(row + lanes * stride_lg, mask=valid, other=0.0).to(tl.float32)
        score = tl.sigmoid(x) + b

        bits = score.to(tl.int32, bitcast=True)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
        key = tl.where(score != score, 2147483647, key)
        key = tl.where(valid, key, -2147483648)
        packed = (key.to(tl.int64) << 32) | lanes.to(tl.int64)

        best = tl.topk(packed, K_PAD)          # [K_PAD], descending, distinct
        chosen = best.to(tl.int32)             # the low 32 bits: the lane

        xa = tl.load(row + chosen * stride_lg, mask=slot_ok, other=0.0).to(tl.float32)
        pa = tl.where(slot_ok, tl.sigmoid(xa), 0.0)
        xs = tl.load(row + (n_routed + s_lanes) * stride_lg, mask=s_ok, other=0.0).to(tl.float32)
        ps = tl.where(s_ok, tl.sigmoid(xs), 0.0)
        denom = tl.sum(pa, axis=0) + tl.sum(ps, axis=0)

        wa = pa / denom * scale_a * scale_b
        ws = ps / denom * scale_a * scale_b
        tl.store(indices_ptr + t * stride_it + slots * stride_ik, chosen, mask=slot_ok)
        tl.store(routed_w_ptr + t * stride_wt + slots * stride_wk, wa.to(routed_w_ptr.dtype.element_ty), mask=slot_ok)
        tl.store(shared_w_ptr + t * stride_st + s_lanes * stride_ss, ws.to(shared_w_ptr.dtype.element_ty), mask=s_ok)


def sigmoid_gate_topk_renorm(logits, k, n_shared_experts, route_scale, global_scale, bias):
    if logits.dim() != 2:
        raise ValueError("logits must be 2-D [T, N + S]")
    if logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"unsupported logits dtype {logits.dtype}")
    T, G = logits.shape
    S = int(n_shared_experts)
    N = G - S
    k = int(k)
    if S < 0 or N < 1 or not 1 <= k <= N:
        raise ValueError(f"bad sizes: N={N}, S={S}, k={k}")
    if bias.dim() != 1 or bias.shape[0] != N:
        raise ValueError("bias must be [N]")
    if isinstance(global_scale, torch.Tensor) and global_scale.numel() != 1:
        raise ValueError("global_scale must hold one value")

    dev = logits.device
    routed_w = torch.empty((T, k), dtype=logits.dtype, device=dev)
    indices = torch.empty((T, k), dtype=torch.int32, device=dev)
    shared_w = torch.empty((T, S), dtype=logits.dtype, device=dev)
    if T == 0:
        return routed_w, indices, shared_w

    gs = float(global_scale)  # a host read of one float32 value (a sync on a GPU tensor)
    n_programs = min(T, 64)
    # tl.topk of one element does not compile on an H200 (Triton 3.6): at least 2, within N_PAD
    k_pad = max(2, triton.next_power_of_2(k))
    n_pad = max(k_pad, triton.next_power_of_2(N))
    _gate_sorted_kernel[(n_programs,)](
        logits, bias,
        routed_w, indices, shared_w,
        T, N, S, k,
        logits.stride(0), logits.stride(1), bias.stride(0),
        routed_w.stride(0), routed_w.stride(1), indices.stride(0), indices.stride(1),
        shared_w.stride(0), shared_w.stride(1),
        float(route_scale), gs,
        N_PAD=n_pad, K_PAD=k_pad, S_PAD=triton.next_power_of_2(max(S, 1)),
    )
    return routed_w, indices, shared_w
