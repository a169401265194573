"""gate_topk cases: column counts around block sizes, k from 1 to N, rows of exact ties (small
integers, all-equal rows, +-0.0 mixes), ties copied inside the top k and across its boundary, near
ties one ulp of x's dtype apart, NaN of either sign and with payloads, +-inf, rows of -inf,
subnormals and the dtype's extremes, strided and offset layouts, every dtype the task allows;
the judge's fourteen cases; and the structural moves the minimizer uses."""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from strategies.case import Case
from strategies.minimize import row_subsets
from strategies.values import (FLOAT_DTYPES, JUDGE_FORM, SPECIAL_NAMES, Layout, background, bulk_row_counts,
                               hostile_sizes, judge_forms, layouts, magnitudes, mostly_from, next_in_dtype, place,
                               GPU_EXPLORE_ONE_IN, generation_device, seed_bulk, seed_layout,
                               seeds, sometimes, special_tensor, specials_in_rows, tie_rows)

OP = "gate_topk"

# (M, N, k, dtype) a GPU run mostly reuses: the judge's shapes (its 512 rows cut to the GPU's
# 300 at most: 256), k = N outside the judge's form and inside it (N, k <= 32), N past one tile,
# a prime N with k = 1, one row of many columns, a float16 and a float32 case. With k = N in the
# free form only, one case in 16 held it and the ci profile's 20 GPU cases held none on an H100
# (2026-12-06): a kernel handing k = N to torch.sort escaped.
GPU_STRUCTURES = (
    (1, 256, 8, torch.bfloat16), (37, 128, 4, torch.bfloat16), (256, 64, 1, torch.bfloat16),
    (128, 384, 32, torch.bfloat16), (64, 256, 8, torch.bfloat16), (16, 48, 48, torch.bfloat16),
    (9, 2053, 64, torch.float32), (200, 127, 1, torch.float16), (1, 4099, 16, torch.bfloat16),
    (33, 257, 9, torch.float32), (24, 32, 32, torch.float32),
)

# Case sizes by where the kernel runs: the CPU interpreter costs ~0.1 s a launch and a top-k by
# iterative max costs k reductions a row block, so rows and k stay small there (N up to 520 still
# reaches the hostile sizes 509, 511, 513 and four column chunks of the streaming design); a GPU
# takes model-sized rows and crosses the bundled entry's switch to streaming (N_PAD > 2048).
# k = N is drawn only while N <= max_k.
SIZES = {
    "cpu": dict(max_rows=6, max_cols=520, max_k=16),
    # On a GPU, three cases in four take (M, N, k, dtype) from GPU_STRUCTURES (above): a kernel is
    # compiled anew for every new combination of integer arguments (each specialized on == 1 and
    # % 16), dtypes and constexprs, and drawn freely nearly every case compiled (40% of the
    # gate_topk fuzz time on an H200, 2026-12-02); values, hazards and layouts are drawn anew.
    # Besides its drawn rows a GPU case carries a bulk of rows (0 or a count of bulk_rows, up to
    # BULK_ELEMENTS values), each with its own hazard (bulk_rows below).
    "cuda": dict(max_rows=300, max_cols=4200, max_k=64, structure_pool=GPU_STRUCTURES, bulk_rows=(2048, 16384),
                 device="cuda"),
}
BULK_ELEMENTS = 1 << 22
JUDGE_MAX_COLS, JUDGE_MAX_K = 1024, 32  # the judge domain's bounds (oracles/ops/gate_topk.py)

# The judge's cases (tests/test_gate_topk.py of flagos-ai/FlagGems-sglang): (M, N, k, seed); every
# one is a correctness case, the last ten are also its bench grid.
JUDGE_CASES = ((1, 256, 8, 0), (37, 128, 4, 1), (512, 64, 1, 2), (128, 384, 32, 3),
               *((m, 256, k, 9) for m in (1, 8, 64, 512, 4096) for k in (4, 8)))


