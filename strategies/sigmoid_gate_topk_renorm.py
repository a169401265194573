"""sigmoid_gate_topk_renorm cases: expert counts around block sizes, k from 1 to N, S = 0 and S > k,
exact / bias-made / near ties inside the top k and across its boundary, all-equal rows, NaN, ±inf
and huge logits, biases that push every score below zero, route and global scales, strided
logits; on a GPU, thousands of bulk rows with a hazard each; the judge's nine cases; and the
structural moves the minimizer uses."""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from strategies.case import Case
from strategies.minimize import row_subsets
from strategies.values import (FLOAT_DTYPES, JUDGE_FORM, SPECIAL_NAMES, Layout, apply_overrides, background,
                               GPU_EXPLORE_ONE_IN, bulk_row_counts, hostile_sizes, judge_forms, layouts, magnitudes,
                               mostly_from, place, seed_bulk, generation_device, seed_layout, seeds, sparse_overrides, special_values, specials_in_rows, tie_rows)

OP = "sigmoid_gate_topk_renorm"

# Case sizes by where the kernel runs: the CPU interpreter costs ~0.1 s a launch, grows with the
# program count (T), and a top-k by iterative max costs k reductions a token, so k stays small
# there; a GPU takes model-sized rows. k = N is drawn only while N <= max_k.
SIZES = {
    "cpu": dict(max_tokens=6, max_experts=260, max_shared=4, max_k=16),
    # On a GPU, whole structures (tokens, experts, shared experts, k, dtype, bulk rows, layout)
    # mostly come from GPU_STRUCTURES (below; strategies.values.mostly_from): one case in 16 draws
    # a new one, and a kernel compiles once for each. Besides its drawn tokens a GPU case carries a bulk of rows
    # (0 or a count of bulk_rows, up to BULK_ELEMENTS logits), each with its own hazard (bulk_rows below).
    "cuda": dict(max_tokens=300, max_experts=1024, max_shared=8, max_k=64, structure_pool=None,
                 bulk_rows=(2048, 16384), device="cuda"),
}
# (T, N, S, k, dtype) a GPU run mostly reuses: the judge's shapes (one token: decode), DeepSeek-V3's
# 256 experts with k = 8, Kimi K2's 384, then hostile ones: a prime N, k = N, a tail in float32,
# no shared expert in float16.
GPU_STRUCTURES = (
    (1, 32, 1, 3, torch.bfloat16), (37, 128, 3, 5, torch.bfloat16), (83, 64, 1, 6, torch.bfloat16),
    (64, 256, 1, 8, torch.bfloat16), (16, 384, 1, 8, torch.bfloat16), (9, 257, 2, 12, torch.bfloat16),
    (33, 48, 4, 48, torch.float32), (5, 1000, 0, 16, torch.float16),
)
SIZES["cuda"]["structure_pool"] = GPU_STRUCTURES
BULK_ELEMENTS = 1 << 22
# The judge domain's bounds (oracles/ops/sigmoid_gate_topk_renorm.py) a judge-form case keeps to.
JUDGE_MAX_EXPERTS, JUDGE_MAX_SHARED, JUDGE_MAX_K = 512, 8, 16

# The judge's cases (the contract: oracles/ops/sigmoid_gate_topk_renorm.py): (T, N, S, k,
# route_scale, global_scale); the last five are its bench. The first case's scales are the official
# test's defaults (route_scale=1.0, global_scale=1.0: tests/test_sigmoid_gate_topk_renorm.py of
# flagos-ai/FlagGems-sglang, read at 43aba8c on 2026-12-01); the fourth gives 1.0 for both itself.
JUDGE_CASES = ((1, 32, 1, 3, 1.0, 1.0), (37, 128, 3, 5, 1.5, 0.8), (83, 64, 1, 6, 2.0, 1.2), (9, 256, 4, 12, 1.0, 1.0),
               *((m, 128, 3, 5, 1.5, 0.8) for m in (1, 8, 64, 512, 4096)))

