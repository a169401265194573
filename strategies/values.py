"""Shared Hypothesis strategies and builders: sizes, values, eps, layouts.

Bulk tensor values come from a seed that Hypothesis draws (a seeded torch.Generator), scaled
by a drawn magnitude; nasty values are sparse overrides at drawn positions, behind a boolean
the shrinker can switch off. Structure (shapes, which specials, where) is drawn explicitly, so a
shrunk case is small and its specials are few and visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

FLOAT_DTYPES = (torch.bfloat16, torch.float32, torch.float16)  # bf16 first: the task's dtype

# Hostile sizes for a dimension that kernels tile in blocks, each with why it is here.
HOSTILE_SIZES = (
    (1, "a single element: every block is a tail"),
    (2, "smallest even size"),
    (3, "smallest odd prime above 2"),
    (7, "prime, below any block"),
    (31, "one short of 32"),
    (32, "exactly a small block"),
    (33, "one past 32"),
    (127, "one short of 128"),
    (128, "exactly a common block"),
    (129, "one past 128"),
    (255, "one short of 256"),
    (256, "exactly a block"),
    (257, "one past 256"),
    (509, "prime near 512"),
    (511, "one short of 512"),
    (513, "one past 512"),
    (1023, "one short of 1024"),
    (1025, "one past 1024"),
    (2047, "one short of 2048"),
    (2049, "one past 2048"),
    (4099, "prime past 4096"),
    (7168, "DeepSeek-V4 hidden"),
)


def hostile_sizes(*, min_value: int = 1, max_value: int) -> st.SearchStrategy[int]:
    """Sizes from HOSTILE_SIZES within bounds, mixed with any size in range. Shrinks toward
    the first hostile size in range (small), then toward min_value."""
    if min_value < 0 or max_value < min_value:
        raise InvalidArgument(f"hostile_sizes: need 0 <= min_value <= max_value, got min_value={min_value}, "
                              f"max_value={max_value}")
    listed = [n for n, _ in HOSTILE_SIZES if min_value <= n <= max_value]
    plain = st.integers(min_value, max_value)
    return st.one_of(st.sampled_from(listed), plain) if listed else plain


# One GPU case in GPU_EXPLORE_ONE_IN draws its structure freely (a compile); the rest take one from
# their op's pool (see mostly_from).
GPU_EXPLORE_ONE_IN = 16


def mostly_from(pool: tuple, fresh: st.SearchStrategy, *, explore_one_in: int) -> st.SearchStrategy:
    """A value of `pool` most of the time, one draw in `explore_one_in` anything `fresh` gives.

    On a GPU a structure a kernel compiles for (constexprs, dtypes, integer arguments and strides
    specialized on == 1 and % 16) costs 0.3-1.5 s the first time a process meets it and ~30 ms a
    case after; drawn freely, nearly every GPU case compiled (hc_head's first run 0.41 s against
    0.034 s for its second, H200, 2026-12-04). A pool compiled once keeps every case but one in
    `explore_one_in` compile-free. The pool is fixed: a pool that grew with what a test explored
    would make a draw depend on the examples before it, which Hypothesis rejects
    (FlakyStrategyDefinition: the same choices met an index of another bound).
    Shrinks toward the pool's first value."""
    if not pool:
        raise InvalidArgument("mostly_from: pool is empty")
    if explore_one_in < 1:
        raise InvalidArgument(f"mostly_from: explore_one_in={explore_one_in}; need >= 1")
    return _mostly_from(tuple(pool), fresh, explore_one_in)


@st.composite
def _mostly_from(draw, pool, fresh, explore_one_in):
    return draw(fresh) if draw(sometimes(explore_one_in), label="explore?") else draw(st.sampled_from(pool))


def bulk_row_counts(pool: tuple, *, row_elements: int, max_elements: int,
                    drawn_rows: int | None = None) -> st.SearchStrategy[int]:
    """How many bulk rows a GPU case carries besides its drawn ones: 0 (the shrink target) or a
    count from `pool`, cut so the bulk holds at most `max_elements` values (`row_elements` a row).
    A case of one drawn row (`drawn_rows` == 1) stays a single row, decode's shape, three times in
    five: Triton specializes an integer argument equal to 1, and kernels take their own path there
    (a mutant computing one row with torch escaped 20 GPU cases that all carried bulk rows).

    Bulk rows are the row-batched part of a case: Hypothesis draws the structure, the value kind
    and a seed, and an op's bulk builder gives every row its own hazard with tensor ops from that
    seed. Hypothesis draws a hazard one row at a time (45% of gate_topk's GPU fuzz time on an
    H200), and a launch costs the same for 30 rows as for 30,000."""
    if not pool or any(n < 1 for n in pool) or row_elements < 0 or max_elements < 1:
        raise InvalidArgument(f"bulk_row_counts: pool={pool!r}, row_elements={row_elements}, "
                              f"max_elements={max_elements}; need counts >= 1 and max_elements >= 1")
    cap = max_elements // max(row_elements, 1)
    counts = tuple(dict.fromkeys(min(n, cap) for n in (0, *pool)))
    return st.sampled_from((0, 0) + counts if drawn_rows == 1 else counts)