# How a row's bulk values are drawn, each with why. The first is the judge's and the shrink target.
VALUE_KINDS = (
    ("judge", "randperm(M N) / (M N): distinct multiples of 1/(M N) in [0, 1), the judge's only inputs"),
    ("randn", "randn at a drawn magnitude, cast to x's dtype: half the row negative (bf16 and fp16 make ties)"),
    ("integers", "small integers -3..3: most of a row ties with other lanes, across the k boundary"),
    ("constant", "one value a row: the whole row is one tie, every order among it valid"),
    ("zeros", "+0.0 and -0.0 mixed: equal values whose bits differ (a raw bit key orders them)"),
    ("neg_inf", "-inf everywhere but r <= k lanes a row: the top k reaches -inf, where a value sentinel collides"),
    ("negative", "randn - 4: every value below 0, so a padding lane read as 0.0 would win"),
)

# The kinds as drawn: distinct values (the judge's, randn) twice as often as each tie-heavy kind,
# so that ties and sentinels stay features rather than most of every row; the judge's first
# (the shrink target).
KIND_DRAWS = ("judge", "randn", "integers", "negative", "judge", "randn", "constant", "zeros", "neg_inf")

# What each row gets (one each, see _gate_topk_cases), "none" first: the shrink target.
ROW_HAZARDS = ("none", "ties", "near_tie", "nan", "floor", "run", "all_equal")
# NaNs torch.topk ranks first alike: canonical, sign set, with a payload bit.
NANS = ("nan", "-nan", "nan_payload")
# Values a kernel may use as a sentinel (a retired lane, a padding lane), for the row floors.
FLOORS = ("-inf", "-max", "0.0", "-0.0")
# Special values put at drawn positions, each a bit pattern in x's dtype (special_tensor).
SPECIALS = SPECIAL_NAMES


