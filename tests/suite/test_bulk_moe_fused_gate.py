"""moe_fused_gate's bulk rows (strategies/moe_fused_gate.bulk_rows): the rows a GPU case carries
besides its drawn ones, each with its own value kind and hazard, from one drawn seed."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import InvalidArgument

import strategies.moe_fused_gate as mfg
from strategies.moe_fused_gate import BULK_ELEMENTS, SIZES, bulk_rows, make_bias, moe_fused_gate_cases


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32 if x.dtype == torch.float32 else torch.int16)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
@pytest.mark.parametrize("G, N, tg, KR, dtype", [(8, 64, 3, 6, torch.bfloat16), (1, 33, 1, 4, torch.float32),
                                                 (5, 85, 2, 5, torch.float16)])
def test_bulk_rows_have_the_shape_dtype_and_kinds_and_follow_the_seed(G, N, tg, KR, dtype, device):
    """[B, N] in the scores' dtype, the same bits from the same seed, other values from another
    seed, and rows of several value kinds (integers, constant rows, 60 randn); built where the
    kernel runs (on a GPU in the GPU sizes): on every device here."""
    bias = make_bias("judge", N, groups=G, seed=3)

    def build(B, seed):
        return bulk_rows(B, N, groups=G, topk_group=tg, routed=KR, bias=bias, scoring="softmax", softcap=5.0,
                         seed=seed, dtype=dtype, device=device).cpu()

    x = build(400, 7)
    assert x.shape == (400, N) and x.dtype == dtype
    assert torch.equal(_bits(x), _bits(build(400, 7)))
    assert not torch.equal(_bits(x), _bits(build(400, 8)))
    assert build(0, 7).shape == (0, N)
    v = x.float()
    finite = v.isfinite().all(-1)
    integral = finite & (v == v.round()).all(-1) & (v.abs() <= 3).all(-1) & (v != v[:, :1]).any(-1)
    constant = (v == v[:, :1]).all(-1)
    wide = finite & (v.abs() > 40).any(-1)
    assert integral.sum() >= 10 and constant.sum() >= 10 and wide.sum() >= 10, (integral.sum(), constant.sum(),
                                                                                 wide.sum())


def _reference_order(x, bias, G, tg):
    """sel (sigmoid + bias, float32) with dropped groups' experts at -inf, as the reference ranks."""
    sel = (torch.sigmoid(x.float()) + bias[None, :]).nan_to_num(nan=math.inf)
    B, N = sel.shape
    per = N // G
    group_score = torch.topk(sel.view(B, G, per), 2, dim=-1).values.sum(-1)
    order = torch.sort(group_score, dim=-1, descending=True, stable=True)
    kept = torch.zeros(B, G, dtype=torch.bool).scatter_(1, order.indices[:, :tg], True)
    return sel, sel.masked_fill(~kept.repeat_interleave(per, 1), -math.inf), order.values


def _continuous_scores(kind, shape, *, groups, seed, scale, dtype, device="cpu"):
    return torch.randn(shape, generator=torch.Generator(device=device).manual_seed(seed), device=device).to(dtype)


def _plain(v: torch.Tensor) -> torch.Tensor:
    """sel that no special or floor gives under a bias of -1, 0, 1 (those give b, b + 0.5, b + 1)."""
    frac = v - v.floor()
    return v.isfinite() & (frac != 0) & (frac != 0.5)


def _hazard_counts(x: torch.Tensor, bias: torch.Tensor, G: int, tg: int, KR: int) -> dict[str, int]:
    """How many rows show each hazard's mark (sel = sigmoid + bias, ranked as the reference does)."""
    N = x.shape[1]
    per = N // G
    sel, masked, _ = _reference_order(x, bias, G, tg)
    ordered = torch.sort(masked, dim=-1, descending=True).values
    routed = ordered[:, :KR]
    in_routed = (routed[:, :, None] == ordered[:, None, :]).sum(-1)
    copies_in_routed = (in_routed >= 3) & (in_routed <= 4) & _plain(routed)
    at_boundary = ordered[:, KR - 1]
    tied = (ordered == at_boundary[:, None]).sum(-1)
    flat = _bits(x).long()
    one_ulp = ((flat[:, :, None] - flat[:, None, :]).abs() == 1).flatten(1).any(-1)
    nans = x.isnan().sum(-1)
    top2 = torch.topk(sel.view(-1, G, per), 2, dim=-1).values
    row_max = sel.max(-1, keepdim=True).values
    x3 = x.view(-1, G, per)
    copies = (x3[:, :, None, :] == x3[:, None, :, :]).all(-1) & (x3 != x3[..., :1]).any(-1)[:, :, None]
    floors = torch.stack([mfg._floor_value(name, torch.float32) for name in mfg.FLOORS])
    special = (x == math.inf) | (x == torch.finfo(torch.float32).max) | ((x > 0) & (x < 1e-37))
    lanes = torch.arange(N)
    first = torch.where(special, lanes, N).min(-1).values
    last = torch.where(special, lanes, -1).max(-1).values
    return {name: int(mask.sum()) for name, mask in (
        ("ties", copies_in_routed.any(-1)),
        ("boundary ties", (tied >= 3) & (tied <= 4) & _plain(at_boundary)),
        ("one ulp", one_ulp),
        ("nan", (nans >= 1) & (nans <= 3)),
        ("equal group max", ((top2[..., 0] == top2[..., 1]) & _plain(top2[..., 0])).any(-1)),
        ("row max twice", ((sel == row_max).sum(-1) == 2) & _plain(row_max[:, 0])),
        ("copied groups", (copies & ~torch.eye(G, dtype=torch.bool)).flatten(1).any(-1)),
        ("floors", ((x[:, :, None] == floors).sum(1) >= N - KR).any(-1)),
        ("runs", special.any(-1) & (special.sum(-1) == last - first + 1)),
        ("all equal", (x == x[:, :1]).all(-1) & x[:, 0].isfinite() & (x[:, 0].abs() > 1e-30)))}