# How the per-expert bias is drawn, each with why. The first is the judge's and the shrink target.
BIAS_KINDS = (
    ("judge", "0.1 randn: the judge's bias"),
    ("zero", "no bias: equal logits are exact ties (frequent in bf16)"),
    ("negative", "0.1 randn - 2: every score below 0, so a padding lane scored 0 or 0.5 would win"),
    ("constant", "-3 everywhere: an all-equal row is one big tie, and every score is negative"),
    ("large_negative", "randn - 1e4: scores below -1e4, where float32 rounding merges sigmoids into ties"),
    ("positive", "0.1 randn + 2"),
    ("wide", "10 randn: the bias dominates the choice, sigmoid only breaks near ties"),
)
ROUTE_SCALES = (1.0, 2.5, 1.5, 2.0, 0.5, 0.0, -1.0, 1e3)  # 2.5: DeepSeek-V3; 0 and -1 are legal floats
GLOBAL_SCALES = (1.0, 0.8, 1.2, 0.5, 37.5, 1e-3)
# The official test passes torch.tensor(gs, device=device, dtype=torch.float32): a 0-dim float32
# tensor on the logits' device (the shrink target). The reference calls global_scale.float(), so
# any float32 tensor that broadcasts is valid for it; the other two forms are valid inputs the
# judge never sends (outside the judge domain: a clean refusal of them is `unsupported`). A
# Python float is not drawn: the reference itself raises on it.
GLOBAL_SCALE_FORMS = ("0-dim", "[1]", "0-dim on host")

# What each bulk row gets, one each (bulk_rows); "none" (the background row as drawn) first.
ROW_HAZARDS = ("none", "all_equal", "ties", "near_tie", "special_routed", "specials")
# The non-finite routed logits of special_routed?, NaN twice as often (as the drawn case has them).
ROUTED_SPECIALS = (math.nan, math.inf, -math.inf, math.nan)


def make_bias(kind: str, n: int, *, seed: int) -> torch.Tensor:
    noise = background((n,), seed=seed, scale=1.0, dtype=torch.float32)
    return {
        "judge": lambda: 0.1 * noise,
        "zero": lambda: torch.zeros(n),
        "negative": lambda: 0.1 * noise - 2.0,
        "constant": lambda: torch.full((n,), -3.0),
        "large_negative": lambda: noise - 1e4,
        "positive": lambda: 0.1 * noise + 2.0,
        "wide": lambda: 10.0 * noise,
    }[kind]().to(torch.float32)


def make_global_scale(form: str, value: float) -> torch.Tensor:
    if form not in GLOBAL_SCALE_FORMS:
        raise InvalidArgument(f"make_global_scale: form={form!r}; expected one of {GLOBAL_SCALE_FORMS}")
    if form == "[1]":
        return torch.tensor([value], dtype=torch.float32)
    return torch.tensor(value, dtype=torch.float32)