def make_values(kind: str, shape: tuple[int, int], *, k: int, seed: int, scale: float,
                dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """The bulk of x [M, N] for a VALUE_KINDS kind and a top k, from a generator seeded on
    `device` (the same seed gives other values on another device type)."""
    M, N = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    if kind == "judge":
        return (torch.randperm(M * N, generator=gen, device=device).reshape(M, N).float() / max(M * N, 1)).to(dtype)
    if kind == "randn":
        return background(shape, seed=seed, scale=scale, dtype=dtype, device=device)
    if kind == "integers":
        return torch.randint(-3, 4, shape, generator=gen, device=device).to(dtype)
    if kind == "constant":
        return (torch.randn(M, 1, generator=gen, device=device) * scale).to(dtype).expand(M, N).clone()
    if kind == "zeros":
        signs = torch.randint(0, 2, shape, generator=gen, device=device).bool()
        return torch.where(signs, torch.tensor(-0.0, device=device), torch.tensor(0.0, device=device)).to(dtype)
    if kind == "neg_inf":
        # r of a row's lanes finite, r drawn in 0..k per row: the top k always reaches -inf
        # unless r = k, so lanes of a real -inf are chosen (and must be chosen once each)
        finite = torch.randint(0, k + 1, (M, 1), generator=gen, device=device)
        shuffled = torch.rand(shape, generator=gen, device=device).argsort(-1)
        return torch.where(shuffled < finite, torch.randn(shape, generator=gen, device=device), -math.inf).to(dtype)
    if kind == "negative":
        return (torch.randn(shape, generator=gen, device=device) - 4.0).to(dtype)
    raise InvalidArgument(f"make_values: kind={kind!r}; expected one of {[k for k, _ in VALUE_KINDS]}")


def bulk_rows(kind: str, B: int, N: int, k: int, *, seed: int, scale: float, dtype: torch.dtype,
              device="cpu") -> torch.Tensor:
    """B rows of a VALUE_KINDS kind, each with one hazard of ROW_HAZARDS as a drawn row gets it
    (_gate_topk_cases), all from one seeded generator with tensor ops: ties copied from a rank
    inside the top k or at its boundary onto up to three lanes (from below the top k at the
    boundary), a near tie one ulp of the dtype above or below such a rank, NaNs of every kind at up
    to three columns, a floor (every lane from a rank r < k down set to one of FLOORS), a run of one
    special, an all-equal row. Built on `device`: on the host, the sorts of a GPU case's bulk were
    most of its draw (gate_topk: 0.32 s an example on a 2-core CPU, 2026-12-06)."""
    x = make_values(kind, (B, N), k=k, seed=seed, scale=scale, dtype=dtype, device=device)
    if B == 0:
        return x
    gen = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
    hazard = torch.randint(0, len(ROW_HAZARDS), (B,), generator=gen, device=device)
    order = torch.sort(x.double(), dim=-1, descending=True, stable=True).indices     # [B, N]: the lane at each rank
    rank_of = torch.empty_like(order).scatter_(1, order, torch.arange(N, device=device).expand(B, N).contiguous())

    def rows_of(name):
        return hazard == ROW_HAZARDS.index(name)

    tie_rows(x, order, k, ties=rows_of("ties"), near_ties=rows_of("near_tie"), gen=gen)
    specials_in_rows(x, rows_of("nan"), NANS, gen)
    floors = torch.stack([special_tensor(name, dtype) for name in FLOORS]).to(device)
    floor = floors[torch.randint(0, len(FLOORS), (B,), generator=gen, device=device)]
    floored = rows_of("floor")[:, None] & (rank_of >= torch.randint(0, k, (B,), generator=gen, device=device)[:, None])
    specials = torch.stack([special_tensor(name, dtype) for name in SPECIALS]).to(device)
    start = torch.randint(0, N, (B,), generator=gen, device=device)
    length = 1 + (torch.rand(B, generator=gen, device=device) * (N - start)).long()
    lane = torch.arange(N, device=device)[None, :]
    run = rows_of("run")[:, None] & (lane >= start[:, None]) & (lane < (start + length)[:, None])
    run_value = specials[torch.randint(0, len(SPECIALS), (B,), generator=gen, device=device)]
    x = torch.where(floored, floor[:, None], x)
    x = torch.where(run, run_value[:, None], x)
    return torch.where(rows_of("all_equal")[:, None], x[:, :1], x)


def build_case(*, x, k, features=(), label="") -> Case:
    return Case(OP, {"x": x, "k": int(k)}, frozenset(features), label)


def gate_topk_cases(*, min_rows: int = 0, max_rows: int = 6, max_cols: int = 520, max_k: int = 16,
                    dtypes=FLOAT_DTYPES, structure_pool=(), bulk_rows=(), device: str = "cpu"
                    ) -> st.SearchStrategy[Case]:
    """gate_topk cases.

    Structure is drawn explicitly: M (0 rarely, behind its own boolean), N (hostile sizes: 1,
    primes, 31/32/33, 127/128/129, 255/256/257, 509/511/513, ...), k (or k = N), dtype, the value
    kind (VALUE_KINDS, from a drawn seed); then one hazard a row (ROW_HAZARDS): exact ties copied
    from a drawn rank (inside the top k or straddling its boundary), a near tie one ulp of the
    dtype above or below a drawn rank, NaNs of every kind (NANS) at up to three drawn columns, a
    floor (every value from a drawn rank r < k down set to a sentinel-like value, FLOORS), a run
    of one special value, an all-equal row; behind a boolean, specials at up to three drawn
    places anywhere (SPECIALS: NaN of either sign or with a payload, +-inf, +-0.0, subnormals,
    the dtype's extremes); with `bulk_rows` (GPU sizes), 0 or that many more rows of the same
    kind, each with its own hazard (bulk_rows), built on `device` (generation_device); then a
    layout (gaps hold NaN). A third of the cases are in the judge's form (judge_forms): float32,
    contiguous, N up to 1024, k up to 32. Shrinks toward: the judge's form, min_rows (then one row; at least one in that form), N = 1,
    k = 1, float32 (bf16 outside that form), the judge's randperm values, no hazard, no specials,
    no bulk, contiguous.
    """
    if not 0 <= min_rows <= max_rows:
        raise InvalidArgument(f"gate_topk_cases: need 0 <= min_rows <= max_rows, got min_rows={min_rows}, "
                              f"max_rows={max_rows}")
    if max_cols < 1:
        raise InvalidArgument(f"gate_topk_cases: max_cols={max_cols}; need >= 1 (k >= 1 column)")
    if max_k < 1:
        raise InvalidArgument(f"gate_topk_cases: max_k={max_k}; need >= 1")
    if not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        raise InvalidArgument(f"gate_topk_cases: dtypes={dtypes!r}; need a non-empty subset of {FLOAT_DTYPES}")
    for entry in structure_pool:
        M, N, k, dtype = entry
        if not (min_rows <= M <= max_rows and 1 <= k <= min(N, max_k) and N <= max_cols and dtype in dtypes):
            raise InvalidArgument(f"gate_topk_cases: structure {entry!r} is outside min_rows={min_rows}, "
                                  f"max_rows={max_rows}, max_cols={max_cols}, max_k={max_k}, dtypes={dtypes}")
    if any(n < 1 for n in bulk_rows):
        raise InvalidArgument(f"gate_topk_cases: bulk_rows={bulk_rows!r}; need counts >= 1")
    return _gate_topk_cases(min_rows, max_rows, max_cols, max_k, tuple(dtypes), tuple(structure_pool),
                            tuple(bulk_rows), generation_device(device, strategy="gate_topk_cases"))


@st.composite
def _structure(draw, min_rows, max_rows, max_cols, max_k, dtypes):
    """(M, N, k, dtype) drawn freely."""
    # M = 0 behind its own rare boolean: a plain integers(0, ...) draws it a fifth of the time
    # under ci, a fifth of the examples wasted on empty outputs.
    if min_rows == 0 and draw(sometimes(12), label="M=0?"):
        M = 0
    else:
        M = draw(st.integers(max(min_rows, 1), max(max_rows, 1)), label="M")
    N = draw(hostile_sizes(max_value=max_cols), label="N")
    if 1 < N <= max_k and draw(st.booleans(), label="k=N?"):
        k = N
    else:
        k = draw(st.integers(1, min(N, max_k)), label="k")
    return M, N, k, draw(st.sampled_from(dtypes), label="dtype")


def _judge_structures(pool: tuple, max_k: int) -> tuple:
    """The pool's shapes as the judge sends them: float32, at least one row, N and k in its domain."""
    return tuple(dict.fromkeys((M, N, k, torch.float32) for M, N, k, _ in pool
                               if M >= 1 and N <= JUDGE_MAX_COLS and k <= min(max_k, JUDGE_MAX_K)))


@st.composite
def _gate_topk_cases(draw, min_rows, max_rows, max_cols, max_k, dtypes, pool, bulk_pool, device):
    # A third of the cases in the judge's own form (strategies.values.judge_forms): float32, contiguous,
    # at least one row, N up to 1024, k up to 32; their values stay as nasty.
    judge_form = max_rows >= 1 and torch.float32 in dtypes and draw(judge_forms(), label="judge form?")
    if judge_form:
        free = _structure(max(min_rows, 1), max_rows, min(max_cols, JUDGE_MAX_COLS), min(max_k, JUDGE_MAX_K),
                          (torch.float32,))
        pool = _judge_structures(pool, max_k)
    else:
        free = _structure(min_rows, max_rows, max_cols, max_k, dtypes)
    bulk = layout = None
    if pool:  # GPU sizes: the whole compiled structure, bulk rows and layout included, mostly reused
        seeded = tuple((M, N, k, dtype, seed_bulk(i, bulk_pool, row_elements=N, max_elements=BULK_ELEMENTS, drawn_rows=M),
                        seed_layout(i, judge_form=judge_form)) for i, (M, N, k, dtype) in enumerate(pool))
        M, N, k, dtype, bulk, layout = draw(mostly_from(seeded, _gpu_structure(free, bulk_pool, judge_form),
                                                        explore_one_in=GPU_EXPLORE_ONE_IN),
                                            label="structure")
    else:
        M, N, k, dtype = draw(free, label="structure")
    kind = draw(st.sampled_from(KIND_DRAWS), label="values")
    scale = draw(magnitudes(), label="scale")
    x = make_values(kind, (M, N), k=k, seed=draw(seeds(), label="values_seed"), scale=scale, dtype=dtype)

    # One hazard a row, each drawn for its own row: the rows of this op are independent, so a
    # case of M rows tests M hazards for the price of one launch (the interpreter's cost is per
    # program, and a program holds up to 2048 / N_PAD rows), and the minimizer drops the rows
    # that do not matter. Each shrinks to "none".
    for m in range(M):
        hazard = draw(st.sampled_from(ROW_HAZARDS), label=f"row {m} hazard")
        if hazard == "ties" and N > 1:
            for _ in range(draw(st.integers(1, 2), label="tie_groups")):
                anchor, lanes = draw(_tie_lanes(x[m], k, copies=draw(st.integers(1, min(3, N - 1)), label="copies")),
                                     label="tie")
                x[m, lanes] = x[m, anchor].clone()
        elif hazard == "near_tie" and N > 1:
            anchor, lanes = draw(_tie_lanes(x[m], k, copies=1), label="near_tie")
            x[m, lanes[0]] = next_in_dtype(x[m, anchor], up=draw(st.booleans(), label="near_tie_above?"))
        elif hazard == "nan":
            # torch.topk ranks every NaN first, whatever its sign or payload (a raw bit key ranks
            # a sign-set NaN below -inf, a payload NaN above the canonical one)
            for col, name in draw(st.lists(st.tuples(st.integers(0, N - 1), st.sampled_from(NANS)),
                                           min_size=1, max_size=3), label="nans"):
                x[m, col] = special_tensor(name, dtype)
        elif hazard == "floor":
            # everything from a drawn rank r < k down becomes one value a kernel may use as a
            # sentinel: the top k reaches into a run of it, where a retired lane marked with that
            # value, or a padding lane reading it, collides with real ones
            rank = draw(st.integers(0, k - 1), label="floor_rank")
            order = torch.sort(x[m].double(), descending=True, stable=True).indices
            x[m, order[rank:]] = special_tensor(draw(st.sampled_from(FLOORS), label="floor"), dtype)
        elif hazard == "run":
            # one special over a run of the row: several NaNs (a NaN tie), many +inf, many -0.0 ...
            start = draw(st.integers(0, N - 1), label="run_start")
            length = draw(st.integers(1, N - start), label="run_length")
            x[m, start:start + length] = special_tensor(draw(st.sampled_from(SPECIALS), label="run_special"), dtype)
        elif hazard == "all_equal":
            x[m] = x[m, 0].clone()
    if M and draw(st.booleans(), label="specials?"):
        for pos, name in draw(st.lists(st.tuples(st.integers(0, M * N - 1), st.sampled_from(SPECIALS)),
                                       min_size=1, max_size=3), label="specials"):
            x.view(-1)[pos] = special_tensor(name, dtype)

    if bulk is None:
        bulk = draw(bulk_row_counts(bulk_pool, row_elements=N, max_elements=BULK_ELEMENTS, drawn_rows=M),
                    label="bulk rows") if bulk_pool else 0
    drawn_features = case_features(x, k)  # of the drawn rows: the bulk is a seeded background
    if bulk:
        more = bulk_rows(kind, bulk, N, k, seed=draw(seeds(), label="bulk_seed"), scale=scale, dtype=dtype,
                         device=device)
        x = torch.cat([x.to(more.device), more])
        drawn_features.discard("M=0")

    if layout is None:
        layout = Layout() if judge_form else draw(layouts(), label="x_layout")
    features = {f"dtype={str(dtype).split('.')[-1]}", f"values={kind}"} | drawn_features
    if judge_form:
        features.add(JUDGE_FORM)
    if bulk:
        features.add("bulk_rows")
    if layout.kind != "contiguous":
        features.add(f"layout={layout.kind}")
    return build_case(x=place(x, layout), k=k, features=features)


@st.composite
def _gpu_structure(draw, free, bulk_pool, judge_form):
    """(M, N, k, dtype, bulk rows, layout): all a kernel is compiled for, drawn freely."""
    M, N, k, dtype = draw(free)
    bulk = draw(bulk_row_counts(bulk_pool, row_elements=N, max_elements=BULK_ELEMENTS, drawn_rows=M),
                label="bulk rows") if bulk_pool else 0
    return M, N, k, dtype, bulk, Layout() if judge_form else draw(layouts(), label="x_layout")


@st.composite
def _tie_lanes(draw, row, k, *, copies):
    """(anchor lane, [other lanes]) for a tie in one row [N]: the anchor is the lane at a drawn
    rank of the row's stable descending order; at the k boundary (rank k - 1) the other lanes come
    from below the top k, so the tie straddles it; otherwise from anywhere. Shrinks toward the
    top anchor and the next lanes in rank order."""
    N = row.shape[0]
    order = torch.sort(row.double(), descending=True, stable=True).indices.tolist()
    if k < N and draw(st.booleans(), label="at_boundary?"):
        rank, pool = k - 1, order[k:]
    else:
        rank = draw(st.integers(0, k - 1), label="rank")
        pool = order[:rank] + order[rank + 1:]
    n = min(copies, len(pool))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n, unique=True), label="lanes")
    return order[rank], [pool[i] for i in picks]


