"""moe_fused_gate's judge-form cases (strategies.values.judge_forms): every case drawn in the
judge's own form lies inside the judge domain (oracles/ops/moe_fused_gate.judge_domain_violations),
so a kernel's refusal of it is a failure and not `unsupported`; and the predicate that picks the
GPU pool's entries for those cases agrees with the domain."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import strategies.moe_fused_gate as mfg
from oracles.ops.moe_fused_gate import judge_domain_violations
from strategies.moe_fused_gate import GPU_STRUCTURES, SIZES, build_case, moe_fused_gate_cases
from strategies.values import JUDGE_FORM

pytestmark = pytest.mark.moe_fused_gate

DRAWS = settings(max_examples=40, derandomize=True, database=None, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

# A pool of the GPU entries outside the judge domain only (float16, the -inf fill), which a
# judge-form case must not take (tests/suite/test_strategies.py draws every op's own sizes); the
# bulk rows small, since they are values and do not change a case's form.
SMALL_BULK = {"outside_pool": {**SIZES["cuda"], "bulk_rows": (64,),
                               "structure_pool": tuple(s for s in GPU_STRUCTURES if not mfg._in_judge_domain(s))}}


@pytest.mark.parametrize("sizes", list(SMALL_BULK))
def test_judge_form_cases_lie_inside_the_judge_domain(sizes):
    drawn = []

    @DRAWS
    @given(case=moe_fused_gate_cases(**SMALL_BULK[sizes]))
    def draw(case):
        drawn.append((JUDGE_FORM in case.features, judge_domain_violations(case), case.summary()))

    draw()
    outside = [(why, summary) for judge_form, why, summary in drawn if judge_form and why]
    assert not outside, f"judge-form cases outside the judge domain: {outside[:3]}"
    assert sum(judge_form for judge_form, _, _ in drawn) >= 4, "too few judge-form cases to tell"
    # the other cases still reach outside the domain (layouts, odd names, KR = 0, the -inf fill)
    assert any(why for _, why, _ in drawn), "no case outside the judge domain"


def _case_of(structure) -> object:
    """A case with a pool entry's structure (randn scores, the judge's kind of bias)."""
    M, N, G, tg, KR, S, scoring, softcap, renormalize, rsf, apply, dtype = structure
    return build_case(scores=torch.randn(M, N).to(dtype), bias=0.1 * torch.randn(N), topk=KR + S, scoring_func=scoring,
                      num_fused_shared_experts=S, renormalize=renormalize, routed_scaling_factor=rsf,
                      apply_routed_scaling_factor_on_output=apply, moe_softcapping=softcap, num_expert_group=G,
                      topk_group=tg)


_BASE = (4, 64, 8, 3, 6, 1, "sigmoid", 0.0, True, 2.5, False, torch.bfloat16)
# Each an entry just outside the domain or just inside it: _BASE with the fields (by position) changed.
_EDGES = [
    {0: 0}, {0: 65536}, {0: 65537}, {1: 1, 2: 1, 3: 1, 4: 1}, {1: 512}, {1: 514, 2: 1, 3: 1}, {2: 1, 3: 1},
    {2: 1, 3: 2}, {2: 16, 3: 16, 4: 16}, {2: 32, 3: 1, 4: 2}, {2: 64, 3: 1, 4: 1}, {2: 5}, {3: 0}, {3: 8}, {3: 9}, {4: 0},
    {3: 1, 4: 8}, {3: 1, 4: 9}, {4: 16, 1: 256, 3: 8}, {4: 17, 1: 256, 3: 8}, {5: 8}, {5: 9}, {6: "Sigmoid"},
    {6: "softmax", 7: 30.0}, {7: -1.0}, {7: 0}, {9: 0.0}, {9: -1.0}, {9: None}, {9: 1}, {9: float("inf")},
    {9: 1e-3}, {11: torch.float16}, {11: torch.float32},
]


@pytest.mark.parametrize("structure", list(GPU_STRUCTURES) + [
    tuple(edge.get(i, v) for i, v in enumerate(_BASE)) for edge in _EDGES])
def test_the_pool_filter_agrees_with_the_judge_domain(structure):
    """A judge-form case takes only the pool's entries that _in_judge_domain accepts: it must
    accept exactly those whose cases the domain holds (values aside)."""
    assert mfg._in_judge_domain(structure) == (judge_domain_violations(_case_of(structure)) == []), structure
