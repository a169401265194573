"""gate_topk: the k largest values of each row of x [M, N], in descending order, and their columns.

    values[m, j]  = x[m, indices[m, j]]                     a copy: the input's own bits, no arithmetic
    indices[m, :] = the columns of the k largest x[m, :],   int32, descending by value;
                    NaN above +inf (torch.topk's order),   among equal values the smaller column first
                    -0.0 equal to +0.0

The order is decided on an int32 key per element, never on the floats themselves (a float max
propagates or drops NaN differently on each backend): x is upcast to float32 (exact for bf16 and
fp16) and its bits mapped to a signed int32 whose order is the float order -- negative floats get
their magnitude bits flipped --, every NaN (either sign, any payload) to INT32_MAX, above the key
of +inf, and -0.0 to the key of +0.0. Equal keys are ties; each step of the selection takes the
largest key, then the smallest column holding it. A lane leaves the selection by a live-lane
mask in the key itself (INT32_MIN, below the key of -inf, -2139095041), never by a value
sentinel: a row of real -inf values is still chosen lane by lane, each lane once, and padding
lanes (columns >= N) never win while k <= N.

Two designs of the same function (both fuzzed, see IMPLEMENTATIONS at the end):

- `gate_topk_rows` (`gate_topk` up to N = 2048): BLOCK_M rows a program as a [BLOCK_M, N_PAD]
  tile, each row's whole width in registers; k steps of (max, then min column) along the rows.
- `gate_topk_streaming` (`gate_topk` beyond): BLOCK_M rows a program, the columns in chunks of
  BLOCK_N; each row's running top k (K_PAD slots of key and column) is merged with a chunk when
  the chunk's best key beats some row's running k-th; the values are gathered from x at the
  end. Its registers do not grow with N.

Only tl.max, tl.min, tl.where, loads and stores: no tl.sort, tl.topk or tl.argmax (Kunlunxin's
Triton has no tl.topk, and competitors' notes ban tl.sort and tl.argmax there), no atomics;
int64 only for block bases (and for row offsets inside a block when they pass 2^31).
"""

import numbers

import torch
import triton
import triton.language as tl

# Programs launched at most; beyond it each program strides over row blocks. 65535 is the
# largest grid that every backend the judge runs accepts.
_MAX_PROGRAMS = 65535
_INT32_LIMIT = 2**31
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# gate_topk uses the whole-row design up to this many padded columns: beyond it a row's tile
# (plus its keys and ranks) no longer fits one program's registers without spilling.
_ROWS_MAX_N_PAD = 2048
# Lanes of one program's [BLOCK_M, N_PAD] tile in the whole-row design (rows_config).
_ROWS_MAX_TILE = 2048


