"""hc_head cases: shapes, eps edge cases, special values, all-zero tokens, layouts; the judge's
seven cases; and the structural moves the minimizer uses to make a failing case smaller."""

from __future__ import annotations

import functools
import math

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from strategies.case import Case, LazyInputs
from strategies.minimize import row_subsets
from strategies.values import (FLOAT_DTYPES, JUDGE_FORM, MAGNITUDES, SPECIAL_NAMES, Layout, apply_overrides, background,
                               GPU_EXPLORE_ONE_IN, bulk_row_counts, eps_values, hostile_sizes, judge_forms, layouts,
                               magnitudes, mostly_from, place, seed_bulk, seed_layout, seeds, sometimes,
                               sparse_overrides, special_values, specials_in_rows, generation_device)

OP = "hc_head"

# Case sizes by where the kernel runs: the CPU interpreter costs ~0.1 s a launch and grows with
# the program count (T) and the blocks per row; a GPU takes model-sized rows.
SIZES = {
    "cpu": dict(max_tokens=6, max_hc_mult=8, max_hidden=600),
    # On a GPU, whole structures (tokens, hc_mult, hidden, dtype, bulk tokens, layout) mostly come
    # from GPU_STRUCTURES (below; strategies.values.mostly_from): one case in 16 draws a new one, and
    # a kernel compiles once for each. Besides its drawn tokens a GPU case carries a bulk of tokens (0 or
    # a count of bulk_tokens, up to BULK_ELEMENTS values), each with its own magnitude and hazard
    # (bulk_tokens below).
    # On a GPU the tokens are built on it, and a bulk holds up to 16M values (a DeepSeek-V4 token
    # is 28,672 of them: 585 tokens).
    "cuda": dict(max_tokens=300, max_hc_mult=8, max_hidden=8192, structure_pool=None, bulk_tokens=(1024, 8192),
                 bulk_elements=1 << 24, device="cuda"),
}
# (T, hc_mult, hidden, dtype) a GPU run mostly reuses: the judge's shapes (its first, one token of
# 2 x 128, first: the shrink target, and the one small case without bulk tokens, where kernels
# take small-problem paths) and DeepSeek-V4's hidden (one token: decode), a token count past a
# block, then hostile ones: a prime hidden in float32, hc_mult 8 over a 33-wide tail in float16,
# hc_mult 1.
GPU_STRUCTURES = (
    (1, 2, 128, torch.bfloat16), (1, 4, 7168, torch.bfloat16), (37, 4, 256, torch.bfloat16), (129, 2, 512, torch.bfloat16),
    (64, 4, 7168, torch.bfloat16), (17, 2, 4096, torch.bfloat16), (5, 3, 2049, torch.float32),
    (16, 8, 33, torch.float16), (3, 1, 128, torch.bfloat16),
)
SIZES["cuda"]["structure_pool"] = GPU_STRUCTURES
BULK_ELEMENTS = 1 << 22
JUDGE_MAX_HIDDEN = 16384  # the judge domain's largest hidden (oracles/ops/hc_head.py)

# What each bulk token gets, "none" first: all zero (a zero mean square), one value throughout,
# or specials (NaN, +-inf, +-0.0, subnormals, the dtype's extremes) at one to three places.
TOKEN_HAZARDS = ("none", "zero", "constant", "specials")
# Each bulk token's magnitude: ordinary about half the time, else one of MAGNITUDES.
TOKEN_SCALES = (1.0,) * 5 + MAGNITUDES

# The judge's cases (the contract: oracles/ops/hc_head.py): (T, hc_mult, hidden); the last four
# are also its bench.
JUDGE_SHAPES = ((1, 2, 128), (37, 4, 256), (129, 2, 512),
                (1, 4, 7168), (128, 4, 7168), (2048, 4, 7168), (8192, 4, 7168))


def build_case(*, x, hc_fn_seed=0, hc_fn_scale=0.02, hc_scale=1.5, hc_base_seed=1, hc_base_scale=0.1,
               norm_eps=1e-6, hc_eps=1e-3, features=(), label="") -> Case:
    T, h, H = x.shape
    return Case(OP, {
        "x": x,
        "hc_fn": background((h, h * H), seed=hc_fn_seed, scale=hc_fn_scale, dtype=torch.float32),
        "hc_scale": torch.tensor([hc_scale], dtype=torch.float32),
        "hc_base": background((h,), seed=hc_base_seed, scale=hc_base_scale, dtype=torch.float32),
        "norm_eps": norm_eps,
        "hc_eps": hc_eps,
    }, frozenset(features), label)


