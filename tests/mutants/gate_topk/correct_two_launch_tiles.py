"""gate_topk, correct variant: two launches through a workspace.

Launch 1, one program per (block of up to 8 rows, tile of 128 columns): each row's top
min(k, 128) of the tile as (key, column) pairs into an int32 workspace [M, tiles, KT_PAD] (empty slots: INT32_MIN, INT32_MAX).
Launch 2, one program per row: k steps over all the row's candidates (largest key, then the
smallest column holding it), each chosen value loaded from x at its column. Every element of the
row's top k is in its tile's top min(k, 128), so the candidates hold the answer. Keys as in the
bundled kernel: NaN -> INT32_MAX above +inf, -0.0 -> +0.0, negative magnitudes flipped.
"""

import numbers

import torch
import triton
import triton.language as tl


def _next_pow2(n):
    return 1 << (n - 1).bit_length() if n > 1 else 1


@triton.jit
def _keys(x):
    v = x.to(tl.float32)  # upcast: exact
    bits = v.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = tl.where(v != v, 0x7FFFFFFF, key)
    return tl.where(v == 0.0, 0, key)


@triton.jit
def _tile_kernel(x_ptr, stride_xm, stride_xn, ws_key_ptr, ws_col_ptr, M, N, kt, tiles,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KT_PAD: tl.constexpr):
    """Program (row block b, tile t): BLOCK_M rows of tile t, each row's top kt of the tile."""
    pid = tl.program_id(0)
    b = pid // tiles
    t = pid % tiles
    rows = b * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = t * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    in_rows = rows < M
    live = in_rows & (cols < N)
    x = tl.load(x_ptr + rows.to(tl.int64) * stride_xm + cols * stride_xn, mask=live, other=0.0)
    key = tl.where(live, _keys(x), -2147483647 - 1)
    slots = tl.arange(0, KT_PAD)[None, :]
    out_key = tl.full([BLOCK_M, KT_PAD], -2147483647 - 1, dtype=tl.int32)
    out_col = tl.full([BLOCK_M, KT_PAD], 2147483647, dtype=tl.int32)
    for i in range(0, kt):
        best = tl.max(key, axis=1)[:, None]
        pick = tl.min(tl.where(key == best, cols, 2147483647), axis=1)[:, None]
        # a tile shorter than kt runs out of live lanes: those slots stay empty
        take = (slots == i) & (best > -2147483647 - 1)
        out_key = tl.where(take, best, out_key)
        out_col = tl.where(take, pick, out_col)
        key = tl.where(cols == pick, -2147483647 - 1, key)
    ws = (rows.to(tl.int64) * tiles + t) * KT_PAD + slots
    tl.store(ws_key_ptr + ws, out_key, mask=in_rows)
    tl.store(ws_col_ptr + ws, out_col, mask=in_rows)


@triton.jit
def _merge_kernel(x_ptr, stride_xm, stride_xn, ws_key_ptr, ws_col_ptr, values_ptr, indices_ptr, k, tiles,
                  C_PAD: tl.constexpr, KT_PAD: tl.constexpr):
    m = tl.program_id(0)
    c = tl.arange(0, C_PAD)
    live = c < tiles * KT_PAD
    base = tl.cast(m, tl.int64) * tiles * KT_PAD
    key = tl.load(ws_key_ptr + base + c, mask=live, other=-2147483647 - 1)
    col = tl.load(ws_col_ptr + base + c, mask=live, other=2147483647)
    row = x_ptr + tl.cast(m, tl.int64) * stride_xm
    for i in range(0, k):
        best = tl.max(key, axis=0)
        pick = tl.min(tl.where(key == best, col, 2147483647), axis=0)
        out = tl.cast(m, tl.int64) * k + i
        tl.store(values_ptr + out, tl.load(row + pick * stride_xn))
        tl.store(indices_ptr + out, pick)
        key = tl.where(col == pick, -2147483647 - 1, key)


def gate_topk(x, k):
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError("x: expected a 2-D float32, bfloat16 or float16 tensor")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k <= x.shape[1]:
        raise ValueError(f"k: expected an int in [0, {x.shape[1]}], got {k!r}")
    M, N = x.shape
    k = int(k)
    values = torch.empty((M, k), dtype=x.dtype, device=x.device)
    indices = torch.empty((M, k), dtype=torch.int32, device=x.device)
    if M == 0 or k == 0:
        return values, indices
    BLOCK_N = 128
    BLOCK_M = max(1, min(_next_pow2(M), 8))
    tiles = triton.cdiv(N, BLOCK_N)
    kt = min(k, BLOCK_N)
    KT_PAD = _next_pow2(kt)
    ws_key = torch.empty((M, tiles, KT_PAD), dtype=torch.int32, device=x.device)
    ws_col = torch.empty((M, tiles, KT_PAD), dtype=torch.int32, device=x.device)
    _tile_kernel[(triton.cdiv(M, BLOCK_M) * tiles,)](x, x.stride(0), x.stride(1), ws_key, ws_col, M, N, kt, tiles,
                                                     BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, KT_PAD=KT_PAD, num_warps=2)
    _merge_kernel[(M,)](x, x.stride(0), x.stride(1), ws_key, ws_col, values, indices, k, tiles,
                        C_PAD=_next_pow2(tiles * KT_PAD), KT_PAD=KT_PAD, num_warps=1)
    return values, indices


reference = gate_topk
