"""moe_fused_gate cases: grouped and ungrouped routers (groups of sizes that are not powers of two,
group counts that are not either), every scoring function, exact ties of experts and of groups
(equal group maxima, groups that copy each other), bias-made ties, near ties one ulp apart, NaN
and +-inf in the scores and the bias, floors of -inf or of underflowing scores, routed slots from
0 (outside the judge's domain) to all kept experts and beyond (the -inf fill), shared slots 0..3,
renormalize and the routed scale on and off, rsf of every sign and None, strided and offset
layouts, every dtype the reference accepts; the judge's ten cases, its bench grid, three
routers' configurations, and the structural moves the minimizer uses."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from strategies.case import Case
from strategies.minimize import row_subsets
from strategies.values import (JUDGE_FORM, MAGNITUDES, FLOAT_DTYPES, Layout, background, bulk_row_counts,
                               hostile_sizes, judge_forms, layouts, magnitudes, mostly_from, next_in_dtype, place,
                               GPU_EXPLORE_ONE_IN, generation_device, seed_bulk, seed_layout, seeds, sometimes, special_tensor, specials_in_rows, steps_in_dtype)

OP = "moe_fused_gate"

# Whole structures a GPU run mostly reuses (SIZES["cuda"]): (M, N, G, topk_group, KR, S, scoring,
# softcap, renormalize, routed_scaling_factor, apply on output, dtype). The judge's and three
# routers' configurations first, then hostile ones: groups of 17 with every option on and a
# softcap of the scores' size, the -inf fill (KR past the kept experts), one row of 255 experts,
# one token of an ungrouped sqrt-softplus router (a decode step; kernels special-case M = 1).
GPU_STRUCTURES = (
    (37, 256, 8, 4, 8, 1, "sigmoid", 0.0, True, 2.5, False, torch.bfloat16),       # DeepSeek-V3, the judge's
    (17, 32, 1, 1, 4, 0, "softmax", 30.0, False, 1.0, False, torch.bfloat16),      # the judge's softmax case
    (83, 64, 1, 1, 6, 0, "sqrtsoftplus", 0.0, True, 1.0, False, torch.bfloat16),   # the judge's sqrtsoftplus
    (9, 128, 1, 1, 6, 0, "sigmoid", 0.0, True, 1.7, True, torch.float32),          # the judge's float32 case
    (16, 160, 8, 3, 6, 0, "softmax", 0.0, False, 16.0, False, torch.bfloat16),     # DeepSeek-V2: groups of 20
    (64, 384, 1, 1, 8, 1, "sigmoid", 0.0, True, 2.827, False, torch.bfloat16),     # Kimi K2
    (5, 85, 5, 2, 5, 2, "softmax", 5.0, True, 0.5, True, torch.float16),           # groups of 17, all options
    (128, 16, 8, 1, 3, 0, "sigmoid", 0.0, True, 1.0, False, torch.float32),        # the -inf fill
    (1, 255, 1, 1, 12, 3, "softmax", 1.0, True, 2.5, False, torch.bfloat16),       # one row, softcap 1
    (1, 256, 1, 1, 8, 0, "sqrtsoftplus", 0.0, True, 1.0, False, torch.bfloat16),   # one token (decode)
)

# Case sizes by where the kernel runs: under the CPU interpreter a launch costs ~0.1 s and each
# routed slot is a few reductions over the row, so slots stay small there (N up to 320 still
# reaches 255/256/257 and DeepSeek-V3's 256 = 8 x 32; Kimi K2's 384 only on a GPU). Rows cost
# almost nothing more (the interpreter's cost is per operation, not per element), and each row
# carries its own value kind and hazard, so a case holds up to 8.
SIZES = {
    "cpu": dict(max_rows=8, max_experts=320, max_routed=12, max_shared=3, max_groups=16),
    # On a GPU, three cases in four take their whole structure from GPU_STRUCTURES (above): Triton
    # compiles a kernel anew for every new combination of constexprs, dtypes and integer arguments
    # (each specialized on == 1 and % 16), so drawn freely nearly every case compiled (83% of the
    # moe fuzz time on an H200, 2026-12-02); the values, hazards and layouts are drawn anew.
    # Besides its drawn rows a GPU case carries a bulk of rows (0 or a count of bulk_rows, up to
    # BULK_ELEMENTS scores), each with its own value kind and hazard (bulk_rows below).
    "cuda": dict(max_rows=300, max_experts=1024, max_routed=32, max_shared=8, max_groups=16,
                 structure_pool=GPU_STRUCTURES, bulk_rows=(2048, 16384), device="cuda"),
}
BULK_ELEMENTS = 1 << 22

# The signature, in order: every case names every argument, as the judge passes them (by keyword).
PARAMS = ("scores", "bias", "topk", "scoring_func", "num_fused_shared_experts", "renormalize",
          "routed_scaling_factor", "apply_routed_scaling_factor_on_output", "moe_softcapping",
          "num_expert_group", "topk_group")
DEFAULTS = dict(scoring_func="sigmoid", num_fused_shared_experts=0, renormalize=True, routed_scaling_factor=1.0,
                apply_routed_scaling_factor_on_output=False, moe_softcapping=0.0, num_expert_group=1, topk_group=1)

# The judge's cases (tests/test_moe_fused_gate.py of flagos-ai/FlagGems-sglang): (M, N, topk,
# options that differ from the defaults, scores dtype); the last five are also its bench grid.
_GROUPED = (("num_fused_shared_experts", 1), ("num_expert_group", 8), ("topk_group", 4))
JUDGE_CASES = (
    (1, 8, 2, (), torch.bfloat16),
    (37, 256, 8, (("num_fused_shared_experts", 1), ("routed_scaling_factor", 2.5), ("num_expert_group", 8),
                  ("topk_group", 4)), torch.bfloat16),
    (83, 64, 6, (("scoring_func", "sqrtsoftplus"),), torch.bfloat16),
    (17, 32, 4, (("scoring_func", "softmax"), ("moe_softcapping", 30.0), ("renormalize", False)), torch.bfloat16),
    (9, 128, 6, (("apply_routed_scaling_factor_on_output", True), ("routed_scaling_factor", 1.7)), torch.float32),
    *((m, 256, 8, _GROUPED, torch.bfloat16) for m in (1, 8, 64, 512, 4096)),
)

SCORING = ("sigmoid", "sqrtsoftplus", "softmax")
# As drawn: softmax twice as often as each of the others (sigmoid first, the shrink target). The
# softmax branch is where the options interact (softcap, the bias inside the softmax, weights
# over all N experts), and a bug there needs softmax together with a softcap or a bias and two
# routed slots in one case: drawn uniformly, the ci profile's 20 GPU-sized examples met that
# combination too rarely to catch softcap_ignored and softmax_without_bias (H200, 2026-12-01).
SCORING_DRAWS = ("sigmoid", "softmax", "sqrtsoftplus", "softmax")
# Odd names the reference sends to its softmax branch (anything but the two exact names).
ODD_SCORING = ("Sigmoid", "softmax_with_bias")

# How a row's scores are drawn, each with why. The first is the judge's and the shrink target.
SCORE_KINDS = (
    ("judge", "randn cast to the scores' dtype: the judge's only inputs"),
    ("scaled", "randn at a drawn magnitude: sigmoid saturating to 0 and 1, exp overflowing in a naive softplus "
               "or softmax, softmax weights underflowing"),
    ("integers", "small integers -3..3: ties everywhere, equal maxima inside groups, equal group scores"),
    ("constant", "one value a row: every expert and every group tied"),
    ("group_copies", "every group a copy of group 0: equal group scores (exact with a group-periodic bias)"),
    ("wide", "60 randn: sigmoid saturated, exp(s) overflowing a naive softplus above 88 and underflowing its "
             "log(1 + exp(s)) below -17, softmax weights spanning many binades"),
    ("negative", "10 randn - 90: sigmoid near FLT_MIN, softplus underflowing: the routed sum at float32's edge"),
)
SCORE_DRAWS = ("judge", "scaled", "integers", "wide", "judge", "group_copies", "wide", "constant", "negative", "wide",
               "wide")

BIAS_KINDS = (
    ("judge", "0.1 randn, float32: the judge's"),
    ("zeros", "no bias: sel ties exactly where the scores tie"),
    ("group_periodic", "bias[g E + j] = b[j]: groups holding the same scores tie exactly"),
    ("integers", "-1, 0, 1: ties, and a bias that outweighs sigmoid's range"),
    ("large", "10 randn: the bias decides the choice, so small act values are what gets weighted"),
)
BIAS_DRAWS = ("judge", "zeros", "group_periodic", "judge", "integers", "large")

# What each row gets (one each), "none" first: the shrink target.
ROW_HAZARDS = ("none", "ties", "near_tie", "nan", "equal_max", "group_tie", "floor", "run", "all_equal")
# The hazards as drawn: those few kernels get right (NaN chosen first, equal maxima of a group,
# floors of zero weight, exact ties) twice as often as the rest; the group hazards only where
# there are groups (three times as often there).
HAZARD_DRAWS = ROW_HAZARDS + ("nan", "equal_max", "floor", "ties", "equal_max", "group_tie")
UNGROUPED_HAZARDS = tuple(h for h in HAZARD_DRAWS if h not in ("equal_max", "group_tie"))
# The hazards that rank the row's experts (sel and its order) before they change it.
RANKED_HAZARDS = ("ties", "near_tie", "equal_max", "group_tie", "floor")
# Scores a kernel may use as a sentinel, or that underflow an activation, for the floors.
FLOORS = ("-inf", "-max", "-1e4", "0.0")
SPECIALS = ("nan", "-nan", "inf", "-inf", "-0.0", "0.0", "subnormal", "max", "-max")
BIAS_SPECIALS = ("nan", "inf", "-inf", "1e30", "-1e30")
# routed_scaling_factor values: the judge's first (1.0, then 2.5 and 1.7), then None (the
# reference reads it as 1.0) and values outside the judge's domain that the reference accepts.
RSF = (1.0, 2.5, 1.7, 0.5, 16.0, 1e-3, -1.0, 0.0, None)
SOFTCAPS = (0.0, 30.0, 1.0, 5.0)
# Group counts and group sizes: DeepSeek's 8 first, then powers of two and not.
GROUP_COUNTS = (8, 2, 3, 4, 16, 5, 7)
GROUP_SIZES = (2, 3, 5, 8, 12, 16, 17, 20, 31, 32, 33)
# The judge domain's limits (judge_domain_violations in oracles/ops/moe_fused_gate.py): a case
# drawn in the judge's form stays inside them.
JUDGE_DTYPES = (torch.bfloat16, torch.float32)
JUDGE_MAX_ROWS, JUDGE_MAX_EXPERTS, JUDGE_MAX_ROUTED, JUDGE_MAX_SHARED = 65536, 512, 16, 8


def _judge_scale(value, *, zero_ok: bool) -> bool:
    """routed_scaling_factor (> 0) or moe_softcapping (>= 0, zero_ok) as the judge domain takes it:
    a finite Python float (None, a negative value or an int is outside)."""
    return isinstance(value, float) and math.isfinite(value) and (value >= 0 if zero_ok else value > 0)


def _in_judge_domain(structure) -> bool:
    """Whether a structure (GPU_STRUCTURES' layout) lies inside the judge domain: 1..65536 rows,
    2..512 experts in bf16 or float32, a real scoring name, ungrouped or 2..16 groups of >= 2
    experts dividing N, 0..8 shared and 1..min(16, kept) routed slots (no -inf fill), rsf > 0 and
    softcap >= 0 finite floats. Its bulk rows are kept under the row limit where they are drawn."""
    M, N, G, tg, KR, S, scoring, softcap, renormalize, rsf, apply, dtype = structure
    if G == 1:
        kept = N if tg == 1 else 0
    elif 2 <= G <= 16 and N % G == 0 and N // G >= 2 and 1 <= tg <= G:
        kept = tg * (N // G)
    else:
        return False
    return (1 <= M <= JUDGE_MAX_ROWS and 2 <= N <= JUDGE_MAX_EXPERTS and dtype in JUDGE_DTYPES and scoring in SCORING
            and 0 <= S <= JUDGE_MAX_SHARED and 1 <= KR <= min(JUDGE_MAX_ROUTED, kept)
            and _judge_scale(rsf, zero_ok=False) and _judge_scale(softcap, zero_ok=True))


def _floor_value(name: str, dtype: torch.dtype) -> torch.Tensor:
    if name == "-1e4":
        return torch.tensor(-1e4, dtype=dtype)
    return special_tensor(name, dtype)


def build_case(*, features=(), label="", **args) -> Case:
    """A Case naming every argument in the signature's order (defaults filled in)."""
    unknown = set(args) - set(PARAMS)
    if unknown:
        raise InvalidArgument(f"build_case: unknown argument(s) {sorted(unknown)}; expected some of {PARAMS}")
    full = {**DEFAULTS, **args}
    return Case(OP, {name: full[name] for name in PARAMS}, frozenset(features), label)


def activations32(scores: torch.Tensor, scoring_func: str, softcap: float) -> torch.Tensor:
    """act (sigmoid, sqrt-softplus) or the capped logit (softmax) in float32: the part of sel
    that is not the bias, for building bias-made ties."""
    s = scores.float()
    if scoring_func == "sigmoid":
        return torch.sigmoid(s)
    if scoring_func == "sqrtsoftplus":
        return torch.sqrt(F.softplus(s))
    return softcap * torch.tanh(s / softcap) if softcap != 0.0 else s


def make_scores(kind: str, shape: tuple[int, int], *, groups: int, seed: int, scale: float,
                dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """The bulk of scores [M, N] for a SCORE_KINDS kind, from a generator seeded on `device` (the
    same seed gives other values on another device type)."""
    M, N = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    if kind == "judge":
        return torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(dtype)
    if kind == "scaled":
        return background(shape, seed=seed, scale=scale, dtype=dtype, device=device)
    if kind == "integers":
        return torch.randint(-3, 4, shape, generator=gen, device=device).to(dtype)
    if kind == "constant":
        return torch.randn(M, 1, generator=gen, device=device).to(dtype).expand(M, N).clone()
    if kind == "group_copies":
        per = N // groups
        return torch.randn(M, 1, per, generator=gen, device=device).expand(M, groups, per).reshape(M, N).to(dtype)
    if kind == "wide":
        return (60 * torch.randn(shape, generator=gen, device=device)).to(dtype)
    if kind == "negative":
        return (10 * torch.randn(shape, generator=gen, device=device) - 90).to(dtype)
    raise InvalidArgument(f"make_scores: kind={kind!r}; expected one of {[k for k, _ in SCORE_KINDS]}")


def make_bias(kind: str, N: int, *, groups: int, seed: int) -> torch.Tensor:
    """bias [N] float32 for a BIAS_KINDS kind, from a seeded CPU generator."""
    gen = torch.Generator().manual_seed(seed)
    if kind == "judge":
        return 0.1 * torch.randn(N, generator=gen)
    if kind == "zeros":
        return torch.zeros(N)
    if kind == "group_periodic":
        return (0.1 * torch.randn(N // groups, generator=gen)).repeat(groups)
    if kind == "integers":
        return torch.randint(-1, 2, (N,), generator=gen).float()
    if kind == "large":
        return 10 * torch.randn(N, generator=gen)
    raise InvalidArgument(f"make_bias: kind={kind!r}; expected one of {[k for k, _ in BIAS_KINDS]}")


def moe_fused_gate_cases(*, min_rows: int = 0, max_rows: int = 6, max_experts: int = 320, max_routed: int = 12,
                         max_shared: int = 3, max_groups: int = 16, dtypes=FLOAT_DTYPES,
                         structure_pool=(), bulk_rows=(), device: str = "cpu") -> st.SearchStrategy[Case]:
    """moe_fused_gate cases.

    Structure is drawn explicitly: M (0 rarely, behind its own boolean); ungrouped (N a hostile
    size) or grouped (G from GROUP_COUNTS, N / G from GROUP_SIZES or any, topk_group 1..G; in half
    the grouped cases the -inf fill: small groups, few kept, more routed slots than they hold);
    the scoring function (an odd name rarely) and its softcap; every option on at once (S >= 1,
    renormalize, rsf != 1, the scale on the output) in half the cases, else each drawn on its own;
    routed slots KR (1 .. the kept experts; all of them and 0 each behind a boolean); the dtype;
    each row's value kind (SCORE_KINDS) and magnitude; the bias kind (BIAS_KINDS); one hazard a
    row (HAZARD_DRAWS, the group ones only with groups); behind booleans, specials anywhere in
    the scores, specials in the bias, a bias-made tie in row 0, a bf16/fp16 bias; with
    `bulk_rows` (GPU sizes), 0 or that many more rows, each with its own kind and hazard
    (bulk_rows), built on `device` (generation_device); then the layouts (gaps hold NaN). A share of the cases (judge_forms) is drawn in
    the judge's form (feature JUDGE_FORM): structure, dtype and layouts inside the judge domain
    (of the pool only the entries inside it), the values, hazards and specials as nasty as in
    the rest. Shrinks toward: the judge's form, min_rows, ungrouped, N = 1 (2 in the judge's
    form), sigmoid, the judge's options, S = 0, KR = 1, bf16, randn scores and bias, no hazard,
    no bulk, contiguous. (Rows shrink less well than the rest, since each draws its own kind and
    hazard; the minimizer drops them.)
    """
    if not 0 <= min_rows <= max_rows:
        raise InvalidArgument(f"moe_fused_gate_cases: need 0 <= min_rows <= max_rows, got min_rows={min_rows}, "
                              f"max_rows={max_rows}")
    if max_experts < 1:
        raise InvalidArgument(f"moe_fused_gate_cases: max_experts={max_experts}; need >= 1")
    if max_routed < 1:
        raise InvalidArgument(f"moe_fused_gate_cases: max_routed={max_routed}; need >= 1")
    if max_shared < 0:
        raise InvalidArgument(f"moe_fused_gate_cases: max_shared={max_shared}; need >= 0")
    if not 1 <= max_groups <= 16:
        raise InvalidArgument(f"moe_fused_gate_cases: max_groups={max_groups}; need 1 <= max_groups <= 16 (the "
                              f"verdict enumerates tied group selections, C(16, 8) at most)")
    if not dtypes or any(d not in FLOAT_DTYPES for d in dtypes):
        raise InvalidArgument(f"moe_fused_gate_cases: dtypes={dtypes!r}; need a non-empty subset of {FLOAT_DTYPES}")
    for entry in structure_pool:
        _check_structure(entry, min_rows, max_rows, max_experts, max_routed, max_shared, max_groups, dtypes)
    if any(n < 1 for n in bulk_rows):
        raise InvalidArgument(f"moe_fused_gate_cases: bulk_rows={bulk_rows!r}; need counts >= 1")
    return _moe_fused_gate_cases(min_rows, max_rows, max_experts, max_routed, max_shared, max_groups, tuple(dtypes),
                                 tuple(structure_pool), tuple(bulk_rows), generation_device(device, strategy="moe_fused_gate_cases"))


def _check_structure(entry, min_rows, max_rows, max_experts, max_routed, max_shared, max_groups, dtypes):
    """A pooled structure must be one the free draw could give (within the sizes, valid for the
    reference): else the pool would test something the limits exclude."""
    try:
        M, N, G, tg, KR, S, scoring, softcap, renormalize, rsf, apply, dtype = entry
    except (TypeError, ValueError):
        raise InvalidArgument(f"moe_fused_gate_cases: structure {entry!r}; expected (M, N, G, topk_group, KR, S, "
                              f"scoring, softcap, renormalize, rsf, apply_on_output, dtype)") from None
    ok = (min_rows <= M <= max_rows and 1 <= N <= max_experts and 1 <= G <= max_groups and N % G == 0
          and 1 <= tg <= G and 0 <= KR <= min(N, max_routed) and 0 <= S <= max_shared and dtype in dtypes
          and (G > 1 or tg == 1))
    if not ok:
        raise InvalidArgument(f"moe_fused_gate_cases: structure {entry!r} is outside max_rows={max_rows}, "
                              f"max_experts={max_experts}, max_routed={max_routed}, max_shared={max_shared}, "
                              f"max_groups={max_groups}, dtypes={dtypes} (or G does not divide N)")


@st.composite
def _moe_fused_gate_cases(draw, min_rows, max_rows, max_experts, max_routed, max_shared, max_groups, dtypes, pool,
                          bulk_pool, device):
    # Cases in the judge's own form (strategies.values.judge_forms), where the sizes allow one: a
    # structure inside the judge domain (from the pool's entries inside it, or drawn so),
    # contiguous scores and a contiguous float32 bias; values and hazards stay as nasty.
    judge_form = (min_rows <= JUDGE_MAX_ROWS and max_rows >= 1 and max_experts >= 2
                  and any(d in JUDGE_DTYPES for d in dtypes) and draw(judge_forms(), label="judge form?"))
    if judge_form:
        pool = tuple(entry for entry in pool if _in_judge_domain(entry))
    free = _free_structure(min_rows, max_rows, max_experts, max_routed, max_shared, max_groups, dtypes, judge_form)
    preset = None
    if pool:  # GPU sizes: the whole compiled structure, bulk rows and both layouts included, mostly reused
        seeded = tuple((*entry, seed_bulk(i, bulk_pool, row_elements=entry[1], max_elements=_max_bulk(entry[0], entry[1],
                                                                                                      judge_form),
                                          drawn_rows=entry[0]), seed_layout(i, judge_form=judge_form), Layout(), None)
                       for i, entry in enumerate(pool))
        *structure, bulk, layout, bias_layout, bias_dtype = draw(
            mostly_from(seeded, _gpu_structure(free, bulk_pool, judge_form), explore_one_in=GPU_EXPLORE_ONE_IN),
            label="structure")
        preset = (bulk, layout, bias_layout, bias_dtype)
    else:
        structure = draw(free, label="structure")
    M, N, G, tg, KR, S, scoring, softcap, renormalize, rsf, apply, dtype = structure
    options = dict(topk=KR + S, scoring_func=scoring, num_fused_shared_experts=S, renormalize=renormalize,
                   routed_scaling_factor=rsf, apply_routed_scaling_factor_on_output=apply,
                   moe_softcapping=softcap, num_expert_group=G, topk_group=tg)
    return draw(_values(M, N, G, tg, N // G if G > 1 else None, KR, scoring, softcap, options, dtype, bulk_pool,
                        judge_form, preset, device))


def _max_bulk(M: int, N: int, judge_form: bool) -> int:
    """The most bulk scores a case may carry: in the judge's form, within the judge's rows."""
    return min(BULK_ELEMENTS, (JUDGE_MAX_ROWS - M) * N) if judge_form else BULK_ELEMENTS


def _bias_layout(draw, judge_form):
    return draw(st.sampled_from((Layout(), Layout("offset", 3), Layout("stepped", 2))), label="bias_layout") \
        if not judge_form and draw(sometimes(6), label="bias strided?") else Layout()


def _bias_dtype(draw, judge_form):
    return draw(st.sampled_from((torch.bfloat16, torch.float16)), label="bias_dtype") \
        if not judge_form and draw(sometimes(8), label="bias dtype?") else None


@st.composite
def _gpu_structure(draw, free, bulk_pool, judge_form):
    """The structure, the bulk-row count, the scores' and the bias's layouts and the bias dtype
    (None: float32 as made): all a kernel is compiled for, drawn freely."""
    structure = draw(free)
    M, N = structure[0], structure[1]
    max_bulk = _max_bulk(M, N, judge_form)
    bulk = draw(bulk_row_counts(bulk_pool, row_elements=N, max_elements=max_bulk, drawn_rows=M), label="bulk rows") \
        if bulk_pool and max_bulk >= 1 else 0
    layout = Layout() if judge_form else draw(layouts(), label="scores_layout")
    return (*structure, bulk, layout, _bias_layout(draw, judge_form), _bias_dtype(draw, judge_form))


@st.composite
def _free_structure(draw, min_rows, max_rows, max_experts, max_routed, max_shared, max_groups, dtypes,
                    judge_form=False):
    """(M, N, G, topk_group, KR, S, scoring, softcap, renormalize, rsf, apply_on_output, dtype)
    drawn freely (the layout of GPU_STRUCTURES' entries); with `judge_form`, inside the judge
    domain (_in_judge_domain): no M = 0, no -inf fill, no KR = 0, no odd name, no rsf <= 0 or None."""
    if judge_form:
        min_rows, max_rows = max(min_rows, 1), min(max_rows, JUDGE_MAX_ROWS)
        max_experts, max_routed = min(max_experts, JUDGE_MAX_EXPERTS), min(max_routed, JUDGE_MAX_ROUTED)
        max_shared, dtypes = min(max_shared, JUDGE_MAX_SHARED), tuple(d for d in dtypes if d in JUDGE_DTYPES)
    if min_rows == 0 and draw(sometimes(12), label="M=0?"):
        M = 0
    else:
        M = draw(st.integers(max(min_rows, 1), max(max_rows, 1)), label="M")
    counts = [g for g in GROUP_COUNTS if g <= max_groups and 2 * g <= max_experts]
    fill = False
    if counts and draw(st.sampled_from((False, True, True)), label="grouped?"):
        G = draw(st.sampled_from(counts), label="G")
        # the -inf fill: more routed slots than the kept groups hold (small groups, few kept), so
        # torch.topk goes on into the dropped experts, all -inf (outside the judge domain)
        fill = not judge_form and max_routed >= 3 and draw(st.booleans(), label="KR>kept?")
        if fill:
            per = draw(st.integers(2, max(2, min(max_routed // 2, max_experts // G))), label="experts_per_group")
        else:
            sizes = [e for e in GROUP_SIZES if G * e <= max_experts]
            per = draw(st.one_of(st.sampled_from(sizes), st.integers(2, max_experts // G)), label="experts_per_group")
        N = G * per
        limit = min(N, max_routed)
        fill = fill and per < limit
        tg = draw(st.integers(1, min(G, (limit - 1) // per) if fill else G), label="topk_group")
        kept = tg * per
    else:
        G, tg, per = 1, 1, None
        N = draw(hostile_sizes(min_value=2 if judge_form else 1, max_value=max_experts), label="N")
        kept = N
    scoring = draw(st.sampled_from(SCORING_DRAWS), label="scoring_func")
    if not judge_form and draw(sometimes(25), label="odd scoring name?"):
        scoring = draw(st.sampled_from(ODD_SCORING), label="odd_scoring")
    softcap = draw(st.sampled_from(SOFTCAPS if scoring not in ("sigmoid", "sqrtsoftplus") else SOFTCAPS[:2]),
                   label="moe_softcapping")
    # Half the cases turn every option on at once (shared slots, renormalization, an rsf that is
    # not 1, the scale on the output): bugs in how the options combine need all of them in one
    # case, and independent draws meet that combination in one case of seven.
    all_on = max_shared >= 1 and draw(st.booleans(), label="all options on?")
    S = draw(st.integers(1 if all_on else 0, max_shared), label="num_fused_shared_experts")
    top = min(kept, max_routed)
    if fill:
        KR = draw(st.integers(kept + 1, min(N, max_routed)), label="KR")
    elif top > 1 and draw(sometimes(6), label="KR=max?"):
        KR = top
    elif not judge_form and draw(sometimes(15), label="KR=0?"):
        KR = 0
    else:
        KR = draw(st.integers(1, top), label="KR")
    renormalize = True if all_on else draw(st.sampled_from((True, False, True)), label="renormalize")
    rsfs = RSF[1:-1] if all_on else RSF
    if judge_form:
        rsfs = tuple(r for r in rsfs if _judge_scale(r, zero_ok=False))
    rsf = draw(st.sampled_from(rsfs), label="routed_scaling_factor")
    apply = True if all_on else draw(st.sampled_from((False, True)), label="apply_rsf")
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    return M, N, G, tg, KR, S, scoring, softcap, renormalize, rsf, apply, dtype


@st.composite
def _values(draw, M, N, G, tg, per, KR, scoring, softcap, options, dtype, bulk_pool, judge_form, preset=None,
            device="cpu"):
    """The values of a case whose structure is drawn: scores row by row, the bias, the hazards,
    the specials, the bulk rows and the layouts. In the judge's form the bias stays float32, both
    layouts contiguous and the bulk within the judge's rows; the values are drawn as in any case."""
    # each row its own value kind (and magnitude): a case of M rows tests M kinds for the price
    # of one launch, and the minimizer drops the rows that do not matter
    kinds_pool = SCORE_DRAWS if G > 1 else tuple(k for k in SCORE_DRAWS if k != "group_copies")
    seed = draw(seeds(), label="scores_seed")
    kinds = [draw(st.sampled_from(kinds_pool), label=f"row {m} scores") for m in range(M)]
    rows = [make_scores(k, (1, N), groups=G, seed=seed + m, scale=draw(magnitudes(), label=f"row {m} scale"),
                        dtype=dtype) for m, k in enumerate(kinds)]
    scores = torch.cat(rows) if rows else torch.empty(0, N, dtype=dtype)
    bias_kind = draw(st.sampled_from(BIAS_DRAWS), label="bias")
    bias = make_bias(bias_kind, N, groups=G, seed=draw(seeds(), label="bias_seed"))

    for m in range(M):
        _row_hazard(draw, scores, bias, m, G=G, per=per, tg=tg, KR=KR, dtype=dtype, scoring=scoring,
                    softcap=softcap)
    if M and draw(sometimes(4), label="specials?"):
        for pos, name in draw(st.lists(st.tuples(st.integers(0, M * N - 1), st.sampled_from(SPECIALS)),
                                       min_size=1, max_size=3), label="specials"):
            scores.view(-1)[pos] = special_tensor(name, dtype)
    if draw(sometimes(5), label="bias specials?"):
        for pos, name in draw(st.lists(st.tuples(st.integers(0, N - 1), st.sampled_from(BIAS_SPECIALS)),
                                       min_size=1, max_size=2), label="bias_specials"):
            bias[pos] = float(name)
    if M and N > 1 and draw(sometimes(4), label="bias-made tie?"):
        # bias[b] = sel(0, a) - part(0, b): expert b ties expert a in row 0 (exactly, or within a
        # float32 rounding of the add), whatever their scores
        a, b = draw(st.lists(st.integers(0, N - 1), min_size=2, max_size=2, unique=True), label="bias_tie")
        part = activations32(scores[:1], scoring, softcap)[0]
        bias[b] = (part[a] + bias[a] - part[b]).item()
    bias_dtype = _bias_dtype(draw, judge_form) if preset is None else preset[3]
    if bias_dtype is not None:
        bias = bias.to(bias_dtype)

    # the bulk after the bias is final: its ties prefer lanes of equal bias, and it ranks by sel
    max_bulk = _max_bulk(M, N, judge_form)
    if preset is not None:
        bulk = preset[0]
    else:
        bulk = draw(bulk_row_counts(bulk_pool, row_elements=N, max_elements=max_bulk, drawn_rows=M),
                    label="bulk rows") if bulk_pool and max_bulk >= 1 else 0
    drawn_features = case_features(scores, bias, options)  # of the drawn rows: the bulk is a seeded background
    if bulk:
        more = bulk_rows(bulk, N, groups=G, topk_group=tg, routed=KR, bias=bias, scoring=scoring, softcap=softcap,
                         seed=draw(seeds(), label="bulk_seed"), dtype=dtype, device=device)
        scores = torch.cat([scores.to(more.device), more])
        drawn_features.discard("M=0")

    if preset is not None:
        layout, bias_layout = preset[1], preset[2]
    else:
        layout = Layout() if judge_form else draw(layouts(), label="scores_layout")
        bias_layout = _bias_layout(draw, judge_form)
    features = {f"dtype={str(dtype).split('.')[-1]}", *(f"scores={k}" for k in kinds), f"bias={bias_kind}",
                f"scoring={scoring if scoring in SCORING else 'odd'}"} | drawn_features
    if judge_form:
        features.add(JUDGE_FORM)
    if bulk:
        features.add("bulk_rows")
    if layout.kind != "contiguous":
        features.add(f"layout={layout.kind}")
    if bias_layout.kind != "contiguous":
        features.add(f"bias_layout={bias_layout.kind}")
    return build_case(scores=place(scores, layout), bias=place(bias, bias_layout), features=features, **options)


def group_ranks(sel: torch.Tensor, G: int) -> list[int]:
    """The groups of one row's sel [N] (float64) from the highest score (sum of the two largest)
    down, NaN first, ties to the lower group."""
    top2 = torch.topk(sel.view(G, -1), 2, dim=-1).values.sum(-1)
    return torch.sort(top2.nan_to_num(nan=math.inf), descending=True, stable=True).indices.tolist()


def _best_lane(sel: torch.Tensor, lanes) -> int:
    """The lane of the largest sel among `lanes` (NaN first, the lower lane among ties)."""
    return max(lanes, key=lambda e: (math.inf if math.isnan(sel[e]) else float(sel[e]), -e))


def _row_hazard(draw, scores, bias, m, *, G, per, tg, KR, dtype, scoring, softcap):
    """One hazard in row m (scores and bias in place), each shrinking to "none". Ties copy an
    expert's score AND its bias, so they are exact ties of sel whatever the bias kind (the bias
    is shared by the rows: the copy changes the other rows' sel too, which stays a valid input)."""
    N = scores.shape[1]
    hazard = draw(st.sampled_from(HAZARD_DRAWS if G > 1 else UNGROUPED_HAZARDS), label=f"row {m} hazard")
    row = scores[m]
    if hazard in RANKED_HAZARDS:  # only these sort the row: a GPU case has up to 300 drawn rows
        sel = (activations32(row[None], scoring, softcap)[0] + bias.float()).double()
        order = torch.sort(sel.nan_to_num(nan=math.inf), descending=True, stable=True).indices.tolist()
    if hazard == "ties" and N > 1:
        # the expert at a drawn rank copied to other experts: at rank KR - 1 onto experts below
        # it, so the tie straddles the routed slots' boundary
        rank = max(KR - 1, 0) if draw(st.booleans(), label="at_boundary?") else draw(
            st.integers(0, min(N - 1, max(KR, 1))), label="rank")
        pool = order[rank + 1:] or order[:rank]
        lanes = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True), label="tie_lanes")
        row[lanes] = row[order[rank]].clone()
        bias[lanes] = bias[order[rank]].clone()
    elif hazard == "near_tie" and N > 1:
        # the next expert's score one ulp of the dtype from the one above it, same bias
        rank = draw(st.integers(0, min(N - 2, max(KR, 1))), label="near_rank")
        row[order[rank + 1]] = next_in_dtype(row[order[rank]], up=draw(st.booleans(), label="above?"))
        bias[order[rank + 1]] = bias[order[rank]].clone()
    elif hazard == "nan":
        for col, name in draw(st.lists(st.tuples(st.integers(0, N - 1), st.sampled_from(("nan", "-nan"))),
                                       min_size=1, max_size=3), label="nans"):
            row[col] = special_tensor(name, dtype)
    elif hazard == "equal_max" and G > 1:
        # two equal maxima inside one group: its score is twice the maximum (one copy set aside,
        # not every lane equal to it). At the boundary: the first dropped group becomes two copies
        # of the last kept group's best expert (a) over copies of that group's worst one, so it
        # outranks that group (2a against a + b) only if both copies count
        ranks = group_ranks(sel, G)
        if tg < G and draw(st.sampled_from((True, False, True)), label="at_boundary?"):
            kept_last, g = ranks[tg - 1], ranks[tg]
            source = _best_lane(sel, range(kept_last * per, (kept_last + 1) * per))
            worst = min(range(kept_last * per, (kept_last + 1) * per),
                        key=lambda e: (-math.inf if math.isnan(sel[e]) else float(sel[e]), e))
            lanes = draw(st.lists(st.integers(g * per, (g + 1) * per - 1), min_size=2, max_size=2, unique=True),
                         label="copies")
            rest = [e for e in range(g * per, (g + 1) * per) if e not in lanes]
            row[rest] = row[worst].clone()
            bias[rest] = bias[worst].clone()
        else:
            g = draw(st.integers(0, G - 1), label="group")
            source = _best_lane(sel, range(g * per, (g + 1) * per))
            lanes = [draw(st.sampled_from([e for e in range(g * per, (g + 1) * per) if e != source]), label="second")]
        row[lanes] = row[source].clone()
        bias[lanes] = bias[source].clone()
    elif hazard == "group_tie" and G > 1:
        # a group copied onto another (scores and bias): equal group scores, at the boundary the
        # last kept group and the first dropped one
        if tg < G and draw(st.booleans(), label="at_boundary?"):
            ranks = group_ranks(sel, G)
            a, b = ranks[tg - 1], ranks[tg]
        else:
            a, b = draw(st.lists(st.integers(0, G - 1), min_size=2, max_size=2, unique=True), label="groups")
        row[b * per:(b + 1) * per] = row[a * per:(a + 1) * per].clone()
        bias[b * per:(b + 1) * per] = bias[a * per:(a + 1) * per].clone()
    elif hazard == "floor" and N > 1:
        rank = draw(st.integers(0, max(min(KR, N - 1), 0)), label="floor_rank")
        row[order[rank:]] = _floor_value(draw(st.sampled_from(FLOORS), label="floor"), dtype)
    elif hazard == "run":
        start = draw(st.integers(0, N - 1), label="run_start")
        length = draw(st.integers(1, N - start), label="run_length")
        row[start:start + length] = special_tensor(draw(st.sampled_from(SPECIALS), label="run_special"), dtype)
    elif hazard == "all_equal":
        row[:] = row[0].clone()


def bulk_rows(B: int, N: int, *, groups: int, topk_group: int, routed: int, bias: torch.Tensor, scoring: str,
              softcap: float, seed: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """B more score rows [B, N] for a case's structure and bias, each of its own value kind
    (SCORE_DRAWS) and magnitude and with one hazard (HAZARD_DRAWS, as _row_hazard gives a drawn
    row), all from one seed with tensor ops. Ranks are the reference's selection order: float32
    sel (the scoring function plus bias), NaN first, dropped groups' experts last. The hazards:
    ties (the score at a rank r < KR copied onto up to three lanes below it; in half the rows r
    is the boundary, KR - 1), a near tie (a lane below it one ulp of the dtype from it), NaN at
    up to three lanes, equal_max (a group's best score copied onto another of its lanes; in half
    the rows the row's best), group_tie (one group's lanes copied onto another's; in half the
    rows the last kept group onto the first dropped one), a floor (every lane from a rank
    r <= KR down), a run of one special, an all-equal row.

    The bias is the drawn rows' and stays as it is, so a copied score ties in sel only where the
    two lanes' (groups') biases are equal: the copies go there when the row has such lanes (a
    zero, integer or group-periodic bias, lanes the drawn rows' ties equalized), else anywhere
    (a tie of scores only). Left out: equal_max at the group boundary (it rewrites a dropped
    group from a kept one's best and worst experts, copying their bias)."""
    if B == 0:
        return torch.empty(0, N, dtype=dtype, device=device)
    G = groups
    per = N // G if G > 1 else N
    gen = torch.Generator(device=device).manual_seed(seed)
    rows, lane = torch.arange(B, device=device), torch.arange(N, device=device)[None, :]

    # each row's value kind and magnitude; make_scores once per kind (per magnitude for "scaled")
    draws = SCORE_DRAWS if G > 1 else tuple(k for k in SCORE_DRAWS if k != "group_copies")
    kinds = tuple(dict.fromkeys(draws))
    kind_of = torch.tensor([kinds.index(k) for k in draws], device=device)[torch.randint(0, len(draws), (B,), generator=gen, device=device)]
    scale_of = torch.randint(0, len(MAGNITUDES), (B,), generator=gen, device=device)
    x = torch.empty(B, N, dtype=dtype, device=device)
    for k, kind in enumerate(kinds):
        for j, scale in enumerate(MAGNITUDES if kind == "scaled" else (1.0,)):
            mine = (kind_of == k) & (scale_of == j) if kind == "scaled" else kind_of == k
            if bool(mine.any()):
                x[mine] = make_scores(kind, (int(mine.sum()), N), groups=G, seed=seed + 1 + 8 * k + j, scale=scale,
                                      dtype=dtype, device=device)

    draws = HAZARD_DRAWS if G > 1 else UNGROUPED_HAZARDS
    hazard = torch.tensor([ROW_HAZARDS.index(h) for h in draws], device=device)[torch.randint(0, len(draws), (B,), generator=gen, device=device)]

    def rows_of(name):
        """The rows (indices) whose hazard is `name`: each hazard works on its own rows only."""
        return rows[hazard == ROW_HAZARDS.index(name)]

    # the selection order: torch.topk ranks NaN above everything; a dropped group's experts are -inf
    b = bias.float().to(device)
    sel_key = (activations32(x, scoring, softcap) + b[None, :]).nan_to_num(nan=math.inf)
    kept_lane = torch.ones(B, N, dtype=torch.bool, device=device)
    if G > 1:
        group_score = torch.topk(sel_key.view(B, G, per), 2, dim=-1).values.sum(-1)
        group_order = torch.sort(group_score.nan_to_num(nan=math.inf), dim=-1, descending=True, stable=True).indices
        kept_lane = torch.zeros(B, G, dtype=torch.bool, device=device).scatter_(1, group_order[:, :topk_group], True)
        kept_lane = kept_lane.repeat_interleave(per, dim=1)
    key = sel_key.masked_fill(~kept_lane, -math.inf)

    def ranked(r):
        """Rows r's lane at each rank and rank of each lane, [len(r), N]."""
        order = torch.sort(key[r], dim=-1, descending=True, stable=True).indices
        return order, torch.empty_like(order).scatter_(1, order, torch.arange(N, device=device).expand_as(order).contiguous())

    # ties and near ties: an anchor at a rank inside the routed slots and the kept experts (the
    # boundary in half the rows); its score goes to kept lanes ranked below it, those of its own
    # bias where the row has any (an exact tie of sel), else any (a tie of scores)
    top = max(1, min(routed, topk_group * per if G > 1 else N))

    def anchor_and_lanes(r):
        order, rank_of = ranked(r)
        n = len(r)
        rank = torch.where(torch.rand(n, generator=gen, device=device) < 0.5, top - 1, torch.randint(0, top, (n,), generator=gen, device=device))
        anchor = order[torch.arange(n, device=device), rank]
        same_bias = b[None, :] == b[anchor][:, None]
        other = kept_lane[r] & (lane != anchor[:, None])
        below = kept_lane[r] & (rank_of > rank[:, None])
        return anchor, _first_nonempty(below & same_bias, other & same_bias, below, other)

    r = rows_of("ties")
    anchor, lanes = anchor_and_lanes(r)
    score = x[r, anchor]
    copies = torch.randint(1, 4, (len(r),), generator=gen, device=device)
    for j in range(3):
        pick, ok = _pick_lane(lanes, gen)
        mine = ok & (copies > j)
        x[r[mine], pick[mine]] = score[mine]
        lanes[torch.arange(len(r), device=device), pick] = False     # distinct lanes
    r = rows_of("near_tie")
    anchor, lanes = anchor_and_lanes(r)
    pick, ok = _pick_lane(lanes, gen)
    up = torch.rand(len(r), generator=gen, device=device) < 0.5
    x[r[ok], pick[ok]] = steps_in_dtype(x[r, anchor], up)[ok]

    specials_in_rows(x, hazard == ROW_HAZARDS.index("nan"), ("nan", "-nan"), gen)

    if G > 1:
        # equal_max: a group's best expert (NaN first, the lower lane among ties) twice, in half
        # the rows in the group of the row's best
        r = rows_of("equal_max")
        n = len(r)
        g = torch.where(torch.rand(n, generator=gen, device=device) < 0.5, key[r].argmax(-1) // per,
                        torch.randint(0, G, (n,), generator=gen, device=device))
        best = g * per + sel_key[r].view(n, G, per)[torch.arange(n, device=device), g].argmax(-1)
        second = (lane // per == g[:, None]) & (lane != best[:, None])
        pick, ok = _pick_lane(_first_nonempty(second & (b[None, :] == b[best][:, None]), second), gen)
        x[r[ok], pick[ok]] = x[r[ok], best[ok]]

        # group_tie: group a's lanes copied onto group c (in half the rows the last kept group
        # onto the first dropped one); where the bias has groups equal lane for lane, a pair of
        # those instead, so the group scores tie exactly
        r = rows_of("group_tie")
        n = len(r)
        a = torch.randint(0, G, (n,), generator=gen, device=device)
        c = (a + torch.randint(1, G, (n,), generator=gen, device=device)) % G
        if topk_group < G:
            boundary = torch.rand(n, generator=gen, device=device) < 0.5
            a = torch.where(boundary, group_order[r, topk_group - 1], a)
            c = torch.where(boundary, group_order[r, topk_group], c)
        group_bias = b.view(G, per)
        equal_groups = (group_bias[:, None, :] == group_bias[None, :, :]).all(-1) & ~torch.eye(G, dtype=torch.bool, device=device)
        pairs = equal_groups.nonzero()
        if len(pairs):
            pair = pairs[torch.randint(0, len(pairs), (n,), generator=gen, device=device)]
            unequal = ~equal_groups[a, c]
            a, c = torch.where(unequal, pair[:, 0], a), torch.where(unequal, pair[:, 1], c)
        x3 = x.view(B, G, per)
        x3[r, c] = x3[r, a]

    r = rows_of("floor")
    floors = torch.stack([_floor_value(name, dtype) for name in FLOORS]).to(device)
    floor = floors[torch.randint(0, len(FLOORS), (len(r),), generator=gen, device=device)]
    floor_rank = torch.randint(0, max(min(routed, N - 1), 0) + 1, (len(r),), generator=gen, device=device)
    x[r] = torch.where(ranked(r)[1] >= floor_rank[:, None], floor[:, None], x[r])

    r = rows_of("run")
    specials = torch.stack([special_tensor(name, dtype) for name in SPECIALS]).to(device)
    start = torch.randint(0, N, (len(r),), generator=gen, device=device)
    end = start + 1 + (torch.rand(len(r), generator=gen, device=device) * (N - start)).long()
    value = specials[torch.randint(0, len(SPECIALS), (len(r),), generator=gen, device=device)]
    x[r] = torch.where((lane >= start[:, None]) & (lane < end[:, None]), value[:, None], x[r])

    r = rows_of("all_equal")
    x[r] = x[r, :1].expand(-1, N)
    return x


def _first_nonempty(*masks: torch.Tensor) -> torch.Tensor:
    """Each row of the first of `masks` [B, N] that holds a lane in that row (the last if none)."""
    out = masks[-1]
    for mask in reversed(masks[:-1]):
        out = torch.where(mask.any(-1, keepdim=True), mask, out)
    return out


def _pick_lane(mask: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A lane of each row of `mask` [B, N], uniformly among those it holds; and whether it holds any."""
    keys = torch.rand(mask.shape, generator=gen, device=gen.device).masked_fill_(~mask, -1.0)
    best = keys.max(dim=-1)
    return best.indices, best.values >= 0


def case_features(scores: torch.Tensor, bias: torch.Tensor, options: dict) -> set[str]:
    """Features computed from the final values (with the float32 sel the reference ranks):
    ties, boundary_tie, near_tie (sel one float32 ulp apart inside the routed slots), nan, inf,
    neg_inf, bias_nan, grouped, equal_group_max, group_tie, group_boundary_tie, epg_not_pow2,
    KR=0, KR=1, KR=kept, KR>kept, shared, renormalize, apply_rsf, rsf=None, softcap, M=0. The
    strategy passes the drawn rows only (the bulk rows are a seeded background)."""
    M, N = scores.shape
    S, G, tg = options["num_fused_shared_experts"], options["num_expert_group"], options["topk_group"]
    KR = options["topk"] - S
    kept = tg * (N // G) if G > 1 else N
    features = {f"KR={KR}"} if KR <= 1 else set()
    features |= {name for name, on in (
        ("KR=kept", KR == kept), ("KR>kept", KR > kept), ("shared", S > 0), ("grouped", G > 1),
        ("epg_not_pow2", G > 1 and (N // G) & (N // G - 1) != 0), ("G_not_pow2", G > 1 and G & (G - 1) != 0),
        ("renormalize", bool(options["renormalize"])), ("apply_rsf", bool(options["apply_routed_scaling_factor_on_output"])),
        ("rsf=None", options["routed_scaling_factor"] is None), ("M=0", M == 0),
        ("softcap", options["scoring_func"] not in ("sigmoid", "sqrtsoftplus") and options["moe_softcapping"] != 0.0),
    ) if on}
    if bool(bias.float().isnan().any()):
        features.add("bias_nan")
    if M == 0:
        return features
    s = scores.double()
    for name, mask in (("nan", s.isnan()), ("inf", s == math.inf), ("neg_inf", s == -math.inf)):
        if bool(mask.any()):
            features.add(name)
    part = activations32(scores, options["scoring_func"], options["moe_softcapping"])
    sel = (part + bias.float()[None, :]).double()
    if G > 1:
        per = N // G
        grouped = torch.sort(sel.view(M, G, per).nan_to_num(nan=math.inf), dim=-1, descending=True).values
        if bool((grouped[..., 0] == grouped[..., 1]).any()):
            features.add("equal_group_max")
        gs = torch.sort((grouped[..., 0] + grouped[..., 1]).float().double(), dim=-1, descending=True).values
        same = gs[:, 1:] == gs[:, :-1]
        if bool(same.any()):
            features.add("group_tie")
        if tg < G and bool(same[:, tg - 1].any()):
            features.add("group_boundary_tie")
    if KR == 0:
        return features
    ordered = torch.sort(sel.nan_to_num(nan=math.inf), dim=-1, descending=True).values.float()
    same_next = ordered[:, 1:] == ordered[:, :-1]
    if bool(same_next[:, :KR].any()):
        features.add("ties")
    if KR < N and bool(same_next[:, KR - 1].any()):
        features.add("boundary_tie")
    finite = ordered[:, 1:].isfinite() & ordered[:, :-1].isfinite()
    up = torch.nextafter(ordered[:, 1:], torch.full_like(ordered[:, 1:], math.inf))
    if bool(((up == ordered[:, :-1]) & finite)[:, :KR].any()):
        features.add("near_tie")
    return features


def judge_cases(device: str | torch.device = "cpu") -> list[Case]:
    """The judge's ten cases, built as its test file builds them (tests/test_moe_fused_gate.py of
    flagos-ai/FlagGems-sglang): on the chip under test, one torch.Generator(device).manual_seed(0)
    a case, scores = randn(m, n) float32 then cast to the case's dtype, then bias = 0.1 randn(n)
    float32; every option a keyword. CUDA and CPU generators draw different numbers: build them on
    the device the kernel runs on. The Case keeps CPU copies; Case.to(device) puts them back."""
    cases = []
    for m, n, topk, options, dtype in JUDGE_CASES:
        gen = torch.Generator(device=device).manual_seed(0)
        scores = torch.randn(m, n, generator=gen, device=device, dtype=torch.float32).to(dtype)
        bias = 0.1 * torch.randn(n, generator=gen, device=device, dtype=torch.float32)
        opts = dict(options)
        label = " ".join([f"judge M={m} N={n} topk={topk}", *(f"{k}={v}" for k, v in options),
                          str(dtype).removeprefix("torch.")])
        cases.append(build_case(scores=scores.cpu(), bias=bias.cpu(), topk=topk, features={"judge"}, label=label,
                                **opts))
    return cases


# The official bench (benchmark/test_moe_fused_gate.py): (m, 256, 8, S=1, G=8, topk_group=4,
# rsf 1.0), m in 1, 8, 64, 512, 4096; one larger case of ours past the judge's sizes.
BENCH_M, BENCH_LARGE_M = (1, 8, 64, 512, 4096), (65536,)


def bench_inputs(m: int, device) -> dict:
    """The official bench's inputs, built as its _case builds them (a device generator seeded 0,
    bf16 scores from float32 randn, bias 0.1 randn float32), every option a keyword."""
    gen = torch.Generator(device=device).manual_seed(0)
    scores = torch.randn(m, 256, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    bias = 0.1 * torch.randn(256, generator=gen, device=device, dtype=torch.float32)
    return {**build_case(scores=scores, bias=bias, topk=8, **dict(_GROUPED)).inputs}


def bench_cases():
    """(label, size, is_bench_case, builder(size, device)) for oracles/tools/bench.py: the official
    bench grid (counted in the average) and one larger case."""
    return [(f"m={m}", m, m in BENCH_M, bench_inputs) for m in BENCH_M + BENCH_LARGE_M]


def model_cases() -> list[Case]:
    """Routers' own configurations on a few rows, randn scores in bf16, the judge's kind of bias:
    DeepSeek-V3 (256 experts in 8 groups of 32, 4 kept, top 8 + 1 fused shared expert, sigmoid,
    rsf 2.5), DeepSeek-V2 (160 experts in 8 groups of 20 -- not a power of two --, 3 kept, top 6,
    softmax, rsf 16, no renormalization), Kimi K2 (384 experts, ungrouped, top 8 + 1 shared,
    sigmoid, rsf 2.827)."""
    def inputs(M, N, seed):
        return background((M, N), seed=seed, scale=1.0, dtype=torch.bfloat16), make_bias("judge", N, groups=1, seed=seed)

    s, b = inputs(4, 256, 0)
    v3 = build_case(scores=s, bias=b, topk=9, num_fused_shared_experts=1, routed_scaling_factor=2.5,
                    num_expert_group=8, topk_group=4, features={"model"}, label="DeepSeek-V3 M=4 N=256 G=8 topk=8+1")
    s, b = inputs(4, 160, 1)
    v2 = build_case(scores=s, bias=b, topk=6, scoring_func="softmax", renormalize=False, routed_scaling_factor=16.0,
                    num_expert_group=8, topk_group=3, features={"model"}, label="DeepSeek-V2 M=4 N=160 G=8 topk=6")
    s, b = inputs(2, 384, 2)
    k2 = build_case(scores=s, bias=b, topk=9, num_fused_shared_experts=1, routed_scaling_factor=2.827,
                    features={"model"}, label="Kimi-K2 M=2 N=384 topk=8+1")
    return [v3, v2, k2]


def smaller_cases(case: Case):
    """Structural moves toward a smaller failing case: contiguous layouts, fewer rows, fewer shared
    slots, fewer routed slots, fewer groups (or, ungrouped, fewer experts), no groups at all.
    Each keeps the case valid for the reference; the minimizer keeps those that still fail."""
    a = case.inputs
    scores, bias = a["scores"], a["bias"]
    M, N = scores.shape
    S, G, tg = a["num_fused_shared_experts"], a["num_expert_group"], a["topk_group"]
    KR = a["topk"] - S
    if not (scores.is_contiguous() and scores.storage_offset() == 0):
        yield case.with_inputs(scores=scores.contiguous())
    if not (bias.is_contiguous() and bias.storage_offset() == 0):
        yield case.with_inputs(bias=bias.contiguous())
    for keep in row_subsets(M):
        yield case.with_inputs(scores=scores[keep].contiguous())
    if S:
        yield case.with_inputs(topk=KR, num_fused_shared_experts=0)
        yield case.with_inputs(topk=a["topk"] - 1, num_fused_shared_experts=S - 1)
    for smaller in sorted({1, KR - 1}):
        if 0 < smaller < KR:
            yield case.with_inputs(topk=smaller + S)
    if G > 1:
        per = N // G
        for groups in _group_subsets(G):
            cols = torch.tensor([g * per + j for g in groups for j in range(per)], dtype=torch.long)
            G2 = len(groups)
            yield case.with_inputs(scores=scores[:, cols].contiguous(), bias=bias[cols].contiguous(),
                                   num_expert_group=G2 if G2 > 1 else 1, topk_group=min(tg, G2) if G2 > 1 else 1,
                                   topk=min(KR, G2 * per) + S)
        yield case.with_inputs(num_expert_group=1, topk_group=1)
    else:
        for lanes in _column_subsets(N):
            if len(lanes) >= KR:
                cols = torch.tensor(lanes, dtype=torch.long)
                yield case.with_inputs(scores=scores[:, cols].contiguous(), bias=bias[cols].contiguous())


def _group_subsets(G):
    """Fewer groups (topk_group capped to the groups left; one group left is ungrouped): the
    first and the second half, then each group dropped."""
    yield list(range(max(G // 2, 1)))
    yield list(range(G // 2, G))
    if G > 2:
        for drop in range(G):
            yield [g for g in range(G) if g != drop]


def _column_subsets(N):
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


__all__ = ["moe_fused_gate_cases", "judge_cases", "model_cases", "bench_cases", "bench_inputs", "smaller_cases",
           "build_case", "make_scores", "make_bias", "activations32", "case_features", "bulk_rows", "SIZES",
           "BULK_ELEMENTS", "PARAMS",
           "DEFAULTS", "JUDGE_CASES", "SCORE_KINDS", "BIAS_KINDS", "ROW_HAZARDS", "SPECIALS", "BIAS_SPECIALS",
           "FLOORS", "RSF", "GROUP_COUNTS", "GROUP_SIZES"]


# M * N > 2^31: the last rows' addresses need 64-bit offsets (2.15e9 bf16 scores: 4.3 GB, drawn in
# bf16, no float32 copy); the scores, the outputs, and room for the kernel's own buffers.
BEYOND_INT32_M, BEYOND_INT32_N = 8_400_000, 256
BEYOND_INT32_BYTES = BEYOND_INT32_M * BEYOND_INT32_N * 2 + BEYOND_INT32_M * 9 * 8 + 2**30


def beyond_int32_inputs(device="cuda") -> tuple[dict, list[int]]:
    """DeepSeek-V3's routing (8 groups, 4 kept, one fused shared expert) on every row; the rows
    whose outputs the verdict checks."""
    M, N = BEYOND_INT32_M, BEYOND_INT32_N
    gen = torch.Generator(device).manual_seed(0)
    inputs = {"scores": torch.randn(M, N, generator=gen, device=device, dtype=torch.bfloat16),
              "bias": 0.1 * torch.randn(N, generator=gen, device=device), "topk": 9, "scoring_func": "sigmoid",
              "num_fused_shared_experts": 1, "renormalize": True, "routed_scaling_factor": 2.5,
              "apply_routed_scaling_factor_on_output": False, "moe_softcapping": 0.0, "num_expert_group": 8,
              "topk_group": 4}
    return inputs, [0, 1, M // 2, M - 2, M - 1]