def bulk_tokens(B: int, hc_mult: int, hidden: int, *, seed: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """B tokens [B, hc_mult, hidden], each with its own magnitude (TOKEN_SCALES) and one hazard
    (TOKEN_HAZARDS), all from one generator seeded on `device`, with tensor ops."""
    gen = torch.Generator(device=device).manual_seed(seed)
    scales = torch.tensor(TOKEN_SCALES, dtype=torch.float64, device=device)[
        torch.randint(0, len(TOKEN_SCALES), (B,), generator=gen, device=device)]
    x = (torch.randn(B, hc_mult, hidden, generator=gen, dtype=torch.float64, device=device)
         * scales[:, None, None]).to(dtype)
    if B == 0 or hc_mult * hidden == 0:
        return x
    hazard = torch.randint(0, len(TOKEN_HAZARDS), (B,), generator=gen, device=device)
    flat = x.view(B, -1)
    specials_in_rows(flat, hazard == TOKEN_HAZARDS.index("specials"), SPECIAL_NAMES, gen)
    flat[hazard == TOKEN_HAZARDS.index("constant")] = flat[hazard == TOKEN_HAZARDS.index("constant")][:, :1]
    flat[hazard == TOKEN_HAZARDS.index("zero")] = 0
    return x


def hc_head_cases(*, min_tokens: int = 0, max_tokens: int = 6, max_hc_mult: int = 8, max_hidden: int = 600,
                  dtypes=FLOAT_DTYPES, structure_pool: tuple = (), bulk_tokens: tuple = (),
                  bulk_elements: int = BULK_ELEMENTS, device: str = "cpu") -> st.SearchStrategy[Case]:
    """hc_head cases; with `structure_pool` (GPU sizes) most cases take their whole structure from
    it (mostly_from: one case in GPU_EXPLORE_ONE_IN explores), bulk tokens and layout included; with
    `bulk_tokens` (GPU sizes) 0 or that many more tokens after the drawn ones (bulk_tokens), at
    most `bulk_elements` values; x is built on `device` (generation_device). A
    third of the cases are in the judge's form (judge_forms): bf16, contiguous, hc_mult 2 or 4,
    hidden a multiple of 128. Shrinks toward: the judge's form, one token, hc_mult 2 (1 outside
    that form), a small hidden, bf16, contiguous, ordinary eps (1e-6 / 1e-3), no specials, no zero
    tokens, unit-scale values, no bulk."""
    if not 0 <= min_tokens <= max_tokens:
        raise InvalidArgument(f"hc_head_cases: need 0 <= min_tokens <= max_tokens, got {min_tokens}, {max_tokens}")
    if max_hc_mult < 1:
        raise InvalidArgument(f"hc_head_cases: max_hc_mult={max_hc_mult}; need >= 1")
    if max_hidden < 1:
        raise InvalidArgument(f"hc_head_cases: max_hidden={max_hidden}; need >= 1")
    if not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        raise InvalidArgument(f"hc_head_cases: dtypes={dtypes!r}; need a non-empty subset of {FLOAT_DTYPES}")
    for entry in structure_pool:
        T, h, H, dtype = entry
        if not (min_tokens <= T <= max_tokens and 1 <= h <= max_hc_mult and 1 <= H <= max_hidden and dtype in dtypes):
            raise InvalidArgument(f"hc_head_cases: structure_pool entry {entry!r} is outside min_tokens={min_tokens}, "
                                  f"max_tokens={max_tokens}, max_hc_mult={max_hc_mult}, max_hidden={max_hidden}, "
                                  f"dtypes={dtypes}")
    if any(n < 1 for n in bulk_tokens):
        raise InvalidArgument(f"hc_head_cases: bulk_tokens={bulk_tokens!r}; need counts >= 1")
    if bulk_elements < 1:
        raise InvalidArgument(f"hc_head_cases: bulk_elements={bulk_elements}; need >= 1")
    return _hc_head_cases(min_tokens, max_tokens, max_hc_mult, max_hidden, tuple(dtypes), tuple(structure_pool),
                          tuple(bulk_tokens), bulk_elements, generation_device(device, strategy="hc_head_cases"))


def _in_judge_form(T: int, h: int, H: int, dtype) -> bool:
    return T >= 1 and h in (2, 4) and H % 128 == 0 and H <= JUDGE_MAX_HIDDEN and dtype == torch.bfloat16


def _judge_hidden(max_hidden: int) -> st.SearchStrategy[int]:
    """Hidden sizes inside the judge domain: multiples of 128 up to 16384 (and max_hidden)."""
    return st.integers(1, min(max_hidden, JUDGE_MAX_HIDDEN) // 128).map(lambda n: 128 * n)


def _draw_structure(draw, judge_form, min_tokens, max_tokens, max_hc_mult, hidden, judge_hidden, dtypes):
    """(T, hc_mult, hidden, dtype) drawn freely; in the judge's form: bf16, at least one token,
    hc_mult 2 or 4, hidden a multiple of 128 up to the judge's largest. A plain function, not a
    composite: a span of its own would change the CPU's derandomized draws (Hypothesis mutates
    examples span by span), on which the CPU tier's claims rest."""
    if judge_form:
        T = draw(st.integers(max(min_tokens, 1), max_tokens), label="T")
        h = draw(st.sampled_from([m for m in (2, 4) if m <= max_hc_mult]), label="hc_mult")
        return T, h, draw(judge_hidden, label="hidden"), torch.bfloat16
    T = draw(st.integers(min_tokens, max_tokens), label="T")
    h = draw(st.integers(1, max_hc_mult), label="hc_mult")
    H = draw(hidden, label="hidden")
    return T, h, H, draw(st.sampled_from(dtypes), label="dtype")


@st.composite
def _gpu_structure(draw, structure, bulk_pool, bulk_elements, judge_form):
    """(T, hc_mult, hidden, dtype, bulk tokens, layout): all a kernel is compiled for, drawn freely."""
    T, h, H, dtype = structure(draw)
    bulk = draw(bulk_row_counts(bulk_pool, row_elements=h * H, max_elements=bulk_elements, drawn_rows=T),
                label="bulk tokens") if bulk_pool else 0
    return T, h, H, dtype, bulk, Layout() if judge_form else draw(layouts(), label="x_layout")


@st.composite
def _hc_head_cases(draw, min_tokens, max_tokens, max_hc_mult, max_hidden, dtypes, pool, bulk_pool, bulk_elements,
                   device):
    # A third of the cases in the judge's own form (strategies.values.judge_forms): bf16, contiguous,
    # hc_mult 2 or 4, hidden a multiple of 128, at least one token; their values stay as nasty.
    judge_form = (max_hidden >= 128 and max_tokens >= 1 and max_hc_mult >= 2 and torch.bfloat16 in dtypes
                  and draw(judge_forms(), label="judge form?"))
    hidden, judge_hidden = hostile_sizes(max_value=max_hidden), (_judge_hidden(max_hidden) if judge_form else None)

    def structure(draw):
        return _draw_structure(draw, judge_form, min_tokens, max_tokens, max_hc_mult, hidden, judge_hidden, dtypes)
    bulk = layout = None
    if judge_form:
        pool = tuple(entry for entry in pool if _in_judge_form(*entry))
    if pool:  # GPU sizes: the whole compiled structure, bulk tokens and layout included, mostly reused
        seeded = tuple((T, h, H, dtype, seed_bulk(i, bulk_pool, row_elements=h * H, max_elements=bulk_elements,
                                                  drawn_rows=T), seed_layout(i, judge_form=judge_form))
                       for i, (T, h, H, dtype) in enumerate(pool))
        T, h, H, dtype, bulk, layout = draw(mostly_from(seeded, _gpu_structure(structure, bulk_pool, bulk_elements, judge_form),
                                                        explore_one_in=GPU_EXPLORE_ONE_IN), label="structure")
    else:
        T, h, H, dtype = structure(draw)
    features = {f"dtype={str(dtype).split('.')[-1]}"} | ({JUDGE_FORM} if judge_form else set())
    x = background((T, h, H), seed=draw(seeds(), label="x_seed"), scale=draw(magnitudes(), label="x_scale"),
                   dtype=dtype, device=device)
    # Nasty features are drawn rarely (one case in three or four) behind switches the shrinker
    # turns off: most cases stay finite and ordinary, which is where accuracy bugs show.
    if T and draw(sometimes(4), label="zero_tokens?"):
        for t in draw(st.lists(st.integers(0, T - 1), min_size=1, max_size=2, unique=True), label="zero_tokens"):
            x[t] = 0
        features.add("zero_token")
    if draw(sometimes(3), label="specials?"):
        overrides = draw(sparse_overrides(x.numel(), special_values(dtype)), label="x_specials")
        x = apply_overrides(x, overrides)
        features |= {_special_feature(v) for _, v in overrides}
    if bulk is None:
        bulk = draw(bulk_row_counts(bulk_pool, row_elements=h * H, max_elements=bulk_elements, drawn_rows=T),
                    label="bulk tokens") if bulk_pool else 0
    if bulk:
        x = torch.cat([x, bulk_tokens(bulk, h, H, seed=draw(seeds(), label="bulk_seed"), dtype=dtype, device=device)])
        features.add("bulk_tokens")
    if layout is None:
        layout = Layout() if judge_form else draw(layouts(), label="x_layout")
    x = place(x, layout)
    if layout.kind != "contiguous":
        features.add(f"layout={layout.kind}")
    norm_eps = draw(eps_values(), label="norm_eps")
    hc_eps = draw(st.sampled_from((1e-3, 0.0, 1e-6, 1.0)), label="hc_eps")
    if norm_eps == 0.0:
        features.add("norm_eps=0")
    if x.shape[0] == 0:
        features.add("T=0")
    if H % 32:
        features.add("tail")
    if h == 1:
        features.add("hc_mult=1")
    return build_case(
        x=x,
        hc_fn_seed=draw(seeds(), label="hc_fn_seed"),
        hc_fn_scale=draw(st.sampled_from((0.02, 1.0, 1e-3, 30.0)), label="hc_fn_scale"),
        hc_scale=draw(st.sampled_from((1.5, 1.0, -2.0, 100.0, 0.0)), label="hc_scale"),
        hc_base_seed=draw(seeds(), label="hc_base_seed"),
        hc_base_scale=draw(st.sampled_from((0.1, 10.0)), label="hc_base_scale"),
        norm_eps=norm_eps, hc_eps=hc_eps, features=features)


def _special_feature(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "signed_zero"
    return "huge" if abs(value) > 1 else "denormal"


def judge_cases(device: str | torch.device = "cpu") -> tuple[Case, ...]:
    """The judge's seven cases (built once per device and process: the bench-size ones take ~4 s
    on a CPU, and every test module asks for them), built as its test file builds them (tests/test_hc_head.py of
    flagos-ai/FlagGems-sglang): on the chip under test, one torch.Generator(device).manual_seed(0)
    a case drawing, in order, x = randn(T, hc_mult, hidden) float32 cast to bf16, hc_fn =
    randn(hc_mult, hc_mult * hidden) * 0.02, hc_base = 0.1 randn(hc_mult); hc_scale = [1.5],
    norm_eps 1e-6, hc_eps 1e-3. CUDA and CPU generators draw different numbers: build them on the
    device the kernel runs on. The Case keeps CPU copies; Case.to(device) puts every tensor back."""
    return _judge_cases(str(device))


@functools.lru_cache(maxsize=2)
def _judge_cases(device: str) -> tuple[Case, ...]:
    # Each case's tensors are built when first read (LazyInputs): collecting the tests builds none.
    return tuple(Case(OP, LazyInputs(functools.partial(_judge_inputs, T, h, H, device),
                                     {"x": T * h * H, "hc_fn": h * h * H, "hc_scale": 1, "hc_base": h}),
                      frozenset({"judge"}), f"judge T={T} hc_mult={h} hidden={H}")
                 for T, h, H in JUDGE_SHAPES)


def _judge_inputs(T: int, h: int, H: int, device: str) -> dict:
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(T, h, H, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    hc_fn = torch.randn(h, h * H, generator=gen, device=device, dtype=torch.float32) * 0.02
    hc_base = 0.1 * torch.randn(h, generator=gen, device=device, dtype=torch.float32)
    return {"x": x.cpu(), "hc_fn": hc_fn.cpu(), "hc_scale": torch.tensor([1.5]), "hc_base": hc_base.cpu(),
            "norm_eps": 1e-6, "hc_eps": 1e-3}


def smaller_cases(case: Case):
    """Structural moves toward a smaller failing case: fewer tokens, fewer streams, a shorter
    hidden, a contiguous x. Each keeps the case valid; the minimizer keeps those that still fail."""
    x = case.inputs["x"]
    T, h, H = x.shape
    W = case.inputs["hc_fn"]
    if not (x.is_contiguous() and x.storage_offset() == 0):
        yield case.with_inputs(x=x.contiguous())
    for keep in row_subsets(T):
        yield case.with_inputs(x=x[keep].contiguous())
    for streams in _stream_subsets(h):
        cols = torch.cat([torch.arange(s * H, (s + 1) * H) for s in streams])
        yield case.with_inputs(x=x[:, streams].contiguous(), hc_fn=W[streams][:, cols].contiguous(),
                               hc_base=case.inputs["hc_base"][streams].contiguous())
    for new_H in sorted({1, H // 2, H - 1} - {0, H}):
        cols = torch.cat([torch.arange(s * H, s * H + new_H) for s in range(h)])
        yield case.with_inputs(x=x[:, :, :new_H].contiguous(), hc_fn=W[:, cols].contiguous())


def _stream_subsets(h):
    if h > 1:
        yield list(range(h // 2))
        for s in range(h):
            yield [j for j in range(h) if j != s]


__all__ = ["hc_head_cases", "bulk_tokens", "judge_cases", "smaller_cases", "SIZES", "BULK_ELEMENTS", "TOKEN_HAZARDS",
           "JUDGE_SHAPES", "Layout"]


# The judge's bench grid (its last four cases) plus one larger size, not in the averages: how a
# kernel scales past the judge's sizes. Inputs as its test builds them (judge_cases).
BENCH_T = tuple(T for T, _, _ in JUDGE_SHAPES[-4:])
_, BENCH_HC_MULT, BENCH_HIDDEN = JUDGE_SHAPES[-1]
BENCH_LARGE_T = (32768,)


def bench_inputs(T: int, device) -> dict:
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(T, BENCH_HC_MULT, BENCH_HIDDEN, generator=gen, device=device).to(torch.bfloat16)
    hc_fn = 0.02 * torch.randn(BENCH_HC_MULT, BENCH_HC_MULT * BENCH_HIDDEN, generator=gen, device=device)
    hc_base = 0.1 * torch.randn(BENCH_HC_MULT, generator=gen, device=device)
    return {"x": x, "hc_fn": hc_fn, "hc_scale": torch.tensor([1.5], device=device), "hc_base": hc_base,
            "norm_eps": 1e-6, "hc_eps": 1e-3}


def bench_cases():
    """(label, size, is_bench_case, builder(size, device)) for oracles/tools/bench.py."""
    return [(f"T={T}", T, T in BENCH_T, bench_inputs) for T in BENCH_T + BENCH_LARGE_T]


# T * hc_mult * hidden > 2^31: the last tokens' addresses need 64-bit offsets (2.15e9 elements of
# x); x and y, plus room for the kernel's own buffers.
BEYOND_INT32_T = 75_000
BEYOND_INT32_BYTES = 2 * BEYOND_INT32_T * 4 * 7168 * 2


def beyond_int32_inputs(device="cuda") -> tuple[dict, list[int]]:
    """The inputs (bf16 x, no float32 copy) and the tokens whose outputs the verdict checks."""
    T, h, H = BEYOND_INT32_T, 4, 7168
    gen = torch.Generator(device).manual_seed(0)
    inputs = {"x": torch.randn(T, h, H, generator=gen, device=device, dtype=torch.bfloat16),
              "hc_fn": 0.02 * torch.randn(h, h * H, generator=gen, device=device),
              "hc_scale": torch.tensor([1.5], device=device),
              "hc_base": 0.1 * torch.randn(h, generator=gen, device=device), "norm_eps": 1e-6, "hc_eps": 1e-3}
    return inputs, [0, 1, T // 2, T - 2, T - 1]