def bulk_rows(B: int, N: int, S: int, k: int, *, bias: torch.Tensor, seed: int, scale: float,
              dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """B more logits rows [B, N + S] (background of `scale`), each with one hazard of ROW_HAZARDS
    as the drawn tokens get them (_sigmoid_gate_topk_renorm_cases), all from one seeded generator
    with tensor ops: all routed lanes equal; a tie, the logit of the lane at a rank r < k of the
    row's float32 score copied onto up to three lanes (from below the top k at the boundary
    r = k - 1); a near tie, such a logit one ulp of the dtype up or down; NaN or +-inf at a routed
    lane; up to three SPECIAL_NAMES anywhere in the row. The bias is shared by every row, so a
    copied logit is an exact score tie only where the two lanes' biases are equal (the zero and
    constant bias kinds); elsewhere it is a near tie as close as the biases are. Built on `device`:
    on the host, the sort of a GPU case's bulk was most of its draw (0.29 s an example on a 2-core
    CPU, 2026-12-06)."""
    x = background((B, N + S), seed=seed, scale=scale, dtype=dtype, device=device)
    if B == 0:
        return x
    gen = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
    hazard = torch.randint(0, len(ROW_HAZARDS), (B,), generator=gen, device=device)
    rows = torch.arange(B, device=device)

    def rows_of(name):
        return hazard == ROW_HAZARDS.index(name)

    if N > 1:   # one routed lane has nothing to tie with
        sel = torch.sigmoid(x[:, :N].float()) + bias.to(device)
        order = torch.sort(sel, dim=-1, descending=True, stable=True).indices       # [B, N]: the lane at each rank
        tie_rows(x[:, :N], order, k, ties=rows_of("ties"), near_ties=rows_of("near_tie"), gen=gen)

    routed_specials = torch.tensor(ROUTED_SPECIALS, dtype=dtype, device=device)
    lanes, mine = torch.randint(0, N, (B,), generator=gen, device=device), rows_of("special_routed")
    picks = torch.randint(0, len(ROUTED_SPECIALS), (B,), generator=gen, device=device)
    x[rows[mine], lanes[mine]] = routed_specials[picks][mine]
    specials_in_rows(x, rows_of("specials"), SPECIAL_NAMES, gen)
    x[:, :N] = torch.where(rows_of("all_equal")[:, None], x[:, :1], x[:, :N])
    return x


def build_case(*, logits, k, n_shared_experts, bias, route_scale=1.0, global_scale=None, features=(),
               label="", global_scale_on_host=False) -> Case:
    return Case(OP, {
        "logits": logits,
        "k": int(k),
        "n_shared_experts": int(n_shared_experts),
        "route_scale": float(route_scale),
        "global_scale": torch.tensor(1.0) if global_scale is None else global_scale,
        "bias": bias,
    }, frozenset(features), label, frozenset({"global_scale"}) if global_scale_on_host else frozenset())


def sigmoid_gate_topk_renorm_cases(*, min_tokens: int = 0, max_tokens: int = 6, max_experts: int = 260,
                                   max_shared: int = 4, max_k: int = 16,
                                   dtypes=FLOAT_DTYPES, structure_pool: tuple = (),
                                   bulk_rows: tuple = (), device: str = "cpu") -> st.SearchStrategy[Case]:
    """sigmoid_gate_topk_renorm cases.

    Structure is drawn explicitly: T, N (hostile sizes: 1, primes, 31/32/33, 127/128/129,
    255/256/257, ...), S, k (or k = N), dtype; bulk values from seeds; every nasty feature behind
    a boolean: exact ties (one logit and its bias copied to other lanes, inside the top k or
    straddling its boundary), bias-made ties, near ties one float32 ulp apart in sel, all-equal
    rows, NaN / ±inf / ±0 / subnormal / dtype-max overrides; with `bulk_rows` (GPU sizes), 0 or
    that many more tokens, each with its own hazard (bulk_rows), built on `device` (generation_device);
    then the bias kind, the scales
    and a layout. A third of the cases are in the judge's form (judge_forms): bf16, contiguous,
    1 to 8 shared experts, k up to 16, N up to 512, global_scale a 0-dim tensor. Shrinks toward:
    the judge's form, min_tokens (then one token; at least one in that form), N = 1, S = 1 (0
    outside that form), k = 1, bf16, unit-scale randn logits, the judge's bias (0.1 randn), no
    ties, no specials, no bulk, contiguous, route_scale 1, global_scale 1.0 as a 0-dim tensor.
    """
    if not 0 <= min_tokens <= max_tokens:
        raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: need 0 <= min_tokens <= max_tokens, got "
                              f"min_tokens={min_tokens}, max_tokens={max_tokens}")
    if max_experts < 1:
        raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: max_experts={max_experts}; need >= 1 (k >= 1 "
                              f"routed expert)")
    if max_shared < 0:
        raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: max_shared={max_shared}; need >= 0")
    if max_k < 1:
        raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: max_k={max_k}; need >= 1")
    if not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: dtypes={dtypes!r}; need a non-empty subset of "
                              f"{FLOAT_DTYPES}")
    for entry in structure_pool:
        T, N, S, k, dtype = entry
        if not (min_tokens <= T <= max_tokens and 1 <= N <= max_experts and 0 <= S <= max_shared
                and 1 <= k <= min(N, max_k) and dtype in dtypes):
            raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: structure_pool entry {entry!r} is outside "
                                  f"min_tokens={min_tokens}, max_tokens={max_tokens}, max_experts={max_experts}, "
                                  f"max_shared={max_shared}, max_k={max_k}, dtypes={dtypes}")
    if any(n < 1 for n in bulk_rows):
        raise InvalidArgument(f"sigmoid_gate_topk_renorm_cases: bulk_rows={bulk_rows!r}; need counts >= 1")
    experts = hostile_sizes(max_value=max_experts)
    judge_experts = experts.filter(lambda n: n <= JUDGE_MAX_EXPERTS)
    return _sigmoid_gate_topk_renorm_cases(min_tokens, max_tokens, experts, judge_experts, max_shared, max_k,
                                           tuple(dtypes), tuple(structure_pool), tuple(bulk_rows),
                                           generation_device(device, strategy="sigmoid_gate_topk_renorm_cases"))