def case_features(x: torch.Tensor, k: int) -> set[str]:
    """Features computed from the final values (a later construction can undo an earlier one,
    and bf16/fp16 make ties on their own): ties, boundary_tie, near_tie, all_equal, nan, neg_nan,
    nan_tie, inf, neg_inf, signed_zero_tie, subnormal, k=1, k=N, tail, M=0. The strategy passes the
    drawn rows only: over a GPU case's bulk rows this was half of the draw's time."""
    M, N = x.shape
    features = set()
    if M == 0:
        features.add("M=0")
    if k == 1:
        features.add("k=1")
    if k == N:
        features.add("k=N")
    if N % 32:
        features.add("tail")
    if M == 0:
        return features
    xd = x.double()
    nan = xd.isnan()
    if bool(nan.any()):
        features.add("nan")
        if bool((nan & (torch.signbit(xd))).any()):
            features.add("neg_nan")
        if bool((nan.sum(-1) >= 2).any()):
            features.add("nan_tie")
    if bool((xd == math.inf).any()):
        features.add("inf")
    if bool((xd == -math.inf).any()):
        features.add("neg_inf")
    finite = xd[xd.isfinite() & (xd != 0)]
    if bool((finite.abs() < float(torch.finfo(x.dtype).smallest_normal)).any()):
        features.add("subnormal")
    zero = xd == 0
    if bool(((zero & torch.signbit(xd)).any(-1) & (zero & ~torch.signbit(xd)).any(-1)).any()):
        features.add("signed_zero_tie")
    if N > 1 and bool((xd == xd[:, :1]).all(-1).any()):
        features.add("all_equal")
    s = torch.sort(xd, dim=-1, descending=True, stable=True).values
    # [M, N - 1]: rank r ties rank r + 1 (equal values, -0.0 == +0.0, or both NaN)
    same_next = (s[:, 1:] == s[:, :-1]) | (s[:, 1:].isnan() & s[:, :-1].isnan())
    if bool(same_next[:, :k].any()):          # a tie touching the top k (inside it or across its boundary)
        features.add("ties")
    if k < N and bool(same_next[:, k - 1].any()):
        features.add("boundary_tie")
    finite_pair = s[:, 1:].isfinite() & s[:, :-1].isfinite()
    if x.dtype == torch.float32:
        up = torch.nextafter(s[:, 1:].float(), torch.full_like(s[:, 1:], math.inf, dtype=torch.float32)).double()
        if bool(((up == s[:, :-1]) & finite_pair)[:, :k].any()):
            features.add("near_tie")
    else:
        bits = s.to(x.dtype).view(torch.int16).int()
        if bool((((bits[:, 1:] - bits[:, :-1]).abs() == 1) & finite_pair & (s[:, 1:] != s[:, :-1]))[:, :k].any()):
            features.add("near_tie")
    return features


