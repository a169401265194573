"""sigmoid_gate_topk_renorm, written from the contract alone (a correct variant).

One program per token. global_scale reaches the kernel as a POINTER (a 0-dim device tensor) and
is loaded there. The top k is taken by k passes of: the largest live score (NaN above every
number), the smallest live lane holding it, then that lane is marked dead in a live-lane mask
(never by overwriting its score with a sentinel value, so -inf / NaN / tied lanes stay choosable).

The wrapper refuses, with an assert, what lies outside the judge's domain and this kernel's
layout assumptions: non-contiguous logits, a global_scale that is not a 0-dim tensor on the
logits' device, no shared expert (S == 0) and an empty batch (T == 0).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _sigmoid_f32(x):
    # 1 / (1 + e^-x): e^-x overflows to +inf for very negative x and the result is 0, never NaN.
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _gate_one_token_kernel(
    logits_ptr, bias_ptr, gscale_ptr,
    routed_w_ptr, indices_ptr, shared_w_ptr,
    route_scale, n_routed, n_shared, k, row_stride,
    N_PAD: tl.constexpr, K_PAD: tl.constexpr, S_PAD: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    row = logits_ptr + tok * row_stride

    lanes = tl.arange(0, N_PAD)
    valid = lanes < n_routed
    x = tl.load(row + lanes, mask=valid, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + lanes, mask=valid, other=0.0).to(tl.float32)
    score = _sigmoid_f32(x) + b
    score_is_nan = score != score

    slots = tl.arange(0, K_PAD)
    picked = tl.zeros([K_PAD], dtype=tl.int32)
    probs = tl.zeros([K_PAD], dtype=tl.float32)
    live = valid
    for i in range(k):
        nan_live = live & score_is_nan
        n_nan = tl.sum(nan_live.to(tl.int32), axis=0)
        top = tl.max(tl.where(live & (score == score), score, float("-inf")), axis=0)
        cand = tl.where(n_nan > 0, nan_live, live & (score == top))
        lane = tl.min(tl.where(cand, lanes, N_PAD), axis=0)
        live = live & (lanes != lane)
        x_lane = tl.load(row + lane).to(tl.float32)
        picked = tl.where(slots == i, lane, picked)
        probs = tl.where(slots == i, _sigmoid_f32(x_lane), probs)

    s_lanes = tl.arange(0, S_PAD)
    s_valid = s_lanes < n_shared
    xs = tl.load(row + n_routed + s_lanes, mask=s_valid, other=0.0).to(tl.float32)
    ps = tl.where(s_valid, _sigmoid_f32(xs), 0.0)

    total = tl.sum(probs, axis=0) + tl.sum(ps, axis=0)
    gs = tl.load(gscale_ptr).to(tl.float32)
    w_routed = probs / total * route_scale * gs
    w_shared = ps / total * route_scale * gs

    k_valid = slots < k
    tl.store(routed_w_ptr + tok * k + slots, w_routed.to(routed_w_ptr.dtype.element_ty), mask=k_valid)
    tl.store(indices_ptr + tok * k + slots, picked, mask=k_valid)
    tl.store(shared_w_ptr + tok * n_shared + s_lanes, w_shared.to(shared_w_ptr.dtype.element_ty), mask=s_valid)


def sigmoid_gate_topk_renorm(logits, k, n_shared_experts, route_scale, global_scale, bias):
    assert logits.dim() == 2, "logits must be [T, N + S]"
    assert logits.is_contiguous(), "this kernel reads contiguous logits only"
    assert logits.dtype in (torch.bfloat16, torch.float16, torch.float32)
    assert isinstance(global_scale, torch.Tensor), "global_scale must be a tensor"
    assert global_scale.dim() == 0 and global_scale.device == logits.device, \
        "global_scale must be a 0-dim tensor on the logits' device"
    T, G = logits.shape
    S = int(n_shared_experts)
    N = G - S
    k = int(k)
    assert S >= 1, "at least one shared expert"
    assert T > 0, "at least one token"
    assert 1 <= k <= N
    assert bias.dim() == 1 and bias.shape[0] == N and bias.is_contiguous() and bias.device == logits.device

    routed_w = torch.empty((T, k), dtype=logits.dtype, device=logits.device)
    indices = torch.empty((T, k), dtype=torch.int32, device=logits.device)
    shared_w = torch.empty((T, S), dtype=logits.dtype, device=logits.device)

    _gate_one_token_kernel[(T,)](
        logits, bias, global_scale,
        routed_w, indices, shared_w,
        float(route_scale), N, S, k, G,
        N_PAD=triton.next_power_of_2(N), K_PAD=triton.next_power_of_2(k), S_PAD=triton.next_power_of_2(S),
    )
    return routed_w, indices, shared_w