def _in_judge_form(T, N, S, k, dtype) -> bool:
    return (T >= 1 and N <= JUDGE_MAX_EXPERTS and 1 <= S <= JUDGE_MAX_SHARED and k <= JUDGE_MAX_K
            and dtype == torch.bfloat16)


def _draw_structure(draw, judge_form, min_tokens, max_tokens, experts, judge_experts, max_shared, max_k, dtypes):
    """(T, N, S, k, dtype) drawn freely; in the judge's form: bf16, at least one token, 1 to 8
    shared experts, k up to 16, N up to 512. A plain function, not a composite: a span of its own
    would change the CPU's derandomized draws (Hypothesis mutates examples span by span)."""
    if judge_form:
        T = draw(st.integers(max(min_tokens, 1), max_tokens), label="T")
        N = draw(judge_experts, label="N")
        S = draw(st.integers(1, min(max_shared, JUDGE_MAX_SHARED)), label="S")
        max_k = min(max_k, JUDGE_MAX_K)
    else:
        T = draw(st.integers(min_tokens, max_tokens), label="T")
        N = draw(experts, label="N")
        S = draw(st.integers(0, max_shared), label="S")
    if 1 < N <= max_k and draw(st.booleans(), label="k=N?"):
        k = N
    else:
        k = draw(st.integers(1, min(N, max_k)), label="k")
    return T, N, S, k, torch.bfloat16 if judge_form else draw(st.sampled_from(dtypes), label="dtype")


@st.composite
def _gpu_structure(draw, structure, bulk_pool, judge_form):
    """(T, N, S, k, dtype, bulk rows, layout): all a kernel is compiled for, drawn freely."""
    T, N, S, k, dtype = structure(draw)
    bulk = draw(bulk_row_counts(bulk_pool, row_elements=N + S, max_elements=BULK_ELEMENTS, drawn_rows=T),
                label="bulk rows") if bulk_pool else 0
    return T, N, S, k, dtype, bulk, Layout() if judge_form else draw(layouts(), label="logits_layout")


