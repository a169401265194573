"""hc_head, correct variant: the hidden dimension split across programs, two launches.

Launch 1, grid (T, n_chunks): each program reads one CHUNK-wide column slice of every stream of
one token and writes its partial sum of squares and its partial hc_mult dot products into a
float32 workspace [T, n_chunks, HC_PAD + 1]. Launch 2, same grid: each program reduces all of its
token's partials (in a fixed order), forms the gates and writes its own slice of y. Any strides,
any hc_mult >= 1 (padded to a power of two with masks), T == 0 (nothing to launch).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _partials_kernel(
    x_ptr, w_ptr, ws_ptr,
    hc_mult, hidden, n_chunks,
    sx_t, sx_h, sx_d, sw_j, sw_k,
    HC_PAD: tl.constexpr, CHUNK: tl.constexpr, WS_W: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    jj = tl.arange(0, HC_PAD)                       # hc_fn row (output stream)
    ss = tl.arange(0, HC_PAD)                       # input stream
    cols = c * CHUNK + tl.arange(0, CHUNK)
    s_ok = ss < hc_mult
    c_ok = cols < hidden
    xm = s_ok[:, None] & c_ok[None, :]
    xv = tl.load(x_ptr + t * sx_t + ss[:, None] * sx_h + cols[None, :] * sx_d, mask=xm, other=0.0)
    xv = xv.to(tl.float32)                          # [HC_PAD(s), CHUNK]
    part_sq = tl.sum(tl.sum(xv * xv, axis=1), axis=0)

    k = ss[None, :, None] * hidden + cols[None, None, :]          # flattened column of hc_fn
    wm = (jj < hc_mult)[:, None, None] & xm[None, :, :]
    wv = tl.load(w_ptr + jj[:, None, None] * sw_j + k * sw_k, mask=wm, other=0.0)
    part_dot = tl.sum(tl.sum(wv * xv[None, :, :], axis=2), axis=1)  # [HC_PAD(j)]

    slot = ws_ptr + (t * n_chunks + c) * WS_W
    tl.store(slot + jj, part_dot)                   # lanes 0 .. HC_PAD-1: the dots (padding: 0)
    tl.store(slot + HC_PAD, part_sq)                # lane HC_PAD: the sum of squares


@triton.jit
def _gate_sum_kernel(
    x_ptr, ws_ptr, scale_ptr, base_ptr, y_ptr,
    hc_mult, hidden, n_chunks, norm_eps, hc_eps,
    sx_t, sx_h, sx_d, sy_t, sy_d, sb,
    HC_PAD: tl.constexpr, CHUNK: tl.constexpr, WS_W: tl.constexpr, NC_PAD: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    q = tl.arange(0, NC_PAD)                        # chunk index of a partial
    lane = tl.arange(0, WS_W)                       # workspace lane
    q_ok = q < n_chunks
    parts = tl.load(ws_ptr + (t * n_chunks + q[:, None]) * WS_W + lane[None, :],
                    mask=q_ok[:, None] & (lane[None, :] <= HC_PAD), other=0.0)   # [NC_PAD, WS_W]
    totals = tl.sum(parts, axis=0)                  # [WS_W]
    sumsq = tl.sum(tl.where(lane == HC_PAD, totals, 0.0), axis=0)
    K = hc_mult * hidden
    r = 1.0 / tl.sqrt_rn(sumsq / K + norm_eps)

    j_ok = lane < hc_mult
    mixes = totals * r
    z = mixes * tl.load(scale_ptr) + tl.load(base_ptr + lane * sb, mask=j_ok, other=0.0)
    e = tl.exp(-tl.abs(z))                          # in (0, 1]: no overflow on either side
    sig = tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    pre = tl.where(j_ok, sig + hc_eps, 0.0)         # [WS_W], streams past hc_mult weigh nothing

    cols = c * CHUNK + tl.arange(0, CHUNK)
    c_ok = cols < hidden
    xm = j_ok[:, None] & c_ok[None, :]
    xv = tl.load(x_ptr + t * sx_t + lane[:, None] * sx_h + cols[None, :] * sx_d, mask=xm, other=0.0)
    prod = tl.where(xm, pre[:, None] * xv.to(tl.float32), 0.0)
    yv = tl.sum(prod, axis=0)
    tl.store(y_ptr + t * sy_t + cols * sy_d, yv.to(y_ptr.dtype.element_ty), mask=c_ok)


def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    assert x.dim() == 3, "x must be [T, hc_mult, hidden]"
    T, hc_mult, hidden = x.shape
    assert hc_fn.shape == (hc_mult, hc_mult * hidden), "hc_fn must be [hc_mult, hc_mult * hidden]"
    assert hc_base.shape == (hc_mult,), "hc_base must be [hc_mult]"
    assert hc_scale.numel() == 1, "hc_scale must hold one value"
    y = torch.empty((T, hidden), dtype=x.dtype, device=x.device)
    if T == 0 or hidden == 0:
        return y                                    # an empty output: nothing to compute
    assert hc_mult >= 1, "hc_mult must be at least 1"
    hc_pad = triton.next_power_of_2(hc_mult)
    ws_w = triton.next_power_of_2(hc_pad + 1)       # hc_pad dots and one sum of squares
    chunk = min(max(triton.next_power_of_2(hidden), 16), 256)
    n_chunks = triton.cdiv(hidden, chunk)
    nc_pad = triton.next_power_of_2(n_chunks)
    ws = torch.empty((T, n_chunks, ws_w), dtype=torch.float32, device=x.device)
    grid = (T, n_chunks)
    _partials_kernel[grid](
        x, hc_fn, ws,
        hc_mult, hidden, n_chunks,
        x.stride(0), x.stride(1), x.stride(2), hc_fn.stride(0), hc_fn.stride(1),
        HC_PAD=hc_pad, CHUNK=chunk, WS_W=ws_w,
    )
    _gate_sum_kernel[grid](
        x, ws, hc_scale, hc_base, y,
        hc_mult, hidden, n_chunks, float(norm_eps), float(hc_eps),
        x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1), hc_base.stride(0),
        HC_PAD=hc_pad, CHUNK=chunk, WS_W=ws_w, NC_PAD=nc_pad,
    )
    return y
