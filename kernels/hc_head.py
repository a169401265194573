"""hc_head: fold the hc_mult residual streams of DeepSeek-V4's hyper-connection head into one.

Per token t, with f = x[t] flattened to length K = hc_mult * hidden, all in float32:

    r      = 1 / sqrt(sum_i f_i^2 / K + norm_eps)
    mix_j  = (sum_i hc_fn[j, i] * f_i) * r                      j < hc_mult
    pre_j  = 1 / (1 + exp(-(mix_j * hc_scale + hc_base_j))) + hc_eps
    y[t,d] = sum_j pre_j * x[t, j, d]                          stored in x.dtype (nearest even)

NaN and inf propagate as in the float32 PyTorch reference: an all-zero token with
norm_eps = 0 gives r = inf and mix = 0 * inf = NaN; x^2 overflowing float32 gives r = 0.

Two designs of the same function (both fuzzed, see IMPLEMENTATIONS at the end):

- `hc_head_per_token` (`hc_head` below 2048 tokens): one launch, one program per token, two
  passes over the token's row (the second from L2). Every program reads all of hc_fn (hc_mult *
  K float32: 458 KB for the model's hc_mult = 4, hidden = 7168), eight times the bytes of its
  own row: at small T one program's bytes in flight bound it, at large T L2 -> SM traffic. See
  per_token_config; the measurements are in tests/results/benchmarks.md.
- `hc_head_two_launch` (`hc_head` from 2048 tokens): launch 1 gives each program BLOCK_T tokens,
  one stream and one chunk of hidden, so each hc_fn row segment it loads serves BLOCK_T tokens;
  it writes float32 partial sums (hc_fn dot products and sum of squares) to a small buffer.
  Launch 2 gives each program one token and a block of columns: it adds up the token's
  partials, computes the gates and writes y. Splitting hidden into chunks fills the GPU at small
  T (T = 1: 112 programs in launch 1 instead of one). The price is reading x twice (at T <= ~300
  all of x stays in L2 between the launches; beyond, launch 2 walks the tokens from the last one
  down so that its first reads find what launch 1 read last).

Why x is read twice at large T: reading x once needs every partial sum of a token before its
output, so either the token's row stays on chip while the sums run -- but sharing hc_fn loads
needs 8-16 tokens a program, 0.5-0.9 MB of row, more than an SM's registers and shared memory --
or programs exchange partial sums. The single-read designs tried (several tokens a program with
the second pass from L2; the last work item of a token block writing its output, which also
needs atomics, rejected on Kunlunxin) were slower than the two launches (numbers:
tests/results/benchmarks.md). Programs that wait for each other deadlock where they are not all
resident, and the CPU interpreter runs programs one after another.

Precision: every sum is float32 (no tl.dot: a float32 dot runs as tf32 on some backends). The
partial sums change only the order of the float32 additions; the oracle's bound holds for any
order.
"""

import numbers

import torch
import triton
import triton.language as tl

# Programs launched at most; beyond it each program strides over work items. 65535 is the
# largest grid that every backend the judge runs accepts.
_MAX_PROGRAMS = 65535
_INT32_LIMIT = 2**31
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# hc_head_two_launch splits hidden into chunks until its first launch has this many programs:
# 1024 is about 2 waves on an H200 (132 SMs, 4 programs of launch 1 resident per SM).
_TARGET_PROGRAMS = 1024
# hc_head_per_token prefetches a tile ahead up to this many tokens (per_token_config).
_PREFETCH_MAX_TOKENS = 1