@st.composite
def _sigmoid_gate_topk_renorm_cases(draw, min_tokens, max_tokens, experts, judge_experts, max_shared, max_k, dtypes,
                                    pool, bulk_pool, device):
    # A third of the cases in the judge's own form (strategies.values.judge_forms): bf16 logits,
    # contiguous, 1 to 8 shared experts, k up to 16, N up to 512, global_scale a 0-dim tensor on
    # the device, at least one token; their values stay as nasty.
    judge_form = (max_tokens >= 1 and max_shared >= 1 and torch.bfloat16 in dtypes
                  and draw(judge_forms(), label="judge form?"))

    def structure(draw):
        return _draw_structure(draw, judge_form, min_tokens, max_tokens, experts, judge_experts, max_shared, max_k,
                               dtypes)
    bulk = layout = None
    if judge_form:
        pool = tuple(entry for entry in pool if _in_judge_form(*entry))
    if pool:  # GPU sizes: the whole compiled structure, bulk rows and layout included, mostly reused
        seeded = tuple((T, N, S, k, dtype, seed_bulk(i, bulk_pool, row_elements=N + S, max_elements=BULK_ELEMENTS,
                                                     drawn_rows=T), seed_layout(i, judge_form=judge_form))
                       for i, (T, N, S, k, dtype) in enumerate(pool))
        T, N, S, k, dtype, bulk, layout = draw(mostly_from(seeded, _gpu_structure(structure, bulk_pool, judge_form),
                                                           explore_one_in=GPU_EXPLORE_ONE_IN), label="structure")
    else:
        T, N, S, k, dtype = structure(draw)
    logits_seed = draw(seeds(), label="logits_seed")
    scale = draw(magnitudes(), label="logits_scale")
    logits = background((T, N + S), seed=logits_seed, scale=scale, dtype=dtype)
    bias_kind = draw(st.sampled_from([name for name, _ in BIAS_KINDS]), label="bias")
    bias = make_bias(bias_kind, N, seed=draw(seeds(), label="bias_seed"))

    if T and N > 1 and draw(st.booleans(), label="all_equal?"):
        for t in draw(st.lists(st.integers(0, T - 1), min_size=1, max_size=2, unique=True), label="all_equal_rows"):
            logits[t, :N] = logits[t, 0].clone()
    if T and N > 1 and draw(st.booleans(), label="bias_tie?"):
        row, anchor, lane = draw(_tie_lanes(logits, bias, k, copies=1), label="bias_tie")
        bias[lane[0]] = _bias_for_score(_sel32(logits, bias, row)[anchor], logits[row, lane[0]], bias[lane[0]])
    if T and N > 1 and draw(st.booleans(), label="near_tie?"):
        row, anchor, lane = draw(_tie_lanes(logits, bias, k, copies=1), label="near_tie")
        above = draw(st.booleans(), label="near_tie_above?")
        target = torch.nextafter(_sel32(logits, bias, row)[anchor], torch.tensor(math.inf if above else -math.inf))
        logits[row, lane[0]] = logits[row, anchor].clone()
        bias[lane[0]] = _bias_for_score(target, logits[row, anchor], bias[anchor].clone())
    if T and N > 1 and draw(st.booleans(), label="ties?"):
        for _ in range(draw(st.integers(1, 2), label="tie_groups")):
            row, anchor, lanes = draw(_tie_lanes(logits, bias, k, copies=draw(st.integers(1, min(3, N - 1)),
                                                                               label="tie_copies")), label="tie")
            bias[lanes] = bias[anchor].clone()
            logits[row, lanes] = logits[row, anchor].clone()
    if T and draw(st.booleans(), label="special_routed?"):
        # A non-finite score inside the routed lanes: NaN ranks above every number in torch.topk,
        # +-inf at either end. The sparse specials below land there only now and then (a mutant
        # that ranked NaN last was caught in 8 examples under one draw order, missed in 20 under another).
        row, lane = draw(st.integers(0, T - 1), label="special_row"), draw(st.integers(0, N - 1), label="special_lane")
        logits[row, lane] = draw(st.sampled_from((math.nan, math.inf, -math.inf, math.nan)), label="special_routed")
    if draw(st.booleans(), label="specials?"):
        logits = apply_overrides(logits, draw(sparse_overrides(logits.numel(), special_values(dtype)),
                                              label="logits_specials"))

    if bulk is None:
        bulk = draw(bulk_row_counts(bulk_pool, row_elements=N + S, max_elements=BULK_ELEMENTS,
                                    drawn_rows=T), label="bulk rows") if bulk_pool else 0
    drawn_features = case_features(logits, bias, k, S)  # of the drawn rows: the bulk is a seeded background
    if bulk:
        more = bulk_rows(bulk, N, S, k, bias=bias, seed=draw(seeds(), label="bulk_seed"), scale=scale, dtype=dtype,
                         device=device)
        logits = torch.cat([logits.to(more.device), more])
        drawn_features.discard("T=0")

    if layout is None:
        layout = Layout() if judge_form else draw(layouts(), label="logits_layout")
    route_scale = draw(st.sampled_from(ROUTE_SCALES), label="route_scale")
    form = GLOBAL_SCALE_FORMS[0] if judge_form else draw(st.sampled_from(GLOBAL_SCALE_FORMS), label="global_scale_form")
    global_scale = make_global_scale(form, draw(st.sampled_from(GLOBAL_SCALES), label="global_scale"))

    features = {f"dtype={str(dtype).split('.')[-1]}", f"bias={bias_kind}", f"global_scale={form}"}
    if judge_form:
        features.add(JUDGE_FORM)
    features |= drawn_features
    if bulk:
        features.add("bulk_rows")
    if layout.kind != "contiguous":
        features.add(f"layout={layout.kind}")
    return build_case(logits=place(logits, layout), k=k, n_shared_experts=S, bias=bias, route_scale=route_scale,
                      global_scale=global_scale, features=features, global_scale_on_host=form == "0-dim on host")