def judge_cases(device: str | torch.device = "cpu") -> list[Case]:
    """The judge's fourteen cases, built as its test file builds them (tests/test_gate_topk.py of
    flagos-ai/FlagGems-sglang): a CPU torch.Generator seeded per case (`seed`), x = randperm(m n)
    reshaped to [m, n], as float32, divided by m n, then moved to the chip ("torch_gcu randperm
    hangs on-device") and made contiguous; k a Python int. The values are drawn on the CPU
    whatever the chip, so `device` changes nothing here; the Case keeps CPU copies and
    Case.to(device) puts x on the chip as the test's .to(cfg.device) does."""
    cases = []
    for m, n, k, seed in JUDGE_CASES:
        g = torch.Generator(device="cpu").manual_seed(seed)
        x = (torch.randperm(m * n, generator=g).reshape(m, n).float() / (m * n)).contiguous()
        cases.append(build_case(x=x, k=k, features={"judge"}, label=f"judge M={m} N={n} k={k} seed={seed}"))
    return cases


# The official bench (benchmark/test_gate_topk.py): (m, 256, k) for m in 1, 8, 64, 512 and k in
# 4, 8, plus m = 4096 as its "more shapes"; one larger case of ours past the judge's sizes.
BENCH_M, BENCH_LARGE_M, BENCH_N, BENCH_K = (1, 8, 64, 512, 4096), (65536,), 256, (4, 8)