# Host arithmetic for the launch configuration. Not triton.cdiv / triton.next_power_of_2: they are
# constexpr functions and a host call to one costs microseconds, a large share of a small call.
def _cdiv(a, b):
    return -(-a // b)


def _next_pow2(n):
    return 1 << (n - 1).bit_length() if n > 1 else 1


@triton.jit
def _sort_keys(v):
    """float32 v -> int32 key with key(a) > key(b) exactly when torch.topk ranks a above b.

    Finite values and infinities: bits ^ ((bits >> 31) & 0x7FFFFFFF) (an arithmetic shift:
    negative floats get their magnitude bits flipped, so a larger magnitude is a smaller key).
    Then every NaN -> INT32_MAX: torch.topk ranks NaN above +inf (key 0x7F800000) and all NaNs
    equally; without this a sign-set NaN would rank below -inf and NaN payloads would order
    NaNs among themselves. And +-0.0 -> 0: -0.0 == +0.0, so the two are a tie (smaller
    column first), not -0.0 below +0.0 as their bits would say.
    """
    bits = v.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = tl.where(v != v, 0x7FFFFFFF, key)
    return tl.where(v == 0.0, 0, key)


# ---------------------------------------------------------------------------------------------
# Design 1: whole rows, BLOCK_M rows a program


@triton.jit
def _rows_kernel(
    x_ptr, stride_xm, stride_xn,
    values_ptr, indices_ptr,
    M, N, k,
    BLOCK_M: tl.constexpr, N_PAD: tl.constexpr, ROW_OFFSETS_INT64: tl.constexpr,
):
    """BLOCK_M rows a program, one a row of a [BLOCK_M, N_PAD] tile (grid-stride over row blocks).

    k steps; step i takes, in every row at once, the largest key and the smallest column
    holding it, gives that lane rank i and retires only that lane (its key becomes INT32_MIN).
    The lanes are then scattered to their rank's column of the outputs: the values from the
    loaded tile in x's own dtype (bit for bit), the indices as the lane numbers. The outputs are
    the wrapper's own contiguous [M, k] tensors (row stride k).
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    rows = tl.arange(0, BLOCK_M)[:, None]          # [BLOCK_M, 1]
    lanes = tl.arange(0, N_PAD)[None, :]           # [1, N_PAD]
    valid = lanes < N
    # Row offsets inside a block: int32 unless (BLOCK_M - 1) * stride_xm passes 2^31.
    if ROW_OFFSETS_INT64:
        row_offs = rows.to(tl.int64) * stride_xm
    else:
        row_offs = rows * stride_xm

    for m0 in range(pid * BLOCK_M, M, num_programs * BLOCK_M):
        in_block = (m0 + rows) < M                          # [BLOCK_M, 1]
        mask = in_block & valid
        base = tl.cast(m0, tl.int64)  # 64-bit block bases: M * stride can pass 2^31
        # other=0.0: padding lanes and rows past M get the key INT32_MIN below, whatever they read.
        x = tl.load(x_ptr + base * stride_xm + row_offs + lanes * stride_xn, mask=mask, other=0.0)
        # upcast: bf16/fp16 -> float32 is exact, so the keys order the inputs' own values
        key = tl.where(mask, _sort_keys(x.to(tl.float32)), -2147483647 - 1)
        rank = tl.full([BLOCK_M, N_PAD], -1, dtype=tl.int32)
        for i in range(0, k):
            best = tl.max(key, axis=1)[:, None]
            # ties: the smallest column holding the best key
            pick = tl.min(tl.where(key == best, lanes, N_PAD), axis=1)[:, None]
            chosen = lanes == pick
            rank = tl.where(chosen, i, rank)
            key = tl.where(chosen, -2147483647 - 1, key)  # retire only the chosen lane, never by value
        # 64-bit block bases (M * k can pass 2^31), int32 offsets inside the block.
        out = base * k + (rows * k + rank)
        keep = in_block & (rank >= 0)
        tl.store(values_ptr + out, x, mask=keep)  # x's own dtype and bits: no rounding, NaN payloads kept
        tl.store(indices_ptr + out, tl.broadcast_to(lanes, rank.shape), mask=keep)


def _validate(x, k):
    """Check the arguments; return (M, N, k)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor [M, N], got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"x: expected 2 dims [M, N], got shape {tuple(x.shape)}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"x: expected dtype float32, bfloat16 or float16, got {x.dtype}")
    M, N = x.shape
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k: expected an int, got {type(k).__name__}")
    k = int(k)
    if not 0 <= k <= N:
        # torch.topk raises RuntimeError("selected index k out of range") here too
        raise ValueError(f"k: expected 0 <= k <= N = x.shape[1] = {N}, got {k}")
    if N and (N - 1) * x.stride(1) >= _INT32_LIMIT:
        raise ValueError(f"x: a row's extent must stay below 2^31 elements (strides {x.stride()})")
    return M, N, k


def _outputs(x, M, k):
    return (torch.empty((M, k), dtype=x.dtype, device=x.device),
            torch.empty((M, k), dtype=torch.int32, device=x.device))


def rows_config(M, N, max_tile=_ROWS_MAX_TILE):
    """Launch configuration of the whole-row design, (BLOCK_M, N_PAD, num_warps).

    A row is N_PAD lanes; BLOCK_M rows fill up to max_tile lanes of tile (never more rows than
    M: M = 1 is a [1, N_PAD] tile), so the judge's N = 64..384 rows come 32..4 to a program and
    each program's k steps serve several rows. One warp per 512 lanes of tile (16 lanes a
    thread for each of the tile, its keys and its ranks), at most 8. Triton lays a 2-D tile out
    with the threads of a warp along the row and the warps across rows, so while BLOCK_M >=
    num_warps every reduction of a step stays inside one warp (shuffles, no shared-memory round
    trip or barrier); a single wide row (N_PAD >= 1024, M = 1) spreads over warps instead of
    spilling registers. Chosen by that reasoning, not measured on a GPU: oracles/tools/bench.py times it.
    """
    N_PAD = _next_pow2(max(N, 1))
    BLOCK_M = max(1, min(_next_pow2(max(M, 1)), max_tile // N_PAD))
    num_warps = max(1, min(8, BLOCK_M * N_PAD // 512))
    return BLOCK_M, N_PAD, num_warps


def gate_topk_rows(x, k):
    """Top k of each row, whole rows in registers. Returns (values [M, k] x.dtype, indices [M, k] int32)."""
    M, N, k = _validate(x, k)
    values, indices = _outputs(x, M, k)
    if M == 0 or k == 0:
        return values, indices  # nothing to compute (torch.topk gives the same empty outputs)
    BLOCK_M, N_PAD, num_warps = rows_config(M, N)
    # Launch: a 1-D grid of row blocks, capped at _MAX_PROGRAMS (grid-stride beyond). The outputs
    # are contiguous (allocated above), so only x carries strides. num_stages=1: nothing to pipeline.
    _rows_kernel[(min(_cdiv(M, BLOCK_M), _MAX_PROGRAMS),)](
        x, x.stride(0), x.stride(1),
        values, indices,
        M, N, k,
        BLOCK_M=BLOCK_M, N_PAD=N_PAD,
        ROW_OFFSETS_INT64=(BLOCK_M - 1) * x.stride(0) + (N - 1) * x.stride(1) >= _INT32_LIMIT,
        num_warps=num_warps, num_stages=1,
    )
    return values, indices


# ---------------------------------------------------------------------------------------------
# Design 2: streaming over column chunks, one row a program


@triton.jit
def _streaming_kernel(
    x_ptr, stride_xm, stride_xn,
    values_ptr, indices_ptr,
    M, N, k,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, K_PAD: tl.constexpr, ROW_OFFSETS_INT64: tl.constexpr,
):
    """BLOCK_M rows a program (grid-stride over row blocks); columns in chunks of BLOCK_N.

    Each row's running top k is K_PAD slots of (key, column), empty slots (INT32_MIN, INT32_MAX).
    A chunk is merged only when, in some row of the block, its best key is above the row's
    running k-th key: a chunk's columns are all larger than every running column, so a key equal
    to the k-th loses the tie and the chunk cannot change that row (merging it anyway gives the
    same slots back). A merge is k steps over the slots and the chunk together: in each row the
    largest key, then the smallest column holding it (in either), written to slot i, and that
    lane retired in whichever it came from. BLOCK_N >= K_PAD (the wrapper), so the first chunk
    alone fills every slot i < k with a real column. At the end the values are gathered from x
    at the chosen columns: x's own bits, NaN payloads and -0.0 kept.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)[:, None]          # [BLOCK_M, 1]
    slots = tl.arange(0, K_PAD)[None, :]           # [1, K_PAD]
    cols = tl.arange(0, BLOCK_N)[None, :]          # [1, BLOCK_N]
    in_k = slots < k
    # Row offsets inside a block: int32 unless (BLOCK_M - 1) * stride_xm passes 2^31.
    if ROW_OFFSETS_INT64:
        row_offs = rows.to(tl.int64) * stride_xm
    else:
        row_offs = rows * stride_xm

    for m0 in range(pid * BLOCK_M, M, num_programs * BLOCK_M):
        in_block = (m0 + rows) < M                          # [BLOCK_M, 1]
        base = tl.cast(m0, tl.int64)  # 64-bit block bases: M * stride can pass 2^31
        x_rows = x_ptr + base * stride_xm + row_offs        # [BLOCK_M, 1] pointers
        top_key = tl.full([BLOCK_M, K_PAD], -2147483647 - 1, dtype=tl.int32)
        top_col = tl.full([BLOCK_M, K_PAD], 2147483647, dtype=tl.int32)
        for n0 in range(0, N, BLOCK_N):
            c = n0 + cols
            live = in_block & (c < N)
            # upcast: bf16/fp16 -> float32, exact; columns past N and rows past M get INT32_MIN
            x = tl.load(x_rows + c * stride_xn, mask=live, other=0.0).to(tl.float32)
            key = tl.where(live, _sort_keys(x), -2147483647 - 1)
            # each row's running k-th key (slot k - 1); INT32_MIN while its slots are still empty
            kth = tl.max(tl.where(slots == k - 1, top_key, -2147483647 - 1), axis=1)
            beats = tl.max(key, axis=1) > kth                # [BLOCK_M]
            if tl.max(beats.to(tl.int32), axis=0) > 0:
                new_key = tl.full([BLOCK_M, K_PAD], -2147483647 - 1, dtype=tl.int32)
                new_col = tl.full([BLOCK_M, K_PAD], 2147483647, dtype=tl.int32)
                for i in range(0, k):
                    best = tl.maximum(tl.max(top_key, axis=1), tl.max(key, axis=1))[:, None]
                    # ties: the smallest column holding the best key, among the slots and the chunk
                    pick = tl.minimum(tl.min(tl.where(top_key == best, top_col, 2147483647), axis=1),
                                      tl.min(tl.where(key == best, c, 2147483647), axis=1))[:, None]
                    new_key = tl.where(slots == i, best, new_key)
                    new_col = tl.where(slots == i, pick, new_col)
                    # retire only the chosen lane, by its column, never by value
                    top_key = tl.where(top_col == pick, -2147483647 - 1, top_key)
                    key = tl.where(c == pick, -2147483647 - 1, key)
                top_key = new_key
                top_col = new_col
        keep = in_block & in_k
        # 64-bit block bases (M * k can pass 2^31), int32 offsets inside the block.
        out = base * k + (rows * k + slots)
        # gather: x's own dtype and bits at the chosen columns
        tl.store(values_ptr + out, tl.load(x_rows + top_col * stride_xn, mask=keep), mask=keep)
        tl.store(indices_ptr + out, top_col, mask=keep)


def streaming_config(M, N, k):
    """Launch configuration of the streaming design, (BLOCK_M, BLOCK_N, K_PAD, num_warps).

    K_PAD = next_power_of_2(k) slots; chunks of 128 columns (at least K_PAD, so the first chunk
    fills every slot: see the kernel); up to 2048 lanes of chunk tile, 16 rows a program at
    BLOCK_N = 128 (never more rows than M), the warps across rows as in rows_config, so every
    reduction stays inside a warp. Small chunks keep the
    registers flat for any N; a chunk that no row's running k-th key lets in costs two
    reductions. Chosen by reasoning, not measured on a GPU.
    """
    K_PAD = _next_pow2(max(k, 1))
    BLOCK_N = max(128, K_PAD)
    BLOCK_M = max(1, min(_next_pow2(max(M, 1)), 2048 // BLOCK_N))
    return BLOCK_M, BLOCK_N, K_PAD, max(1, min(4, BLOCK_M))


def gate_topk_streaming(x, k):
    """Top k of each row, streaming over column chunks. Returns (values [M, k] x.dtype, indices [M, k] int32)."""
    M, N, k = _validate(x, k)
    values, indices = _outputs(x, M, k)
    if M == 0 or k == 0:
        return values, indices
    BLOCK_M, BLOCK_N, K_PAD, num_warps = streaming_config(M, N, k)
    # Launch: a 1-D grid of row blocks, capped at _MAX_PROGRAMS (grid-stride beyond); num_stages=1.
    _streaming_kernel[(min(_cdiv(M, BLOCK_M), _MAX_PROGRAMS),)](
        x, x.stride(0), x.stride(1),
        values, indices,
        M, N, k,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, K_PAD=K_PAD,
        ROW_OFFSETS_INT64=(BLOCK_M - 1) * x.stride(0) + (N - 1) * x.stride(1) >= _INT32_LIMIT,
        num_warps=num_warps, num_stages=1,
    )
    return values, indices


def gate_topk(x, k):
    """The entry the judge calls: gate_topk(x=..., k=...) -> (values [M, k] x.dtype, indices [M, k] int32).

    Whole rows while a padded row fits a program's registers (_ROWS_MAX_N_PAD), streaming beyond.
    """
    if isinstance(x, torch.Tensor) and x.ndim == 2 and _next_pow2(max(x.shape[1], 1)) > _ROWS_MAX_N_PAD:
        return gate_topk_streaming(x, k)
    return gate_topk_rows(x, k)


reference = gate_topk  # the entry name the competition imports

# Both designs are fuzzed (oracles/submission/loader.py). A tuple, not a dict: the judge's security scan
# rejects dict and set globals, and this file is meant to be submittable as it is.
IMPLEMENTATIONS = (
    ("rows", gate_topk_rows),
    ("streaming", gate_topk_streaming),
)