def _sel32(logits: torch.Tensor, bias: torch.Tensor, row: int) -> torch.Tensor:
    """The reference's float32 selection scores of one row (CPU torch)."""
    return torch.sigmoid(logits[row, : bias.shape[0]].float()) + bias


@st.composite
def _tie_lanes(draw, logits, bias, k, *, copies):
    """(row, anchor lane, [other lanes]) for a tie: the anchor is the lane at a drawn rank of the row's
    current scores; at the k boundary (rank k - 1) the other lanes come from below the top k, so the
    tie straddles it; otherwise from anywhere. Shrinks toward row 0, the top-ranked anchor, the
    next lanes in rank order."""
    T, N = logits.shape[0], bias.shape[0]
    row = draw(st.integers(0, T - 1), label="row")
    order = torch.sort(_sel32(logits, bias, row), descending=True, stable=True).indices.tolist()
    if k < N and draw(st.booleans(), label="at_boundary?"):
        rank, pool = k - 1, order[k:]
    else:
        rank = draw(st.integers(0, k - 1), label="rank")
        pool = order[:rank] + order[rank + 1:]
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=min(copies, len(pool)),
                          max_size=min(copies, len(pool)), unique=True), label="lanes")
    return row, order[rank], [pool[i] for i in picks]


def _bias_for_score(target: torch.Tensor, logit: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """A float32 bias b with fl32(sigmoid(logit) + b) == target, searched a few ulps around
    target - sigmoid(logit); `fallback` when the target is not finite or no such b is near."""
    if not bool(target.isfinite()) or not bool(logit.isfinite()):
        return fallback
    s = torch.sigmoid(logit.float())
    b = (target.double() - s.double()).float()
    for _ in range(8):
        got = s + b
        if bool(got == target):
            return b
        b = torch.nextafter(b, torch.tensor(math.inf if bool(got < target) else -math.inf))
    return fallback


def case_features(logits: torch.Tensor, bias: torch.Tensor, k: int, S: int) -> set[str]:
    """Features computed from the final values (ties made by one construction can be undone by a
    later one, and randn in bf16 makes ties on its own): ties, boundary_tie, near_tie, bias_tie,
    all_equal, nan, inf, huge, k=1, k=N, S=0, S>k, tail, T=0. The strategy passes the drawn rows
    only: over a GPU case's bulk rows this was two thirds of the draw's time."""
    T, N = logits.shape[0], bias.shape[0]
    features = set()
    if T == 0:
        features.add("T=0")
    if k == 1:
        features.add("k=1")
    if k == N:
        features.add("k=N")
    if S == 0:
        features.add("S=0")
    if S > k:
        features.add("S>k")
    if N % 32:
        features.add("tail")
    x = logits.float()
    if bool(x.isnan().any()):
        features.add("nan")
    if bool(x.isinf().any()):
        features.add("inf")
    finite = x[x.isfinite()]
    if bool((finite.abs() >= float(torch.finfo(logits.dtype).max) / 2).any()):
        features.add("huge")
    if T == 0:
        return features
    routed = x[:, :N]
    if N > 1 and bool((routed == routed[:, :1]).all(-1).any()):
        features.add("all_equal")
    sel = torch.sigmoid(routed) + bias
    key = torch.where(sel.isnan(), torch.full_like(sel, math.inf), sel)        # NaN ties NaN
    # Sorted, equal scores are neighbours and the top k holds the first k ranks: a chosen lane ties
    # another lane where two neighbours among the first k + 1 ranks are equal. By neighbours, not
    # by comparing every chosen lane with every lane ([T, k, N]: a GPU case's bulk has 4M logits).
    s, lane = torch.sort(key, dim=-1, descending=True)
    same_next = s[:, 1:] == s[:, :-1]                                           # [T, N - 1]
    if bool(same_next[:, :k].any()):
        features.add("ties")
        # A tie group reaching into the top k whose lanes' logits differ: the bias made the tie.
        logit = routed.gather(1, lane)
        reaches_top = s[:, 1:] >= s[:, k - 1:k]
        if bool((same_next & (logit[:, 1:] != logit[:, :-1]) & s[:, 1:].isfinite() & reaches_top).any()):
            features.add("bias_tie")
    if k < N and bool((s[:, k] == s[:, k - 1]).any()):
        features.add("boundary_tie")
    ranked = s if k == N else torch.topk(sel, k + 1, dim=-1).values
    finite = ranked.isfinite()
    up = torch.nextafter(ranked[:, 1:], torch.full_like(ranked[:, 1:], math.inf))
    if bool(((up == ranked[:, :-1]) & finite[:, 1:] & finite[:, :-1]).any()):
        features.add("near_tie")
    return features


def judge_cases(device: str | torch.device = "cpu") -> list[Case]:
    """The judge's nine cases, built as its test file builds them (tests/test_sigmoid_gate_topk_renorm.py
    of flagos-ai/FlagGems-sglang): on the chip under test, one torch.Generator(device).manual_seed(0)
    a case, logits = randn(m, N + S) float32 then cast to bf16, then bias = 0.1 randn(N) float32,
    global_scale = torch.tensor(gs, device=device, dtype=float32) (a 0-dim tensor on the device),
    route_scale a Python float. CUDA and CPU generators draw different numbers: build them on the
    device the kernel runs on. The Case keeps CPU copies; Case.to(device) puts every tensor back."""
    cases = []
    for T, N, S, k, route_scale, gs in JUDGE_CASES:
        gen = torch.Generator(device=device).manual_seed(0)
        logits = torch.randn(T, N + S, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
        bias = 0.1 * torch.randn(N, generator=gen, device=device, dtype=torch.float32)
        cases.append(build_case(logits=logits.cpu(), k=k, n_shared_experts=S, bias=bias.cpu(), route_scale=route_scale,
                                global_scale=torch.tensor(gs, dtype=torch.float32), features={"judge"},
                                label=f"judge T={T} N={N} S={S} k={k}"))
    return cases


def model_cases() -> list[Case]:
    """DeepSeek-V3's routing config (N = 256, k = 8, S = 1, route_scale 2.5) on a few tokens."""
    logits = background((4, 257), seed=0, scale=1.0, dtype=torch.bfloat16)
    bias = make_bias("judge", 256, seed=1)
    return [build_case(logits=logits, k=8, n_shared_experts=1, bias=bias, route_scale=2.5,
                       global_scale=torch.tensor(1.0), features={"model"}, label="DeepSeek-V3 T=4 N=256 S=1 k=8")]


def smaller_cases(case: Case):
    """Structural moves toward a smaller failing case: a contiguous layout, fewer tokens, fewer
    shared experts, fewer routed experts (keeping k <= N), a smaller k. Each keeps the case valid;
    the minimizer keeps those that still fail."""
    logits, bias = case.inputs["logits"], case.inputs["bias"]
    k, S = case.inputs["k"], case.inputs["n_shared_experts"]
    T, E = logits.shape
    N = E - S
    if not (logits.is_contiguous() and logits.storage_offset() == 0):
        yield case.with_inputs(logits=logits.contiguous())
    for keep in row_subsets(T):
        yield case.with_inputs(logits=logits[keep].contiguous())
    if S:
        yield case.with_inputs(logits=logits[:, :N].contiguous(), n_shared_experts=0)
        yield case.with_inputs(logits=logits[:, :-1].contiguous(), n_shared_experts=S - 1)
    for lanes in _lane_subsets(N):
        cols = torch.tensor(lanes + list(range(N, E)), dtype=torch.long)
        yield case.with_inputs(logits=logits[:, cols].contiguous(), bias=bias[lanes].contiguous(),
                               k=min(k, len(lanes)))
    for smaller_k in sorted({1, k - 1} - {0, k}):
        yield case.with_inputs(k=smaller_k)


def _lane_subsets(N):
    """Halves, then quarters dropped, then (for small N) each single lane dropped."""
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


__all__ = ["sigmoid_gate_topk_renorm_cases", "judge_cases", "model_cases", "smaller_cases", "bulk_rows", "SIZES",
           "BULK_ELEMENTS", "JUDGE_CASES", "BIAS_KINDS", "ROW_HAZARDS"]


# The judge's bench grid (its last five cases) plus one larger size, not in the averages.
BENCH_M, BENCH_LARGE_M = tuple(case[0] for case in JUDGE_CASES[-5:]), (65536,)
_, BENCH_N, BENCH_S, BENCH_K, BENCH_ROUTE_SCALE, BENCH_GLOBAL_SCALE = JUDGE_CASES[-1]


def bench_inputs(m: int, device, *, global_scale_on_host: bool = False) -> dict:
    """As the official test builds them: global_scale = torch.tensor(0.8, device=device,
    dtype=torch.float32), a 0-dim tensor on the device; global_scale_on_host=True puts it on the
    host (a form the judge never sends)."""
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(m, BENCH_N + BENCH_S, generator=gen, device=device).to(torch.bfloat16)
    bias = 0.1 * torch.randn(BENCH_N, generator=gen, device=device)
    gs = torch.tensor(BENCH_GLOBAL_SCALE, dtype=torch.float32, device="cpu" if global_scale_on_host else device)
    return {"logits": logits, "k": BENCH_K, "n_shared_experts": BENCH_S, "route_scale": BENCH_ROUTE_SCALE,
            "global_scale": gs, "bias": bias}


def bench_cases():
    """(label, size, is_bench_case, builder(size, device)) for oracles/tools/bench.py."""
    return [(f"m={m}", m, m in BENCH_M, bench_inputs) for m in BENCH_M + BENCH_LARGE_M]


# T * (N + S) > 2^31: the last rows' addresses need 64-bit offsets (2.16e9 bf16 logits).
BEYOND_INT32_T, BEYOND_INT32_N = 8_400_000, 256
BEYOND_INT32_BYTES = 2 * BEYOND_INT32_T * (BEYOND_INT32_N + 1) * 2


def beyond_int32_inputs(device="cuda") -> tuple[dict, list[int]]:
    """The inputs (bf16 logits, no float32 copy) and the tokens whose outputs the verdict checks."""
    T, N, S = BEYOND_INT32_T, BEYOND_INT32_N, 1
    gen = torch.Generator(device).manual_seed(0)
    inputs = {"logits": torch.randn(T, N + S, generator=gen, device=device, dtype=torch.bfloat16),
              "k": 8, "n_shared_experts": S, "route_scale": 2.5,
              "global_scale": torch.tensor(0.8, device=device, dtype=torch.float32),
              "bias": 0.1 * torch.randn(N, generator=gen, device=device)}
    return inputs, [0, 1, T // 2, T - 2, T - 1]