def bench_inputs(m: int, k: int, device) -> dict:
    """The official bench's inputs: a CPU generator seeded 0 (not the test's 9), x = randperm(m n)
    / (m n) as float32 moved to the device; the bench declares bf16 but its input function ignores
    the dtype, and yields (x, {"k": k}); oracles/tools/bench.py passes both by keyword like every call."""
    g = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.randperm(m * BENCH_N, generator=g).reshape(m, BENCH_N).float() / (m * BENCH_N)).to(device)
    return {"x": x.contiguous(), "k": k}


def bench_cases():
    """(label, size, is_bench_case, builder(size, device)) for oracles/tools/bench.py: the official bench
    grid (every m, 4096 included, counts toward the average) and one larger case at k = 8."""
    grid = [(f"m={m} k={k}", m, True, lambda size, device, k=k: bench_inputs(size, k, device))
            for m in BENCH_M for k in BENCH_K]
    return grid + [(f"m={m} k=8", m, False, lambda size, device: bench_inputs(size, 8, device)) for m in BENCH_LARGE_M]


def model_cases() -> list[Case]:
    """Routers' own shapes on a few rows: Mixtral (8 experts, top 2) in float32, DeepSeek-V3 (256
    experts, top 8) in bf16 (randn in bf16 has exact ties), Kimi K2 (384 experts, top 8)."""
    return [
        build_case(x=background((4, 8), seed=0, scale=1.0, dtype=torch.float32), k=2, features={"model"},
                   label="Mixtral M=4 N=8 k=2"),
        build_case(x=background((4, 256), seed=1, scale=1.0, dtype=torch.bfloat16), k=8, features={"model"},
                   label="DeepSeek-V3 M=4 N=256 k=8 bf16"),
        build_case(x=background((2, 384), seed=2, scale=1.0, dtype=torch.float32), k=8, features={"model"},
                   label="Kimi-K2 M=2 N=384 k=8"),
    ]


