"""Row-batched value fuzzing: the bulk rows a GPU case carries besides its drawn ones. Each op's
bulk builder gives every row its own hazard with tensor ops from one drawn seed; these tests
check that every hazard reaches the values, that the bulk is deterministic and capped, that the
GPU strategies draw it, and that the minimizer cuts a bulk case down to its failing rows."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings

from strategies.minimize import SINGLE_ROW_MOVES_UP_TO, minimize, row_subsets
from strategies.values import bulk_row_counts, special_tensor


def test_bulk_row_counts_shrink_to_none_and_respect_the_element_cap():
    counts = bulk_row_counts((2048, 16384), row_elements=1000, max_elements=1 << 22)
    assert find(counts, lambda n: True) == 0

    @settings(max_examples=30, database=None, deadline=None)
    @given(n=counts)
    def drawn(n):
        assert n in (0, 2048, 4194)
    drawn()
    with pytest.raises(Exception, match="bulk_row_counts"):
        bulk_row_counts((0,), row_elements=1, max_elements=1)


def test_a_bulk_case_is_cut_by_halves_and_quarters_down_to_its_failing_rows():
    """Two bad rows among 4096: no single-row moves while the case is large (each is a kernel run),
    and the minimizer still ends at the two rows."""
    assert not any(isinstance(s, list) and len(s) == 4095 for s in row_subsets(4096))
    assert sum(1 for _ in row_subsets(SINGLE_ROW_MOVES_UP_TO)) == 2 + 4 + SINGLE_ROW_MOVES_UP_TO
    from strategies.gate_topk import build_case, smaller_cases
    x = torch.zeros(4096, 8)
    x[1000, 3] = x[3000, 5] = 7.0
    calls = [0]

    def still_fails(case):
        calls[0] += 1
        return int((case.inputs["x"] == 7.0).sum()) == 2
    small = minimize(build_case(x=x, k=1), still_fails, smaller_cases=smaller_cases, budget_s=60, values=False)
    assert small.inputs["x"].shape[0] == 2 and calls[0] < 400, (small.inputs["x"].shape, calls[0])


# The bulk is built where the kernel runs (on a GPU in the GPU sizes): every builder on every device here.
BUILD_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.gate_topk
@pytest.mark.parametrize("device", BUILD_DEVICES)
@pytest.mark.parametrize("kind", ["randn", "judge", "zeros", "neg_inf"])
def test_gate_topk_bulk_rows_carry_every_hazard_deterministically(device, kind):
    from strategies.gate_topk import FLOORS, bulk_rows, case_features
    x = bulk_rows(kind, 700, 64, 8, seed=11, scale=1.0, dtype=torch.float32, device=device)
    assert x.shape == (700, 64) and x.dtype == torch.float32 and x.device.type == device
    assert torch.equal(x.view(torch.int32), bulk_rows(kind, 700, 64, 8, seed=11, scale=1.0, dtype=torch.float32,
                                                      device=device).view(torch.int32))
    x = x.cpu()
    if kind != "randn":   # the hazards on other backgrounds build too; randn's are checked one by one
        assert case_features(x, 8) >= {"nan", "all_equal"}
        return
    features = case_features(x, 8)
    assert {"ties", "boundary_tie", "near_tie", "nan", "neg_nan", "nan_tie", "all_equal", "inf", "neg_inf",
            "subnormal"} <= features, sorted(features)
    # a floor: a row whose lower ranks are all one of FLOORS' values, reaching into its top 8
    lowest = torch.sort(x.double().nan_to_num(nan=math.inf), dim=-1, descending=True).values
    floors = {float(special_tensor(name, torch.float32)) for name in FLOORS}
    assert any(len(set(row[7:].tolist())) == 1 and row[-1].item() in floors for row in lowest), "no floor row"


@pytest.mark.hc_head
def test_hc_head_bulk_tokens_carry_every_hazard_and_magnitude():
    from strategies.hc_head import bulk_tokens
    x = bulk_tokens(400, 2, 64, seed=3, dtype=torch.bfloat16).float()
    assert x.shape == (400, 2, 64)
    flat = x.reshape(400, -1)
    finite = flat.isfinite().all(-1)
    assert bool((flat == 0).all(-1).any()), "no zero token"
    assert bool(((flat == flat[:, :1]).all(-1) & (flat[:, 0] != 0)).any()), "no constant token"
    assert bool(flat.isnan().any(-1).any()) and bool(flat.isinf().any(-1).any()), "no special token"
    rms = flat[finite].pow(2).mean(-1).sqrt()
    rms = rms[rms > 0]
    assert float(rms.max() / rms.min()) > 1e30, "token magnitudes do not vary"
    again = bulk_tokens(400, 2, 64, seed=3, dtype=torch.bfloat16).float()
    assert torch.equal(x.nan_to_num(), again.nan_to_num())


@pytest.mark.parametrize("op", ["gate_topk", "hc_head"])
def test_the_gpu_strategy_draws_bulk_rows_on_top_of_the_drawn_ones(op):
    """SIZES["cuda"] carries a bulk: some drawn GPU case has more rows than max rows and says so."""
    from oracles.ops import get_op
    spec = get_op(op)
    sizes = spec.sizes["cuda"]
    most = sizes.get("max_rows", sizes.get("max_tokens"))
    seen = []

    @settings(max_examples=12, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=spec.cases(**sizes))
    def draw(case):
        rows = next(iter(case.inputs.values())).shape[0]
        if any(f.startswith("bulk") for f in case.features):
            seen.append(rows)
    draw()
    assert seen and max(seen) > most, seen


def test_a_single_drawn_row_mostly_stays_a_single_row():
    """Decode's shape: one drawn row keeps no bulk three times in five (Triton specializes an
    integer argument equal to 1), other cases one time in three."""
    shares = {}
    for rows in (1, 5):
        seen = []

        @settings(max_examples=50, database=None, deadline=None, phases=[Phase.generate])
        @given(bulk_row_counts((2048, 16384), row_elements=8, max_elements=1 << 22, drawn_rows=rows))
        def draw(n):
            seen.append(n)
        draw()
        # every count of the (small) space is drawn once: the shares are the weights
        shares[rows] = seen.count(0) / len(seen)
    assert shares == {1: 3 / 5, 5: 1 / 3}, shares