# About 1/15 of the rows per draw of a hazard in HAZARD_DRAWS: 60 of 900 rows for one draw.
LEAST = {"ties": 40, "boundary ties": 30, "one ulp": 30, "nan": 60, "equal group max": 150, "row max twice": 50,
         "copied groups": 60, "floors": 60, "runs": 5, "all equal": 30}


def test_bulk_hazards_show_in_the_values(monkeypatch):
    """Every row drawn as continuous float32 randn (make_scores patched), so each repeated value,
    special or one-ulp pair comes from a hazard. Over 900 grouped rows (8 groups of 8, 3 kept,
    KR = 6) with a bias of -1, 0, 1 (lanes of equal bias: copies tie exactly in sel): each
    hazard's mark in enough rows (_hazard_counts). With a bias in which only groups 2 and 5 are
    equal lane for lane: every copied group is one of them onto the other, and group scores tie.
    With six groups that each hold one lane far above every other and the rest far below (those
    groups are dropped: the reference ranks their lanes last): the ties still meet at the
    routed boundary, inside the two kept groups."""
    monkeypatch.setattr(mfg, "make_scores", _continuous_scores)
    G, N, tg, KR, B = 8, 64, 3, 6, 300
    per = N // G
    bias = torch.randint(-1, 2, (N,), generator=torch.Generator().manual_seed(0)).float()
    x = torch.cat([bulk_rows(B, N, groups=G, topk_group=tg, routed=KR, bias=bias, scoring="sigmoid", softcap=0.0,
                             seed=seed, dtype=torch.float32) for seed in range(3)])
    counts = _hazard_counts(x, bias, G, tg, KR)
    assert all(counts[k] >= LEAST[k] for k in LEAST), counts

    pair_bias = torch.randn(N, generator=torch.Generator().manual_seed(1))
    pair_bias[5 * per:6 * per] = pair_bias[2 * per:3 * per]
    x = bulk_rows(B, N, groups=G, topk_group=tg, routed=KR, bias=pair_bias, scoring="sigmoid", softcap=0.0, seed=4,
                  dtype=torch.float32)
    x3 = x.view(-1, G, per)
    copies = (x3[:, :, None, :] == x3[:, None, :, :]).all(-1) & (x3 != x3[..., :1]).any(-1)[:, :, None]
    copies &= ~torch.eye(G, dtype=torch.bool)
    assert int(copies.flatten(1).any(-1).sum()) >= 20
    assert torch.equal(copies.any(0), _pair(G, 2, 5)), copies.any(0).nonzero().tolist()
    _, _, group_scores = _reference_order(x, pair_bias, G, tg)
    assert int((group_scores[:, 1:] == group_scores[:, :-1]).any(-1).sum()) >= 20

    tg = 2
    dropped_high = torch.full((G, per), -5.0)
    dropped_high[:, 0] = 5.0
    dropped_high[:tg] = 1.0
    x = torch.cat([bulk_rows(B, N, groups=G, topk_group=tg, routed=KR, bias=dropped_high.flatten(), scoring="sigmoid",
                             softcap=0.0, seed=seed, dtype=torch.float32) for seed in range(3)])
    counts = _hazard_counts(x, dropped_high.flatten(), G, tg, KR)
    assert counts["boundary ties"] >= LEAST["boundary ties"], counts


def _pair(G, a, b):
    m = torch.zeros(G, G, dtype=torch.bool)
    m[a, b] = m[b, a] = True
    return m


def test_gpu_sizes_draw_a_capped_bulk_that_shrinks_to_none():
    """The GPU strategy draws cases with the bulk_rows feature and more rows than max_rows, never
    more than max_rows + BULK_ELEMENTS // N of them; the CPU sizes carry no bulk; a count < 1 is
    refused by name; the simplest case (the shrink target) has no bulk."""
    sizes = SIZES["cuda"]
    assert "bulk_rows" not in SIZES["cpu"]
    with pytest.raises(InvalidArgument, match="bulk_rows"):
        moe_fused_gate_cases(bulk_rows=(0,))

    seen = []

    @settings(max_examples=6, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    @given(case=moe_fused_gate_cases(**sizes))
    def draw(case):
        M, N = case.inputs["scores"].shape
        assert M <= sizes["max_rows"] + min(max(sizes["bulk_rows"]), BULK_ELEMENTS // N)
        seen.append((M, "bulk_rows" in case.features))
    draw()
    max_rows = sizes["max_rows"]
    assert any(bulk and M > max_rows for M, bulk in seen), seen
    assert all(M <= max_rows for M, bulk in seen if not bulk), seen
    assert not seen[0][1], seen                     # Hypothesis draws the simplest case first
