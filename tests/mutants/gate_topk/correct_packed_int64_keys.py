"""gate_topk, correct variant: one reduction a step over unique int64 keys.

Each element's key is its order-preserving int32 image (NaN -> INT32_MAX above +inf, -0.0 ->
+0.0, negative magnitudes flipped) in the high 32 bits and N_PAD - 1 - column in the low 32 bits:
all keys of a row differ, a larger value has a larger key, and among equal values the smaller
column has the larger key. So a step is one tl.max; the chosen lane is the one whose key equals
it (exactly one), decoded from the low bits, and only that key is retired (INT64_MIN). BLOCK_M
rows a program; the values are the loaded tile itself, stored bit for bit.
"""

import numbers

import torch
import triton
import triton.language as tl


def _next_pow2(n):
    return 1 << (n - 1).bit_length() if n > 1 else 1


@triton.jit
def _packed_kernel(x_ptr, stride_xm, stride_xn, values_ptr, indices_ptr, M, N, k,
                   BLOCK_M: tl.constexpr, N_PAD: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    lanes = tl.arange(0, N_PAD)[None, :]
    in_rows = rows < M
    mask = in_rows & (lanes < N)
    x = tl.load(x_ptr + rows.to(tl.int64) * stride_xm + lanes * stride_xn, mask=mask, other=0.0)
    v = x.to(tl.float32)  # upcast: exact
    bits = v.to(tl.int32, bitcast=True)
    key32 = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key32 = tl.where(v != v, 0x7FFFFFFF, key32)   # every NaN above +inf, all equal
    key32 = tl.where(v == 0.0, 0, key32)          # -0.0 == +0.0
    key = (key32.to(tl.int64) << 32) | (N_PAD - 1 - lanes).to(tl.int64)
    key = tl.where(mask, key, -9223372036854775807 - 1)  # padding never wins while k <= N
    for i in range(0, k):
        best = tl.max(key, axis=1)[:, None]
        low = best - ((best >> 32) << 32)  # the low 32 bits (an arithmetic shift: any sign)
        lane = (N_PAD - 1 - low).to(tl.int32)  # the unique lane holding the best key
        out = rows.to(tl.int64) * k + i
        chosen = lanes == lane
        # the chosen lane's value: a masked max over the tile's bits would need a float max, so
        # the value is stored from the lane that holds it
        tl.store(values_ptr + out + lanes * 0, x, mask=in_rows & chosen)
        tl.store(indices_ptr + out, lane, mask=in_rows)
        key = tl.where(chosen, -9223372036854775807 - 1, key)


def gate_topk(x, k):
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError("x: expected a 2-D float32, bfloat16 or float16 tensor")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k <= x.shape[1]:
        raise ValueError(f"k: expected an int in [0, {x.shape[1]}], got {k!r}")
    M, N = x.shape
    values = torch.empty((M, k), dtype=x.dtype, device=x.device)
    indices = torch.empty((M, k), dtype=torch.int32, device=x.device)
    if M == 0 or k == 0:
        return values, indices
    N_PAD = _next_pow2(N)
    BLOCK_M = max(1, min(_next_pow2(M), 1024 // N_PAD))
    _packed_kernel[(triton.cdiv(M, BLOCK_M),)](x, x.stride(0), x.stride(1), values, indices, M, N, int(k),
                                               BLOCK_M=BLOCK_M, N_PAD=N_PAD, num_warps=4 if N_PAD >= 512 else 1)
    return values, indices


reference = gate_topk