JUDGE_FORM = "judge_form"  # the feature of a case drawn inside its op's judge domain


def judge_forms() -> st.SearchStrategy[bool]:
    """Whether a case is drawn in the judge's own form, inside its op's judge domain (the judge's
    dtype, a contiguous layout, shapes and options the judge sends): a third of the cases, the
    rest exploring every form. Shrinks toward True: a failure the judge's own form also shows is
    reported in it. Outside the domain a clean refusal is `unsupported`, not a failure; with every
    form drawn freely few cases fell inside it (tests/results/2026-12-02-h200-rows.md), so a
    kernel that failed to compile on the judge's own form escaped the property."""
    return st.sampled_from((True, False, False))


def sometimes(n: int) -> st.SearchStrategy[bool]:
    """True about once in n draws; shrinks to False (the nasty feature switched off)."""
    if n < 1:
        raise InvalidArgument(f"sometimes: n={n}; need n >= 1")
    return st.sampled_from((False,) * (n - 1) + (True,))


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**32 - 1)


# Scales of the bulk values: ordinary first (the shrink target), then small and large. The bulk
# rows' builders draw each row's from the same ones.
MAGNITUDES = (1.0, 1e-3, 1e3, 1e-1, 10.0, 1e-20, 1e18)


def magnitudes() -> st.SearchStrategy[float]:
    """Scale of the bulk values (MAGNITUDES)."""
    return st.sampled_from(MAGNITUDES)


def eps_values() -> st.SearchStrategy[float]:
    """eps edge cases; shrinks toward the model's 1e-6."""
    return st.sampled_from((1e-6, 0.0, 1e-5, 1e-2, 1.0, 1e-12, 2.0 ** -140, 1e3))


def special_values(dtype: torch.dtype) -> st.SearchStrategy[float]:
    """NaN, ±inf, ±0, the dtype's smallest subnormal and normal, and its largest finite values."""
    fi = torch.finfo(dtype)
    subnormal = float(fi.smallest_normal) * 2.0 ** -3
    return st.sampled_from((math.nan, math.inf, -math.inf, 0.0, -0.0, subnormal, -subnormal,
                            float(fi.smallest_normal), float(fi.max), -float(fi.max)))