def smaller_cases(case: Case):
    """Structural moves toward a smaller failing case: a contiguous layout, fewer rows, fewer
    columns (keeping k <= N), a smaller k. Each keeps the case valid; the minimizer keeps those
    that still fail."""
    x, k = case.inputs["x"], case.inputs["k"]
    M, N = x.shape
    if not (x.is_contiguous() and x.storage_offset() == 0):
        yield case.with_inputs(x=x.contiguous())
    for keep in row_subsets(M):
        yield case.with_inputs(x=x[keep].contiguous())
    for lanes in _column_subsets(N):
        yield case.with_inputs(x=x[:, torch.tensor(lanes, dtype=torch.long)].contiguous(), k=min(k, len(lanes)))
    for smaller_k in sorted({1, k - 1} - {0, k}):
        yield case.with_inputs(k=smaller_k)


def _column_subsets(N):
    """Halves, then quarters dropped, then (for small N) each single column dropped."""
    if N > 1:
        yield list(range(N // 2))
        yield list(range(N // 2, N))
        if N >= 8:
            q = N // 4
            for start in range(0, N, q):
                yield [e for e in range(N) if not start <= e < start + q]
        if N <= 32:
            for drop in range(N):
                yield [e for e in range(N) if e != drop]


__all__ = ["gate_topk_cases", "judge_cases", "model_cases", "bench_cases", "smaller_cases", "special_tensor",
           "next_in_dtype", "bulk_rows", "SIZES", "BULK_ELEMENTS", "JUDGE_CASES", "VALUE_KINDS", "SPECIALS", "NANS", "FLOORS", "ROW_HAZARDS"]


# M * N > 2^31: the last rows' addresses need 64-bit offsets (2.15e9 float32 elements: 8.6 GB);
# x, the outputs, and room for the kernel's own buffers.
BEYOND_INT32_M, BEYOND_INT32_N = 8_400_000, 256
BEYOND_INT32_BYTES = BEYOND_INT32_M * BEYOND_INT32_N * 4 + BEYOND_INT32_M * 8 * 8 + 2**30


def beyond_int32_inputs(device="cuda") -> tuple[dict, list[int]]:
    """The inputs and the rows whose outputs the verdict checks."""
    M, N = BEYOND_INT32_M, BEYOND_INT32_N
    gen = torch.Generator(device).manual_seed(0)
    return {"x": torch.rand(M, N, generator=gen, device=device), "k": 8}, [0, 1, M // 2, M - 2, M - 1]