# Host arithmetic for the launch configuration. Not triton.cdiv / triton.next_power_of_2: they are
# constexpr functions (usable inside kernels too) and a host call to one costs microseconds
# (tests/results/benchmarks.md), a large share of a small call.
def _cdiv(a, b):
    return -(-a // b)


def _next_pow2(n):
    return 1 << (n - 1).bit_length() if n > 1 else 1


# ---------------------------------------------------------------------------------------------
# Design 1: one program per token


@triton.jit
def _row_tile(x_row, stride_xj, stride_xd, fn_rows, stride_fi, mask_j, it, n_dtiles, hc_mult, hidden,
              BLOCK_D: tl.constexpr):
    """Tile `it` of a token's flattened row f -- stream j = it // n_dtiles, columns d of block
    it % n_dtiles of hidden -- and its hc_fn columns: (x[t, j, d] [BLOCK_D] in the dtype of x,
    hc_fn[:, j * hidden + d] [HC_PAD, BLOCK_D] float32). Columns past hidden, padding rows of
    hc_fn and tiles past the row (it >= hc_mult * n_dtiles: a prefetch past the last tile) read
    0.0, which is neutral for the sums of pass 1."""
    j = it // n_dtiles
    d = (it % n_dtiles) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = d < tl.where(j < hc_mult, hidden, 0)  # vector < scalar (see _store_sums)
    # int64: j * stride_xj can pass 2^31
    f = tl.load(x_row + tl.cast(j, tl.int64) * stride_xj + d * stride_xd, mask=mask_d, other=0.0)
    w = tl.load(fn_rows + ((j * hidden + d) * stride_fi)[None, :],
                mask=mask_j[:, None] & mask_d[None, :], other=0.0)
    return f, w


@triton.jit
def _hc_head_kernel(
    x_ptr, stride_xt, stride_xj, stride_xd,
    hc_fn_ptr, stride_fj, stride_fi,
    hc_scale_ptr,
    hc_base_ptr, stride_b,
    y_ptr, stride_yt, stride_yd,
    T, hc_mult, hidden,
    norm_eps, hc_eps,
    HC_PAD: tl.constexpr, BLOCK_D: tl.constexpr, PREFETCH: tl.constexpr,
):
    """One token per program (grid-stride over tokens when T exceeds the grid).

    Pass 1 reads x[t] once, tile by tile over the flattened row (stream-major), accumulating
    sum(f_i^2) and the hc_mult mixes sum_i hc_fn[j, i] * f_i in a [HC_PAD, BLOCK_D] float32 tile
    (row j = mix j); with PREFETCH the loads of tile it + 1 are issued before the FMAs of tile
    it (Triton pipelines only tl.dot operands), so two tiles are in flight -- what a lone program
    needs at small T, where it is bound by its own load latency (per_token_config). Pass 2 reads
    x[t] again (from L2 on a GPU) as an [HC_PAD, BLOCK_D] tile of all streams and writes
    y[t, d] = sum_j pre_j * x[t, j, d]. Offsets inside a row are int32, row bases int64.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    offs_j = tl.arange(0, HC_PAD)
    mask_j = offs_j < hc_mult
    offs_d = tl.arange(0, BLOCK_D)
    K = hc_mult * hidden  # the wrapper checks K < 2^31
    n_dtiles = (hidden + BLOCK_D - 1) // BLOCK_D  # tiles of one stream
    n_tiles = hc_mult * n_dtiles  # tiles of a flattened row

    hc_scale = tl.load(hc_scale_ptr)
    # Padding lanes j >= hc_mult get base 0; their results are discarded by tl.where in pass 2.
    hc_base = tl.load(hc_base_ptr + offs_j * stride_b, mask=mask_j, other=0.0)
    # hc_fn row offsets of the [HC_PAD, 1] weight tile, int32 (the wrapper checks the extent).
    fn_rows = hc_fn_ptr + offs_j[:, None] * stride_fj

    for t in range(pid, T, num_programs):
        row = tl.cast(t, tl.int64)  # 64-bit row base: T * stride_xt can pass 2^31
        x_row = x_ptr + row * stride_xt
        y_row = y_ptr + row * stride_yt

        # ---- pass 1: sum of squares and mixes over the flattened row --------------------
        sumsq = tl.zeros([BLOCK_D], dtype=tl.float32)
        acc = tl.zeros([HC_PAD, BLOCK_D], dtype=tl.float32)
        if PREFETCH:
            # Tile by tile over the flattened row, the loads of tile it + 1 issued before the
            # FMAs of tile it.
            f_next, w_next = _row_tile(x_row, stride_xj, stride_xd, fn_rows, stride_fi, mask_j, 0,
                                       n_dtiles, hc_mult, hidden, BLOCK_D)
            for it in range(0, n_tiles):
                f, w = f_next, w_next
                f_next, w_next = _row_tile(x_row, stride_xj, stride_xd, fn_rows, stride_fi, mask_j, it + 1,
                                           n_dtiles, hc_mult, hidden, BLOCK_D)
                f = f.to(tl.float32)  # upcast: x (bf16/fp16/fp32) -> float32 before any arithmetic
                sumsq += f * f
                acc += w * f[None, :]
        else:
            for j in range(0, hc_mult):
                x_stream = x_row + tl.cast(j, tl.int64) * stride_xj  # int64: j * stride_xj can pass 2^31
                fn_col0 = j * hidden  # column of hc_fn where stream j starts in f
                for d0 in range(0, hidden, BLOCK_D):
                    d = d0 + offs_d
                    mask_d = d < hidden
                    # upcast: x (bf16/fp16/fp32) -> float32 before any arithmetic;
                    # other=0.0 is neutral for both the sum of squares and the dot products.
                    f = tl.load(x_stream + d * stride_xd, mask=mask_d, other=0.0).to(tl.float32)
                    w = tl.load(fn_rows + ((fn_col0 + d) * stride_fi)[None, :],
                                mask=mask_j[:, None] & mask_d[None, :], other=0.0)
                    sumsq += f * f
                    acc += w * f[None, :]
        mixes = tl.sum(acc, axis=1)      # [HC_PAD]; float32 tree sum (order differs from torch)
        ss = tl.sum(sumsq, axis=0)

        # IEEE-rounded sqrt and division (sqrt.rn / div.rn), not tl.sqrt and `/`: the approximate
        # PTX forms flush subnormals, so a subnormal norm_eps on an all-zero token gave
        # 1/sqrt(0) = inf and then 0 * inf = NaN where torch.rsqrt gives a finite r (found by the
        # fuzzer on an H200; fixture tests/regressions/hc_head/452474947cdcdced.json). Once per
        # token, so the cost is nil. 1/sqrt(0) = inf and 1/sqrt(inf) = 0 as torch.rsqrt gives them.
        r = tl.div_rn(1.0, tl.sqrt_rn(ss / K + norm_eps))
        z = mixes * r * hc_scale + hc_base  # same operation order as the reference
        # approximate: tl.exp (ex2.approx on NVIDIA); exp(+large) = inf gives sigmoid = 0.
        pre = 1.0 / (1.0 + tl.exp(-z)) + hc_eps

        # ---- pass 2: y[t, d] = sum_j pre_j * x[t, j, d] --------------------------------
        x_streams = x_row + offs_j[:, None].to(tl.int64) * stride_xj  # [HC_PAD, 1] pointers
        for d0 in range(0, hidden, BLOCK_D):
            d = d0 + offs_d
            mask_d = d < hidden
            # upcast: x -> float32; padded streams read 0.
            xs = tl.load(
                x_streams + (d * stride_xd)[None, :],
                mask=mask_j[:, None] & mask_d[None, :],
                other=0.0,
            ).to(tl.float32)
            # tl.where, not the mask alone: a padding lane's pre may be NaN (0 * inf in pass 1).
            y = tl.sum(tl.where(mask_j[:, None], pre[:, None] * xs, 0.0), axis=0)  # tree sum over j
            # downcast: float32 -> x.dtype, round to nearest even (Triton's stock CPU interpreter
            # truncates float32 -> bfloat16 instead: up to 1 ulp off there, not on a GPU).
            tl.store(y_row + d * stride_yd, y.to(y_ptr.dtype.element_ty), mask=mask_d)


# ---------------------------------------------------------------------------------------------
# Design 2: two launches -- partial sums, then gates and output


@triton.jit
def _load_rows(x_base, rows, stride_xt, d, stride_xd, T_left, d_hi):
    """x rows `rows` ([R] token offsets from x_base) at columns d ([C]): an [R, C] tile in the
    dtype of x; tokens past the block's end (rows >= T_left) and columns >= d_hi read 0.0, which
    is neutral for the sums below."""
    return tl.load(x_base + rows[:, None] * stride_xt + (d * stride_xd)[None, :],
                   mask=(rows < T_left)[:, None] & (d < d_hi)[None, :], other=0.0)


@triton.jit
def _row_sums(f, w0, w1, w2, w3, VEC: tl.constexpr):
    """For f [R, C] (float32) and four hc_fn row segments w0..w3 (each [R, C], the same values in
    every row): the products f * w_r and f * f summed over each VEC consecutive columns, which sit
    in one thread, so the sums are in-thread FMA chains. Returns five [R, C // VEC] tiles."""
    R: tl.constexpr = f.shape[0]
    C: tl.constexpr = f.shape[1]
    return (tl.sum(tl.reshape(f * f, [R, C // VEC, VEC]), axis=2),
            tl.sum(tl.reshape(f * w0, [R, C // VEC, VEC]), axis=2),
            tl.sum(tl.reshape(f * w1, [R, C // VEC, VEC]), axis=2),
            tl.sum(tl.reshape(f * w2, [R, C // VEC, VEC]), axis=2),
            tl.sum(tl.reshape(f * w3, [R, C // VEC, VEC]), axis=2))


@triton.jit
def _store_sums(slot, rows, row_stride, T_left, i0, hc_mult, g, sq, a0, a1, a2, a3, HC_PAD: tl.constexpr):
    """Reduce one sub-tile's accumulators over their columns and store them to its tokens' slots:
    the four hc_fn rows i0..i0+3 (those < hc_mult) and, from row group g = 0, the sum of squares.
    Masks compare vectors only (the Triton interpreter mishandles vector & scalar booleans)."""
    slot_rows = slot + rows * row_stride
    tl.store(slot_rows + i0, tl.sum(a0, axis=1), mask=rows < tl.where(i0 < hc_mult, T_left, 0))
    tl.store(slot_rows + i0 + 1, tl.sum(a1, axis=1), mask=rows < tl.where(i0 + 1 < hc_mult, T_left, 0))
    tl.store(slot_rows + i0 + 2, tl.sum(a2, axis=1), mask=rows < tl.where(i0 + 2 < hc_mult, T_left, 0))
    tl.store(slot_rows + i0 + 3, tl.sum(a3, axis=1), mask=rows < tl.where(i0 + 3 < hc_mult, T_left, 0))
    tl.store(slot_rows + HC_PAD, tl.sum(sq, axis=1), mask=rows < tl.where(g == 0, T_left, 0))


@triton.jit
def _partials_kernel(
    x_ptr, stride_xt, stride_xj, stride_xd,
    hc_fn_ptr, stride_fj, stride_fi,
    part_ptr,
    T, hc_mult, hidden, chunk_d, n_chunks, n_groups, n_work,
    HC_PAD: tl.constexpr, ROWS: tl.constexpr, SUB: tl.constexpr, BLOCK_D: tl.constexpr,
    VEC: tl.constexpr, TOKEN_OFFSETS_INT64: tl.constexpr,
):
    """Launch 1 of 2. Work item w = (token block b, stream j, chunk c, row group g), g fastest;
    for the SUB * ROWS tokens t of block b, the columns d of chunk c (chunk_d of hidden) and the
    four rows i = 4g .. 4g+3 of hc_fn:

        part[t, p, i]      = sum_d hc_fn[i, j * hidden + d] * x[t, j, d]     p = j * n_chunks + c
        part[t, p, HC_PAD] = sum_d x[t, j, d]^2                              (stored by g = 0)

    part is float32 [T, hc_mult * n_chunks, HC_PAD + 1], contiguous. Four rows a group: the
    model's hc_mult = 4 is one group; a wider hc_mult reads x once per group.

    Tiles. A token block is SUB sub-tiles (1, 2 or 4, unrolled by hand) of ROWS = num_warps
    tokens; a sub-tile of x and each hc_fn row segment are [ROWS, BLOCK_D] tiles (the hc_fn one
    the same in every row, loaded by every warp), BLOCK_D = 32 * VEC. For 2-D tiles of
    ROWS * BLOCK_D = 128 * VEC elements, Triton's coalescing gives x (any dtype) and hc_fn
    (float32) one layout -- VEC consecutive columns a thread, a row a warp -- so their products
    need no exchange through shared memory, and every warp reads a contiguous row segment (64 *
    VEC bytes of bf16: 512 at VEC = 8). (3-D and 4-D tiles were tried: the compiler's order among their
    non-contiguous dims differs between Triton 3.6 and 3.9, and one of the two then splits rows
    across threads.) Each FMA chain first runs over a thread's own VEC columns (_row_sums), so
    an accumulator is [ROWS, 32]: one register a thread, 5 * SUB in all.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    no_rows = (rows * 0)[:, None]  # [ROWS, 1] zeros: every row of an hc_fn tile reads the same segment
    n_parts = hc_mult * n_chunks  # partial slots per token
    row_stride = n_parts * (HC_PAD + 1)  # between tokens in part
    # Offsets inside one token block: int32 unless (SUB * ROWS - 1) * stride_xt passes 2^31 (rows
    # of x spaced by gigabytes), then int64. Offsets inside hc_fn are int32 (checked by _validate).
    if TOKEN_OFFSETS_INT64:
        rows_x = rows.to(tl.int64)
    else:
        rows_x = rows

    for w in range(pid, n_work, num_programs):
        g = w % n_groups
        c = (w // n_groups) % n_chunks
        j = (w // n_groups // n_chunks) % hc_mult
        t0 = (w // n_groups // n_chunks // hc_mult) * (SUB * ROWS)
        T_left = T - t0  # tokens of this block that exist: rows < T_left
        # 64-bit base of the block's first token in stream j: t0 * stride_xt and j * stride_xj
        # can each pass 2^31.
        x_base = x_ptr + tl.cast(t0, tl.int64) * stride_xt + tl.cast(j, tl.int64) * stride_xj
        i0 = 4 * g
        # Rows past hc_mult (last group) re-read row hc_mult - 1, a valid address; their sums are
        # never stored.
        fn_row0 = hc_fn_ptr + i0 * stride_fj + no_rows
        fn_row1 = hc_fn_ptr + tl.minimum(i0 + 1, hc_mult - 1) * stride_fj + no_rows
        fn_row2 = hc_fn_ptr + tl.minimum(i0 + 2, hc_mult - 1) * stride_fj + no_rows
        fn_row3 = hc_fn_ptr + tl.minimum(i0 + 3, hc_mult - 1) * stride_fj + no_rows
        d_lo = c * chunk_d
        d_hi = tl.minimum(d_lo + chunk_d, hidden)

        # accumulators: q = sum of squares, a<r> = dot with hc_fn row i0 + r; suffix = sub-tile
        zero = tl.zeros([ROWS, BLOCK_D // VEC], dtype=tl.float32)
        q_0, a0_0, a1_0, a2_0, a3_0 = zero, zero, zero, zero, zero
        q_1, a0_1, a1_1, a2_1, a3_1 = zero, zero, zero, zero, zero
        q_2, a0_2, a1_2, a2_2, a3_2 = zero, zero, zero, zero, zero
        q_3, a0_3, a1_3, a2_3, a3_3 = zero, zero, zero, zero, zero
        # Software prefetch (Triton pipelines only tl.dot operands): the loads of tile d0 +
        # BLOCK_D are issued before the FMAs of tile d0, so two tiles a program are in flight.
        d = d_lo + cols
        fn_cols = ((j * hidden + d) * stride_fi)[None, :]
        fn_mask = (d < d_hi)[None, :]
        w0_next = tl.load(fn_row0 + fn_cols, mask=fn_mask, other=0.0)
        w1_next = tl.load(fn_row1 + fn_cols, mask=fn_mask, other=0.0)
        w2_next = tl.load(fn_row2 + fn_cols, mask=fn_mask, other=0.0)
        w3_next = tl.load(fn_row3 + fn_cols, mask=fn_mask, other=0.0)
        x0_next = _load_rows(x_base, rows_x, stride_xt, d, stride_xd, T_left, d_hi)
        x1_next = x0_next
        x2_next = x0_next
        x3_next = x0_next
        if SUB >= 2:
            x1_next = _load_rows(x_base, rows_x + ROWS, stride_xt, d, stride_xd, T_left, d_hi)
        if SUB >= 4:
            x2_next = _load_rows(x_base, rows_x + 2 * ROWS, stride_xt, d, stride_xd, T_left, d_hi)
            x3_next = _load_rows(x_base, rows_x + 3 * ROWS, stride_xt, d, stride_xd, T_left, d_hi)
        for d0 in range(d_lo, d_hi, BLOCK_D):
            w0 = w0_next
            w1 = w1_next
            w2 = w2_next
            w3 = w3_next
            # upcast: x (bf16/fp16/fp32) -> float32 before any arithmetic
            f0 = x0_next.to(tl.float32)
            f1 = x1_next.to(tl.float32)
            f2 = x2_next.to(tl.float32)
            f3 = x3_next.to(tl.float32)
            d = d0 + BLOCK_D + cols
            fn_cols = ((j * hidden + d) * stride_fi)[None, :]
            fn_mask = (d < d_hi)[None, :]
            w0_next = tl.load(fn_row0 + fn_cols, mask=fn_mask, other=0.0)
            w1_next = tl.load(fn_row1 + fn_cols, mask=fn_mask, other=0.0)
            w2_next = tl.load(fn_row2 + fn_cols, mask=fn_mask, other=0.0)
            w3_next = tl.load(fn_row3 + fn_cols, mask=fn_mask, other=0.0)
            x0_next = _load_rows(x_base, rows_x, stride_xt, d, stride_xd, T_left, d_hi)
            if SUB >= 2:
                x1_next = _load_rows(x_base, rows_x + ROWS, stride_xt, d, stride_xd, T_left, d_hi)
            if SUB >= 4:
                x2_next = _load_rows(x_base, rows_x + 2 * ROWS, stride_xt, d, stride_xd, T_left, d_hi)
                x3_next = _load_rows(x_base, rows_x + 3 * ROWS, stride_xt, d, stride_xd, T_left, d_hi)
            # float32 sums over a thread's VEC columns, then into the accumulators
            q, a0, a1, a2, a3 = _row_sums(f0, w0, w1, w2, w3, VEC)
            q_0, a0_0, a1_0, a2_0, a3_0 = q_0 + q, a0_0 + a0, a1_0 + a1, a2_0 + a2, a3_0 + a3
            if SUB >= 2:
                q, a0, a1, a2, a3 = _row_sums(f1, w0, w1, w2, w3, VEC)
                q_1, a0_1, a1_1, a2_1, a3_1 = q_1 + q, a0_1 + a0, a1_1 + a1, a2_1 + a2, a3_1 + a3
            if SUB >= 4:
                q, a0, a1, a2, a3 = _row_sums(f2, w0, w1, w2, w3, VEC)
                q_2, a0_2, a1_2, a2_2, a3_2 = q_2 + q, a0_2 + a0, a1_2 + a1, a2_2 + a2, a3_2 + a3
                q, a0, a1, a2, a3 = _row_sums(f3, w0, w1, w2, w3, VEC)
                q_3, a0_3, a1_3, a2_3, a3_3 = q_3 + q, a0_3 + a0, a1_3 + a1, a2_3 + a2, a3_3 + a3

        # The sums over d (float32 tree sums, order differs from torch) to the tokens' slots.
        slot = part_ptr + (tl.cast(t0, tl.int64) * n_parts + (j * n_chunks + c)) * (HC_PAD + 1)
        _store_sums(slot, rows, row_stride, T_left, i0, hc_mult, g, q_0, a0_0, a1_0, a2_0, a3_0, HC_PAD)
        if SUB >= 2:
            _store_sums(slot, rows + ROWS, row_stride, T_left, i0, hc_mult, g, q_1, a0_1, a1_1, a2_1, a3_1, HC_PAD)
        if SUB >= 4:
            _store_sums(slot, rows + 2 * ROWS, row_stride, T_left, i0, hc_mult, g, q_2, a0_2, a1_2, a2_2, a3_2, HC_PAD)
            _store_sums(slot, rows + 3 * ROWS, row_stride, T_left, i0, hc_mult, g, q_3, a0_3, a1_3, a2_3, a3_3, HC_PAD)


@triton.jit
def _combine_kernel(
    x_ptr, stride_xt, stride_xj, stride_xd,
    part_ptr,
    hc_scale_ptr,
    hc_base_ptr, stride_b,
    y_ptr, stride_yt, stride_yd,
    T, hc_mult, hidden, n_parts, n_dblocks, n_work,
    norm_eps, hc_eps,
    HC_PAD: tl.constexpr, PART_BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
    STREAM_OFFSETS_INT64: tl.constexpr,
):
    """Launch 2 of 2. Work item w = (token t, block of BLOCK_D columns): add up the token's
    n_parts partials (mixes and sum of squares), compute r and the gates pre_j, then write
    y[t, d] = sum_j pre_j * x[t, j, d] for its columns. Tokens run from the last one down.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)

    offs_i = tl.arange(0, HC_PAD)
    mask_i = offs_i < hc_mult
    offs_p = tl.arange(0, PART_BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    K = hc_mult * hidden  # the wrapper checks K < 2^31

    hc_scale = tl.load(hc_scale_ptr)
    # Padding lanes i >= hc_mult get base 0; their results are discarded by tl.where below.
    hc_base = tl.load(hc_base_ptr + offs_i * stride_b, mask=mask_i, other=0.0)
    # Stream offsets inside a token: int32 unless (hc_mult - 1) * stride_xj passes 2^31 (x with
    # its first two dims swapped in memory, gigabytes), then int64.
    if STREAM_OFFSETS_INT64:
        streams = offs_i[:, None].to(tl.int64) * stride_xj
    else:
        streams = offs_i[:, None] * stride_xj

    for w in range(pid, n_work, num_programs):
        # The last tokens first: launch 1 read them last, so part of them may still be in L2.
        t = T - 1 - w // n_dblocks
        d = (w % n_dblocks) * BLOCK_D + offs_d
        mask_d = d < hidden
        row = tl.cast(t, tl.int64)  # 64-bit row bases: T * stride can pass 2^31

        # ---- the token's partials: [n_parts, HC_PAD + 1] float32 -------------------------
        part_row = part_ptr + row * n_parts * (HC_PAD + 1)
        dot_acc = tl.zeros([PART_BLOCK, HC_PAD], dtype=tl.float32)
        ss_acc = tl.zeros([PART_BLOCK], dtype=tl.float32)
        for p0 in range(0, n_parts, PART_BLOCK):
            p = p0 + offs_p
            mask_p = p < n_parts
            dot_acc += tl.load(part_row + (p * (HC_PAD + 1))[:, None] + offs_i[None, :],
                               mask=mask_p[:, None] & mask_i[None, :], other=0.0)
            ss_acc += tl.load(part_row + p * (HC_PAD + 1) + HC_PAD, mask=mask_p, other=0.0)
        mixes = tl.sum(dot_acc, axis=0)  # [HC_PAD]; float32 tree sums over the partials
        ss = tl.sum(ss_acc, axis=0)

        # IEEE-rounded sqrt and division (sqrt.rn / div.rn), not tl.sqrt and `/`: the approximate
        # PTX forms flush subnormals, so a subnormal norm_eps on an all-zero token gave
        # 1/sqrt(0) = inf and then 0 * inf = NaN where torch.rsqrt gives a finite r (found by the
        # fuzzer on an H200; fixture tests/regressions/hc_head/452474947cdcdced.json). Once per
        # token, so the cost is nil. 1/sqrt(0) = inf and 1/sqrt(inf) = 0 as torch.rsqrt gives them.
        r = tl.div_rn(1.0, tl.sqrt_rn(ss / K + norm_eps))
        z = mixes * r * hc_scale + hc_base  # same operation order as the reference
        # approximate: tl.exp (ex2.approx on NVIDIA); exp(+large) = inf gives sigmoid = 0.
        pre = 1.0 / (1.0 + tl.exp(-z)) + hc_eps

        # ---- y[t, d] = sum_j pre_j * x[t, j, d] -------------------------------------------
        # upcast: x -> float32; padded streams read 0.
        xs = tl.load(x_ptr + row * stride_xt + streams + (d * stride_xd)[None, :],
                     mask=mask_i[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
        # tl.where, not the mask alone: a padding lane's pre may be NaN (0 * inf above).
        y = tl.sum(tl.where(mask_i[:, None], pre[:, None] * xs, 0.0), axis=0)  # tree sum over j
        # downcast: float32 -> x.dtype, round to nearest even (Triton's stock CPU interpreter
        # truncates float32 -> bfloat16 instead: up to 1 ulp off there, not on a GPU).
        tl.store(y_ptr + row * stride_yt + d * stride_yd, y.to(y_ptr.dtype.element_ty), mask=mask_d)


# ---------------------------------------------------------------------------------------------
# Wrappers


def _validate(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """Check the arguments; return (T, hc_mult, hidden)."""
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
    # Offsets inside one row (and inside hc_fn) are int32 in the kernels.
    if K >= _INT32_LIMIT or (hidden - 1) * x.stride(2) >= _INT32_LIMIT:
        raise ValueError(f"x: a row's in-stream extent must stay below 2^31 elements (shape "
                         f"{tuple(x.shape)}, strides {x.stride()})")
    if K > 0 and (hc_mult - 1) * hc_fn.stride(0) + (K - 1) * hc_fn.stride(1) >= _INT32_LIMIT:
        raise ValueError(f"hc_fn: extent must stay below 2^31 elements (strides {hc_fn.stride()})")
    return T, hc_mult, hidden


def hc_head_per_token(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """Fold x [T, hc_mult, hidden] into y [T, hidden] (dtype of x); one launch, one program per
    token. hc_fn: float32 [hc_mult, hc_mult*hidden]; hc_scale: float32, one element ([1]);
    hc_base: float32 [hc_mult]; norm_eps, hc_eps: Python floats. x may have any strides.
    """
    T, hc_mult, hidden = _validate(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)
    y = torch.empty((T, hidden), dtype=x.dtype, device=x.device)
    if T == 0 or hidden == 0:
        return y

    # Launch: a 1-D grid of one program per token (capped, with a grid-stride loop beyond), each
    # streaming its row twice; tiles and warps from per_token_config.
    HC_PAD, BLOCK_D, num_warps, prefetch = per_token_config(T, hc_mult, hidden)
    grid = (min(T, _MAX_PROGRAMS),)
    _hc_head_kernel[grid](
        x, x.stride(0), x.stride(1), x.stride(2),
        hc_fn, hc_fn.stride(0), hc_fn.stride(1),
        hc_scale,
        hc_base, hc_base.stride(0),
        y, y.stride(0), y.stride(1),
        T, hc_mult, hidden,
        float(norm_eps), float(hc_eps),
        HC_PAD=HC_PAD, BLOCK_D=BLOCK_D, PREFETCH=prefetch,
        num_warps=num_warps, num_stages=1,
    )
    return y


def per_token_config(T, hc_mult, hidden):
    """(HC_PAD, BLOCK_D, num_warps, PREFETCH) of hc_head_per_token, from the shape alone.

    A block covers BLOCK_D columns of hidden: one stream in pass 1 (against an [HC_PAD, BLOCK_D]
    hc_fn tile), all streams in pass 2. A program streams 8x its own row in hc_fn, so at small T
    it is bound by how many bytes one program keeps in flight, which grows with its threads and
    tile; at larger T by L2 -> SM traffic (every program reads all of hc_fn). Of the warp counts
    and tile sizes measured on an H200 (tests/results/benchmarks.md), 16 warps and 16384-element
    tiles are fastest up to 256 tokens, 8 warps and 8192 beyond (hc_head switches to two launches
    at 2048). More than 4 warps asserts on some Enflame parts, which
    need a vendor file anyway (their grids are capped at 12 programs).

    PREFETCH (the loads of the next tile issued before the FMAs of this one) at T = 1 only (the
    same measurements): a lone program waits on each tile's loads; from T = 2 the programs run
    side by side and the extra registers of the tile in flight cost more than they hide. Why the
    one-program launch is so much slower without the prefetch is not established; Triton
    specializes an integer argument equal to 1, so T = 1 compiles to its own binary.
    The CPU fuzzer's T <= 6 runs both paths.
    """
    HC_PAD = _next_pow2(hc_mult)
    tile, num_warps = (16384, 16) if T <= 256 else (8192, 8)
    return HC_PAD, max(16, min(_next_pow2(hidden), tile // HC_PAD)), num_warps, T <= _PREFETCH_MAX_TOKENS


def two_launch_config(T, hc_mult, hidden, *, sub=None, target_programs=_TARGET_PROGRAMS):
    """Launch configuration of hc_head_two_launch, from the shape alone (the CPU interpreter runs
    the code paths a GPU runs). sub and target_programs override the defaults
    (oracles/tools/bench.py sweeps them).

    Launch 1: 4 warps; a token block of BLOCK_T = SUB * ROWS tokens, ROWS = 4 (a row a warp),
    SUB = 4 sub-tiles once T > 4 (1 below: the CPU fuzzer's T <= 6 then runs both the paths a GPU
    takes): each hc_fn row segment serves 16 tokens, so hc_fn costs 28 KB of L2 -> SM traffic a
    token instead of 458 KB. A tile is BLOCK_D = 256 columns of one stream, VEC = 8 a thread
    (16-byte loads of bf16: a warp reads 512 contiguous bytes). VEC = 8 with SUB = 4 was the
    fastest of the VEC, SUB and warp counts measured on an H200 (tests/results/benchmarks.md).
    Launch 1 moves x below a copy's bandwidth: the FMAs and the hc_fn tile loads every warp
    repeats keep it from saturating device memory. When the work items
    (token blocks x streams x row groups) are fewer than target_programs, hidden is split into
    chunks (a multiple of BLOCK_D) until they are not; model shape (hc_mult = 4, hidden = 7168):
    T = 1 -> 28 chunks of 256 columns (112 programs), T = 128 -> 28 (896), T = 2048 -> 2 (1024),
    T >= 4096 -> 1 (T / 4).
    Launch 2: one token and BLOCK_D2 columns a program, 1024 columns (8 KB of bf16 x over the 4
    streams) once T gives enough programs, narrower below (T = 1: 56 programs of 128 columns).
    """
    HC_PAD = _next_pow2(hc_mult)
    ROWS = 4  # = num_warps of launch 1: one token row a warp
    n_groups = _cdiv(hc_mult, 4)  # launch 1 handles hc_fn rows 4 at a time
    SUB = sub or (1 if T <= ROWS else 4)  # 2 is legal too (oracles/tools/bench.py sweeps it)
    BLOCK_D = min(256, _next_pow2(hidden))
    VEC = min(8, BLOCK_D)
    n_tblocks = _cdiv(T, SUB * ROWS)
    splits_wanted = _cdiv(target_programs, n_tblocks * hc_mult * n_groups)
    chunk_d = _cdiv(_cdiv(hidden, splits_wanted), BLOCK_D) * BLOCK_D
    n_chunks = _cdiv(hidden, chunk_d)
    n_parts = hc_mult * n_chunks  # partial slots per token
    # Launch 2's partials tile [PART_BLOCK, HC_PAD] holds at most 4096 float32.
    PART_BLOCK = min(_next_pow2(n_parts), max(1, 4096 // HC_PAD))
    BLOCK_D2 = min(_next_pow2(hidden), max(16, 4096 // HC_PAD),
                   max(128, _next_pow2(_cdiv(T * hidden, 256))))
    return dict(HC_PAD=HC_PAD, ROWS=ROWS, SUB=SUB, BLOCK_D=BLOCK_D, VEC=VEC,
                n_groups=n_groups, chunk_d=chunk_d, n_chunks=n_chunks, n_parts=n_parts,
                PART_BLOCK=PART_BLOCK, BLOCK_D2=BLOCK_D2,
                n_work1=n_tblocks * hc_mult * n_chunks * n_groups,
                n_work2=T * _cdiv(hidden, BLOCK_D2))


def hc_head_two_launch(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """Fold x [T, hc_mult, hidden] into y [T, hidden] (dtype of x); two launches (partial sums,
    then gates and output). Same arguments and results as hc_head_per_token.
    """
    T, hc_mult, hidden = _validate(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)
    y = torch.empty((T, hidden), dtype=x.dtype, device=x.device)
    if T == 0 or hidden == 0:
        return y
    return _two_launch(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps, y,
                       two_launch_config(T, hc_mult, hidden))


def _two_launch(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps, y, cfg):
    """The launches of hc_head_two_launch with a given configuration (arguments validated)."""
    T, hc_mult, hidden = x.shape
    HC_PAD, n_parts = cfg["HC_PAD"], cfg["n_parts"]
    # float32 partials [T, n_parts, HC_PAD + 1]: launch 1 writes every slot launch 2 reads
    # (T = 8192, model shape: 655 KB).
    part = torch.empty((T * n_parts * (HC_PAD + 1),), dtype=torch.float32, device=x.device)

    # Launch 1: a 1-D grid over (token block, stream, chunk, row group) work items, capped,
    # with a grid-stride loop beyond. 4 warps (some backends assert on more). num_stages=1:
    # Triton's pipeliner pipelines only tl.dot operands here, so the kernel prefetches by hand.
    _partials_kernel[(min(cfg["n_work1"], _MAX_PROGRAMS),)](
        x, x.stride(0), x.stride(1), x.stride(2),
        hc_fn, hc_fn.stride(0), hc_fn.stride(1),
        part,
        T, hc_mult, hidden, cfg["chunk_d"], cfg["n_chunks"], cfg["n_groups"], cfg["n_work1"],
        HC_PAD=HC_PAD, ROWS=cfg["ROWS"], SUB=cfg["SUB"], BLOCK_D=cfg["BLOCK_D"], VEC=cfg["VEC"],
        TOKEN_OFFSETS_INT64=(cfg["SUB"] * cfg["ROWS"] - 1) * x.stride(0) + (hidden - 1) * x.stride(2) >= _INT32_LIMIT,
        num_warps=cfg["ROWS"], num_stages=1,
    )
    # Launch 2: a 1-D grid over (token, column block) work items, capped, with a grid-stride
    # loop beyond. A program is one [HC_PAD, BLOCK_D2] load of x and 40 registers, so many
    # programs share an SM and keep loads in flight without pipelining: num_stages=1.
    _combine_kernel[(min(cfg["n_work2"], _MAX_PROGRAMS),)](
        x, x.stride(0), x.stride(1), x.stride(2),
        part,
        hc_scale,
        hc_base, hc_base.stride(0),
        y, y.stride(0), y.stride(1),
        T, hc_mult, hidden, n_parts, _cdiv(hidden, cfg["BLOCK_D2"]), cfg["n_work2"],
        float(norm_eps), float(hc_eps),
        HC_PAD=HC_PAD, PART_BLOCK=cfg["PART_BLOCK"], BLOCK_D=cfg["BLOCK_D2"],
        STREAM_OFFSETS_INT64=(hc_mult - 1) * x.stride(1) + (hidden - 1) * x.stride(2) >= _INT32_LIMIT,
        num_warps=4, num_stages=1,
    )
    return y


# One program per token wins while hc_fn re-reads stay cheap and the launch is one (two launches
# cost more host time than a small call's GPU time); two launches win once hc_fn traffic
# dominates. The crossover, measured on an H200: tests/results/benchmarks.md.
TWO_LAUNCH_MIN_TOKENS = 2048


def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """The judge's entry: the faster design for this many tokens (both compute the same function)."""
    design = hc_head_two_launch if x.shape[0] >= TWO_LAUNCH_MIN_TOKENS else hc_head_per_token
    return design(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


# Both designs are fuzzed (oracles/submission/loader.py). A tuple, not a dict: the judge's security scan
# rejects dict and set globals, and this file is meant to be submittable as it is.
IMPLEMENTATIONS = (
    ("per_token", hc_head_per_token),
    ("two_launch", hc_head_two_launch),
)
