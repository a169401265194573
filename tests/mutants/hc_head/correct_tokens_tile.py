"""hc_head, correct variant: BLOCK_T tokens per program as a 2-D [BLOCK_T, BLOCK_D] tile.

The streams are unrolled with tl.static_range (HC = hc_mult is a constexpr). Stage 1 sweeps the
row stream by stream: each [BLOCK_T, BLOCK_D] slice of x meets the matching [HC_PAD, BLOCK_D]
columns of hc_fn in a [BLOCK_T, HC_PAD, BLOCK_D] product, giving the [BLOCK_T, HC_PAD] dots and
the per-token sum of squares. Stage 2 turns them into gates (1.0 / tl.sqrt, tl.sigmoid) and sweeps
again, column block by column block, summing the gated streams. int64 offsets, any strides.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _hc_head_tokens_kernel(
    x_ptr, w_ptr, scale_ptr, base_ptr, y_ptr,
    T, hidden, norm_eps, hc_eps,
    sx_t, sx_h, sx_d, sw_j, sw_k, sb, sy_t, sy_d,
    HC: tl.constexpr, HC_PAD: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    tok = pid * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)     # [BLOCK_T] int64
    t_ok = tok < T
    jj = tl.arange(0, HC_PAD)
    j_ok = jj < HC
    dd = tl.arange(0, BLOCK_D)
    x_tok = x_ptr + tok[:, None] * sx_t                            # [BLOCK_T, 1] row bases

    sumsq = tl.zeros([BLOCK_T], dtype=tl.float32)
    dots = tl.zeros([BLOCK_T, HC_PAD], dtype=tl.float32)
    for s in tl.static_range(HC):
        for d0 in range(0, hidden, BLOCK_D):
            cols = d0 + dd
            c_ok = cols < hidden
            m = t_ok[:, None] & c_ok[None, :]
            xv = tl.load(x_tok + s * sx_h + cols[None, :] * sx_d, mask=m, other=0.0).to(tl.float32)
            sumsq += tl.sum(xv * xv, axis=1)
            k = s * hidden + cols                                  # flattened hc_fn column
            wv = tl.load(w_ptr + jj[:, None] * sw_j + k[None, :] * sw_k,
                         mask=j_ok[:, None] & c_ok[None, :], other=0.0)     # [HC_PAD, BLOCK_D]
            dots += tl.sum(xv[:, None, :] * wv[None, :, :], axis=2)

    K = HC * hidden
    r = 1.0 / tl.sqrt(sumsq / K + norm_eps)                        # [BLOCK_T]
    mixes = dots * r[:, None]
    base = tl.load(base_ptr + jj * sb, mask=j_ok, other=0.0)
    z = mixes * tl.load(scale_ptr) + base[None, :]
    pre = tl.sigmoid(z) + hc_eps                                   # [BLOCK_T, HC_PAD]

    for d0 in range(0, hidden, BLOCK_D):
        cols = d0 + dd
        c_ok = cols < hidden
        m = t_ok[:, None] & c_ok[None, :]
        acc = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
        for s in tl.static_range(HC):
            gate = tl.sum(tl.where(jj[None, :] == s, pre, 0.0), axis=1)       # pre[:, s]
            xv = tl.load(x_tok + s * sx_h + cols[None, :] * sx_d, mask=m, other=0.0).to(tl.float32)
            acc += gate[:, None] * xv
        tl.store(y_ptr + tok[:, None] * sy_t + cols[None, :] * sy_d, acc.to(y_ptr.dtype.element_ty), mask=m)


def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    assert x.dim() == 3, "x must be [T, hc_mult, hidden]"
    T, hc_mult, hidden = x.shape
    assert hc_fn.shape == (hc_mult, hc_mult * hidden), "hc_fn must be [hc_mult, hc_mult * hidden]"
    assert hc_base.shape == (hc_mult,), "hc_base must be [hc_mult]"
    assert hc_scale.numel() == 1, "hc_scale must hold one value"
    y = torch.empty((T, hidden), dtype=x.dtype, device=x.device)
    if T == 0 or hidden == 0:
        return y                                                   # nothing to compute
    assert hc_mult >= 1, "hc_mult must be at least 1"
    block_t = 4
    block_d = min(max(triton.next_power_of_2(hidden), 16), 128)
    grid = (triton.cdiv(T, block_t),)
    _hc_head_tokens_kernel[grid](
        x, hc_fn, hc_scale, hc_base, y,
        T, hidden, float(norm_eps), float(hc_eps),
        x.stride(0), x.stride(1), x.stride(2), hc_fn.stride(0), hc_fn.stride(1), hc_base.stride(0),
        y.stride(0), y.stride(1),
        HC=hc_mult, HC_PAD=triton.next_power_of_2(hc_mult), BLOCK_T=block_t, BLOCK_D=block_d,
    )
    return y
