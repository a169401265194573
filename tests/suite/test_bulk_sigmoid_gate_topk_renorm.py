"""sigmoid_gate_topk_renorm's bulk rows: the row-batched hazards a GPU case carries besides its drawn
tokens (strategies/sigmoid_gate_topk_renorm.py bulk_rows)."""

import math

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from strategies.sigmoid_gate_topk_renorm import (BULK_ELEMENTS, SIZES, bulk_rows, case_features, make_bias,
                                                 sigmoid_gate_topk_renorm_cases)
from strategies.values import FLOAT_DTYPES, background, special_tensor

N, S, K = 64, 2, 8


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32 if x.dtype == torch.float32 else torch.int16)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_bulk_rows_shape_dtype_and_determinism_from_the_seed(dtype):
    bias = make_bias("judge", N, seed=0)
    x = bulk_rows(300, N, S, K, bias=bias, seed=7, scale=1.0, dtype=dtype)
    assert x.shape == (300, N + S) and x.dtype == dtype
    assert torch.equal(_bits(x), _bits(bulk_rows(300, N, S, K, bias=bias, seed=7, scale=1.0, dtype=dtype)))
    other = bulk_rows(300, N, S, K, bias=bias, seed=8, scale=1.0, dtype=dtype)
    assert not torch.equal(_bits(x), _bits(other))

    def all_equal_rows(t):
        return (t[:, :N] == t[:, :1]).all(-1)
    # The hazards, not only the background, come from the seed.
    assert bool(all_equal_rows(x).any()) and not torch.equal(all_equal_rows(x), all_equal_rows(other))
    assert bulk_rows(0, N, S, K, bias=bias, seed=7, scale=1.0, dtype=dtype).shape == (0, N + S)
    # One routed lane: nothing to tie with, and every other hazard still builds.
    assert bulk_rows(50, 1, 0, 1, bias=bias[:1], seed=7, scale=1.0, dtype=dtype).shape == (50, 1)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_every_bulk_hazard_shows_in_the_values(device):
    """float32 randn has no equal or one-ulp-apart logits of its own: those, and the non-finite and
    special values, come from the hazards. A zero bias makes a copied logit an exact score tie. The
    bulk is built where the kernel runs (on a GPU in the GPU sizes): on every device here."""
    B, seeds, bias = 300, range(3), torch.zeros(N)
    xs = [bulk_rows(B, N, S, K, bias=bias, seed=s, scale=1.0, dtype=torch.float32, device=device) for s in seeds]
    assert all(x.device.type == device for x in xs)
    xs = [x.cpu() for x in xs]
    x = torch.cat(xs)
    routed = x[:, :N]
    assert bool((routed == routed[:, :1]).all(-1).any()), "no all-equal row"
    for value in (math.inf, -math.inf):
        assert bool((routed == value).any()), f"no {value} routed lane"
    assert bool(routed.isnan().any()), "no NaN routed lane"
    assert bool((_bits(x) == _bits(special_tensor("-nan", torch.float32))).any()), "no sparse special (-nan)"
    assert bool((x.abs() == torch.finfo(torch.float32).max).any()), "no sparse special (+-max)"
    ordered = routed.sort(dim=-1).values
    finite = ordered.isfinite()
    equal = (ordered[:, 1:] == ordered[:, :-1]) & finite[:, 1:]
    one_ulp = (torch.nextafter(ordered[:, :-1], torch.tensor(math.inf)) == ordered[:, 1:]) & finite[:, 1:]
    assert int((equal.any(-1) & ~(routed == routed[:, :1]).all(-1)).sum()) >= 10, "few exact-tie rows"
    assert int(one_ulp.any(-1).sum()) >= 10, "few near-tie rows"
    assert {"ties", "boundary_tie", "near_tie"} <= case_features(x, bias, K, S)
    # "none" is one hazard of six: about a sixth of the rows are the background itself.
    untouched = sum(int((_bits(xb) == _bits(background((B, N + S), seed=s, scale=1.0, dtype=torch.float32,
                                                       device=device).cpu()))
                        .all(-1).sum()) for s, xb in zip(seeds, xs))
    assert 0.08 * len(x) < untouched < 0.3 * len(x), untouched


def test_bulk_is_off_on_the_cpu_and_shrinks_away():
    """Hypothesis draws the simplest case first (every choice at its shrink target): no bulk."""
    assert "bulk_rows" not in SIZES["cpu"]
    simplest = []

    @settings(max_examples=1, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True, phases=[Phase.generate])
    @given(case=sigmoid_gate_topk_renorm_cases(**SIZES["cuda"]))
    def draw(case):
        simplest.append(case)
    draw()
    # the simplest case is in the judge's form (judge_forms' shrink target): one token, no more
    assert "bulk_rows" not in simplest[0].features and simplest[0].inputs["logits"].shape[0] == 1


@pytest.mark.parametrize("structure_pool", [SIZES["cuda"]["structure_pool"],
                                            ((5, 1024, 1, 8, torch.bfloat16), (3, 1024, 0, 16, torch.float32))])
def test_gpu_sizes_draw_bulk_rows_capped_by_bulk_elements(structure_pool):
    """Some GPU case carries more rows than max_tokens, and no bulk holds more than BULK_ELEMENTS
    logits (16384 rows of 1024 experts would be 17M)."""
    max_tokens, drawn = SIZES["cuda"]["max_tokens"], []

    @settings(max_examples=8, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True, phases=[Phase.generate])
    @given(case=sigmoid_gate_topk_renorm_cases(**{**SIZES["cuda"], "structure_pool": structure_pool}))
    def draw(case):
        drawn.append((case.features, *case.inputs["logits"].shape))
    draw()
    for features, rows, row_elements in drawn:
        assert "bulk_rows" in features or rows <= max_tokens, (features, rows)
        assert (rows - max_tokens) * row_elements <= BULK_ELEMENTS, (rows, row_elements)
    assert any("bulk_rows" in features and rows > max_tokens for features, rows, _ in drawn), drawn