def background(shape, *, seed: int, scale: float, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """randn from a generator seeded on `device`, drawn in float32, scaled, then cast (as the
    judge does). The same seed gives other values on another device type."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float32, device=device) * scale).to(dtype)


def generation_device(device: str, *, strategy: str) -> str:
    """Where a strategy builds its tensors: `device` ("cuda" in the GPU sizes, where building a
    case's millions of values on the host took most of its draw: 0.155 s median for hc_head,
    H200, 2026-12-04), or the CPU where there is no GPU (the CPU tests of the GPU sizes).
    Anything but "cpu" or "cuda" is `strategy`'s usage error."""
    if device not in ("cpu", "cuda"):
        raise InvalidArgument(f"{strategy}: device={device!r}; expected 'cpu' or 'cuda'")
    return device if device == "cpu" or torch.cuda.is_available() else "cpu"


def sparse_overrides(numel: int, values: st.SearchStrategy, *, max_count: int = 3):
    """A list of (flat position, value); empty when numel is 0. Shrinks to fewer, earlier positions."""
    if numel == 0:
        return st.just([])
    return st.lists(st.tuples(st.integers(0, numel - 1), values), min_size=1, max_size=max_count)


def apply_overrides(t: torch.Tensor, overrides) -> torch.Tensor:
    flat = t.clone().reshape(-1)
    for pos, value in overrides:
        flat[pos] = value
    return flat.reshape(t.shape)


@dataclass(frozen=True)
class Layout:
    """How a tensor sits in memory. kind: contiguous | padded (rows longer than the data) |
    stepped (every other element of the last dim) | offset (storage offset) | permuted (dims 0
    and 1 swapped in memory). Gaps are filled with NaN, so a kernel that reads them is caught."""
    kind: str = "contiguous"
    amount: int = 0

    def __str__(self) -> str:
        return self.kind if self.kind == "contiguous" else f"{self.kind}({self.amount})"


def layouts() -> st.SearchStrategy[Layout]:
    """Shrinks toward contiguous."""
    return st.one_of(
        st.just(Layout()),
        st.builds(Layout, st.just("padded"), st.integers(1, 17)),
        st.just(Layout("stepped", 2)),
        st.builds(Layout, st.just("offset"), st.integers(1, 7)),
        st.just(Layout("permuted", 0)),
    )


# The layouts the pool's GPU structures take in turn outside the judge's form (seed_layout).
SEED_LAYOUTS = (Layout(), Layout("padded", 3), Layout("stepped", 2), Layout("offset", 1), Layout("permuted", 0))


def seed_layout(i: int, *, judge_form: bool) -> Layout:
    """The layout of the i-th pooled GPU structure: contiguous in the judge's form, else SEED_LAYOUTS
    in turn, so the pool itself holds strided and offset inputs (a structure is compiled with its
    strides, so a layout drawn anew each case would compile anew)."""
    return Layout() if judge_form else SEED_LAYOUTS[i % len(SEED_LAYOUTS)]


def seed_bulk(i: int, bulk_pool: tuple, *, row_elements: int, max_elements: int, drawn_rows: int) -> int:
    """The bulk-row count of the i-th pooled GPU structure: none for the first (Hypothesis shrinks
    a failure toward it, and a fixture should hold the drawn rows alone) and for one drawn row
    (decode's shape, as bulk_row_counts draws it most of the time), else the pool's counts in turn,
    cut as bulk_row_counts cuts them."""
    if not bulk_pool or drawn_rows == 1 or i == 0:
        return 0
    return min(bulk_pool[i % len(bulk_pool)], max_elements // max(row_elements, 1))


def place(t: torch.Tensor, layout: Layout, *, fill: float = math.nan) -> torch.Tensor:
    """A view with `layout` whose logical values equal t; every gap element holds `fill`."""
    if layout.kind == "contiguous" or t.dim() == 0:
        return t.clone()
    if layout.kind == "offset":
        buf = torch.full((layout.amount + t.numel(),), fill, dtype=t.dtype, device=t.device)
        view = buf[layout.amount:].view(t.shape)
    elif layout.kind == "padded":
        buf = torch.full((*t.shape[:-1], t.shape[-1] + layout.amount), fill, dtype=t.dtype, device=t.device)
        view = buf[..., : t.shape[-1]]
    elif layout.kind == "stepped":
        buf = torch.full((*t.shape[:-1], t.shape[-1] * 2), fill, dtype=t.dtype, device=t.device)
        view = buf[..., ::2]
    elif layout.kind == "permuted" and t.dim() >= 2:
        buf = torch.full((t.shape[1], t.shape[0], *t.shape[2:]), fill, dtype=t.dtype, device=t.device)
        view = buf.transpose(0, 1)
    else:
        return t.clone()
    view.copy_(t)
    return view


# Special values by name, each a bit pattern in a dtype (special_tensor): NaNs of both signs and
# with a payload, the infinities, signed zeros, subnormals and the largest finite values.
SPECIAL_NAMES = ("nan", "-nan", "nan_payload", "inf", "-inf", "-0.0", "0.0", "subnormal", "-subnormal", "max", "-max")


def special_tensor(name: str, dtype: torch.dtype) -> torch.Tensor:
    """One special value of `dtype` as a 0-dim tensor, built from its bits where a Python float
    cannot say it: a sign-set NaN ranks below -inf under a raw bit key, a NaN with a payload above
    the canonical NaN."""
    if name not in SPECIAL_NAMES:
        raise InvalidArgument(f"special_tensor: name={name!r}; expected one of {SPECIAL_NAMES}")
    fi = torch.finfo(dtype)
    if name in ("nan", "-nan", "nan_payload"):
        ints, bits = {torch.float32: (torch.int32, 32), torch.bfloat16: (torch.int16, 16),
                      torch.float16: (torch.int16, 16)}[dtype]
        exp_bits = {torch.float32: 8, torch.bfloat16: 8, torch.float16: 5}[dtype]
        mant = bits - 1 - exp_bits
        pattern = ((1 << exp_bits) - 1) << mant | 1 << (mant - 1)   # quiet NaN
        if name == "nan_payload":
            pattern |= 1                                            # lowest payload bit set too
        if name == "-nan":
            pattern |= 1 << (bits - 1)
        signed = pattern - (1 << bits) if pattern >= 1 << (bits - 1) else pattern
        return torch.tensor(signed, dtype=ints).view(dtype)
    value = {"inf": math.inf, "-inf": -math.inf, "-0.0": -0.0, "0.0": 0.0,
             "subnormal": float(fi.smallest_normal) * 2.0 ** -3, "-subnormal": -float(fi.smallest_normal) * 2.0 ** -3,
             "max": float(fi.max), "-max": -float(fi.max)}[name]
    return torch.tensor(value, dtype=dtype)


def next_in_dtype(value: torch.Tensor, *, up: bool) -> torch.Tensor:
    """The neighbour of a 0-dim float value one ulp of its own dtype up or down, through its bits
    (torch.nextafter has no bf16/fp16 kernel on the CPU): a larger magnitude is the next larger
    integer of the bits for either sign. From +-0.0 up is the smallest positive subnormal, down
    its negative. NaN and the infinities stay as they are."""
    return steps_in_dtype(value.reshape(1), torch.tensor([up]))[0]


def specials_in_rows(x: torch.Tensor, rows: torch.Tensor, names: tuple, gen: torch.Generator) -> None:
    """In place: each row of x [B, N] marked in `rows` (bool [B]) gets one to three of the special
    values `names` (special_tensor, in x's dtype) at drawn columns, with tensor ops (the bulk rows'
    builders)."""
    B, N = x.shape
    if B == 0 or N == 0:
        return
    dev = gen.device
    table = torch.stack([special_tensor(name, x.dtype) for name in names]).to(dev)
    index, count = torch.arange(B, device=dev), torch.randint(1, 4, (B,), generator=gen, device=dev)
    for j in range(3):
        cols = torch.randint(0, N, (B,), generator=gen, device=dev)
        picks = torch.randint(0, len(names), (B,), generator=gen, device=dev)
        mine = rows & (count > j)
        x[index[mine], cols[mine]] = table[picks[mine]]


def steps_in_dtype(values: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """next_in_dtype elementwise: each value one ulp of its dtype up (where `up`) or down, through
    its bits; +-0.0 steps to the smallest subnormal of the step's sign; NaN and +-inf stay."""
    ints = torch.int32 if values.dtype == torch.float32 else torch.int16
    bits = values.view(ints).int()
    away = up == (values > 0)                     # a larger magnitude: the next integer of the bits
    stepped = (bits + torch.where(away, 1, -1)).to(ints).view(values.dtype)
    tiny = torch.tensor(1, dtype=ints, device=values.device).view(values.dtype)
    stepped = torch.where(values == 0, torch.where(up, tiny, -tiny), stepped)
    return torch.where(values.isfinite(), stepped, values)


def tie_rows(x: torch.Tensor, order: torch.Tensor, k: int, *, ties: torch.Tensor, near_ties: torch.Tensor,
             gen: torch.Generator) -> None:
    """Ties and near ties in rows of x [B, N], in place, with tensor ops (the bulk rows' builders).
    order [B, N] is each row's lanes by rank, as the op ranks them. An anchor lane sits at a rank
    below k, or in half the rows at k - 1 with its partners from below the top k (a tie across the
    boundary). Rows of `ties` get the anchor's value copied onto one to three other lanes; rows of
    `near_ties` get one other lane one ulp of x's dtype above or below it (steps_in_dtype)."""
    B, N = x.shape
    if B == 0 or N < 2:
        return
    dev = gen.device
    rows = torch.arange(B, device=dev)
    at_boundary = (torch.rand(B, generator=gen, device=dev) < 0.5) & (k < N)
    anchor_rank = torch.where(at_boundary, k - 1, torch.randint(0, k, (B,), generator=gen, device=dev))
    anchor = x[rows, order[rows, anchor_rank]].clone()

    def partner():
        below = torch.randint(min(k, N - 1), N, (B,), generator=gen, device=dev)
        other = torch.randint(0, N - 1, (B,), generator=gen, device=dev)
        other = other + (other >= anchor_rank).long()                  # any rank but the anchor's
        return order[rows, torch.where(at_boundary, below, other)]

    copies = torch.randint(1, 4, (B,), generator=gen, device=dev)
    for j in range(3):
        lanes, mine = partner(), ties & (copies > j)
        x[rows[mine], lanes[mine]] = anchor[mine]
    lanes, up = partner(), torch.rand(B, generator=gen, device=dev) < 0.5
    x[rows[near_ties], lanes[near_ties]] = steps_in_dtype(anchor, up)[near_ties]
