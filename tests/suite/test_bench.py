"""oracles/tools/bench.py with a stub timer (do_bench needs CUDA, and real times prove nothing here), on
the suite's device (the CPU interpreter, or a GPU), the cases tiny: what is tested is what the
benchmark times and how it judges the goals -- the entry the judge
calls is timed even when it only dispatches among the bundled designs, and the goals are judged
on it."""

import argparse
import math

import torch

from oracles.tools import bench
from kernels.hc_head import _cdiv
from oracles.ops.hc_head import reference as hc_head_reference

EAGER_US, KERNEL_US = 100.0, 10.0


def tiny_hc_head(T, device):
    gen = torch.Generator().manual_seed(T)
    return {"x": torch.randn(T, 4, 64, generator=gen).to(torch.bfloat16).to(device),
            "hc_fn": 0.02 * torch.randn(4, 256, generator=gen).to(device),
            "hc_scale": torch.tensor([1.5], device=device), "hc_base": 0.1 * torch.randn(4, generator=gen).to(device),
            "norm_eps": 1e-6, "hc_eps": 1e-3}


def fake_timed(fn, sets, quick):
    return EAGER_US if fn is hc_head_reference else KERNEL_US


def run_bench_op(monkeypatch, op, device):
    monkeypatch.setattr(bench, "cases", lambda _: [("T=2", 2, True, tiny_hc_head), ("T=5", 5, False, tiny_hc_head)])
    monkeypatch.setattr(bench, "timed", fake_timed)
    args = argparse.Namespace(no_compile=True, no_rotate=True, quick=True)
    logged = []
    result = bench.bench_op(op, args, copy_bps=1e12, l2_bytes=2**20, deadline=math.inf, log=logged.append,
                            device=device)
    return result, logged


def test_the_dispatching_entry_is_timed_and_judged(monkeypatch, run_options):
    result, logged = run_bench_op(monkeypatch, "hc_head", run_options.device)
    assert result["default"] == "entry"
    for row in result["rows"]:
        assert list(row["kernels"]) == ["entry", "per_token", "two_launch"]
        assert all(k["check"] == "ok" and k["us"] == KERNEL_US for k in row["kernels"].values()), row
        assert row["eager_us"] == EAGER_US and row["sets"] == 1  # --no-rotate: one input set
    averages = bench.summary([result], 1e12)
    entry = next(a for a in averages if a["implementation"] == "entry")
    assert entry["default"] and entry["cases"] == 1 and entry["avg_x_eager"] == EAGER_US / KERNEL_US
    meta = {"copy_bandwidth_Bps": 1e12}
    [goal] = bench.goals(meta, [result], averages)
    assert goal.startswith("goal hc_head (entry): average x eager 10.00 (want >= 8: met)"), goal


def test_an_entry_that_is_one_of_the_designs_is_not_timed_twice(monkeypatch, run_options):
    import kernels.hc_head as module
    monkeypatch.setattr(module, "hc_head", module.hc_head_two_launch)
    result, _ = run_bench_op(monkeypatch, "hc_head", run_options.device)
    assert result["default"] == "two_launch"
    assert list(result["rows"][0]["kernels"]) == ["per_token", "two_launch"]


def test_limit_probes_compute_what_they_claim(run_options):
    """oracles/tools/bench_limits.py's probe kernels (GPU timing only) on tiny inputs: the x-once
    kernel's y, and the buffer reader's cyclic sums."""
    from oracles.tools.bench_limits import _read_buffer, _x_once
    device = run_options.device
    T, hidden = 5, 40
    x = torch.randn(T, 4, hidden, device=device).to(torch.bfloat16)
    y = torch.empty(T, hidden, dtype=torch.bfloat16, device=device)
    _x_once[(_cdiv(T, 4),)](x, x.stride(0), x.stride(1), y, T, hidden, BLOCK_T=4, BLOCK_D=16)
    c = torch.tensor([0.3, 0.2, 0.1, 0.4], device=device)
    expected = (x.float() * c[None, :, None]).sum(1)
    assert torch.allclose(y.float(), expected, **bench_tolerance())
    buf = torch.arange(64, dtype=torch.float32, device=device)
    out = torch.empty(2 * 16, device=device)
    _read_buffer[(2,)](buf, out, 64, 3, BLOCK=16)
    walk = [(p + it * 2) * 16 % 64 for p in range(2) for it in range(3)]
    expected = torch.stack([torch.stack([buf[o:o + 16] for o in walk[p * 3:(p + 1) * 3]]).sum(0) for p in range(2)])
    assert torch.equal(out.reshape(2, 16), expected)


def bench_tolerance():
    """The judge's bf16 tolerance (one policy: oracles/tolerances.py)."""
    from oracles.tolerances import judge_tolerance
    atol, rtol = judge_tolerance(torch.bfloat16)
    return {"atol": atol, "rtol": rtol}


def test_an_op_that_declares_its_bench_cases_needs_no_branch_in_the_bench(monkeypatch, run_options):
    """gate_topk's SPEC declares its bench cases and no sweep or goal; oracles/tools/bench.py
    times the dispatching entry and both designs, counts traffic from the reference's outputs,
    sweeps nothing and sets no goal for it."""
    from oracles.ops.gate_topk import reference
    device = run_options.device
    tiny = [("m=3 k=2", 3, True, lambda size, dev: {"x": torch.rand(size, 40).to(dev), "k": 2})]
    monkeypatch.setattr(bench, "cases", lambda _: tiny)
    monkeypatch.setattr(bench, "timed", lambda fn, sets, quick: EAGER_US if fn is reference else KERNEL_US)
    args = argparse.Namespace(no_compile=True, no_rotate=True, quick=True)
    logged = []
    result = bench.bench_op("gate_topk", args, copy_bps=1e12, l2_bytes=2**20, deadline=math.inf, log=logged.append,
                            device=device)
    [row] = result["rows"]
    assert result["default"] == "entry" and list(row["kernels"]) == ["entry", "rows", "streaming"]
    assert all(k["check"] == "ok" for k in row["kernels"].values()), row
    assert row["bytes"] == 3 * 40 * 4 + 3 * 2 * 4 + 3 * 2 * 4  # x + values (float32) + indices (int32)
    [goal] = bench.goals({"copy_bandwidth_Bps": 1e12}, [result], bench.summary([result], 1e12))
    assert goal.startswith("goal gate_topk (entry): average x eager 10.00 (no goal set)"), goal
    assert bench.sweep_op("gate_topk", args, 2**20, logged.append, device=device) == []
    assert "gate_topk" in bench.OPS


def tied_rows_topk():
    """gate_topk inputs whose rows hold exact ties inside the top k, and the reference's output."""
    from oracles.ops.gate_topk import reference
    x = torch.tensor([[3.0, 5.0, 5.0, 1.0, 0.5, 2.0], [0.0, 1.0, 2.0, 3.0, 4.0, 4.0]])
    inputs = {"x": x, "k": 3}
    return inputs, reference(**inputs)


def test_a_bench_disagreement_from_tie_order_is_a_risk_not_a_diff():
    """torch.topk orders exact ties differently on CUDA; a kernel that puts the larger index of a
    tie first fails the judge's exact check there, and the bench must not call it wrong."""
    inputs, (values, indices) = tied_rows_topk()
    swapped = indices.clone()
    swapped[:, [0, 1]] = indices[:, [1, 0]]  # both rows: the two tied maxima in the other order

    out = (values.clone(), swapped)  # what such a kernel returns
    message = bench.judge_agrees("gate_topk", out, (values, indices))
    assert message != "ok"
    explained = bench.explain_disagreement("gate_topk", inputs, out, (values, indices), message)
    assert explained.startswith("risk tie"), explained
    assert bench.check_label(explained) == "risk"


def test_a_bench_disagreement_from_a_wrong_choice_stays_a_diff():
    inputs, (values, indices) = tied_rows_topk()
    wrong = indices.clone()
    wrong[:, 2] = torch.tensor([4, 0], dtype=wrong.dtype)  # a smaller value than the true third

    out = (torch.gather(inputs["x"], 1, wrong.long()), wrong)  # values and indices of a wrong third
    message = bench.judge_agrees("gate_topk", out, (values, indices))
    explained = bench.explain_disagreement("gate_topk", inputs, out, (values, indices), message)
    assert explained.startswith("DIFF"), explained
    assert bench.check_label(explained) == "DIFF"


def test_fuzz_throughput_says_where_the_time_went(run_options):
    """The phase split adds up to the run's time, and each phase is measured where it happens:
    the kernel's calls, the oracle's verdict and the draw take time on every example."""
    stats = bench.fuzz_throughput("sigmoid_gate_topk_renorm", run_options.device, seconds=3.0)
    assert stats["examples"] >= 1 and stats["errors"] == 0, stats
    phases = stats["phases"]
    assert set(phases) == set(bench.PHASES), phases
    assert abs(sum(phases.values()) - stats["seconds"]) <= 0.05 * stats["seconds"] + 0.05, (phases, stats["seconds"])
    assert phases["kernel"] > 0 and phases["oracle"] > 0 and phases["draw"] > 0, phases
    # rows: the row inputs' first dimension summed (a first derandomized case may hold none)
    assert stats["rows"] >= 0 and math.isclose(stats["rows_per_second"], stats["rows"] / stats["seconds"]), stats


def test_a_bench_disagreement_with_the_devices_own_tie_order_is_a_risk():
    """On the H200 the kernel put tied experts smaller-index first and CUDA's torch.topk did not:
    the verdict must compare with the reference as it ran there (its rows), not with the CPU
    reference run again, which agrees with the kernel and left the bench printing DIFF."""
    inputs, (values, indices) = tied_rows_topk()
    cuda_order = indices.clone()
    cuda_order[:, [0, 1]] = indices[:, [1, 0]]  # the reference's tie order on that device
    message = bench.judge_agrees("gate_topk", (values, indices), (values.clone(), cuda_order))
    assert message != "ok"
    explained = bench.explain_disagreement("gate_topk", inputs, (values, indices), (values.clone(), cuda_order),
                                           message)
    assert explained.startswith("risk tie"), explained


def test_a_bench_disagreement_is_judged_on_the_rows_the_judge_rejects():
    """On the H200 moe's m=65536 case differed from CUDA's reference in the last bits of most rows
    (within the judge's tolerance) and in the tie order of a few: the verdict must look at the
    rows the judge rejects, not the first rows whose bits differ (which all passed it, and left
    the bench printing DIFF for a tie)."""
    from oracles.ops.moe_fused_gate import reference
    from strategies.moe_fused_gate import build_case
    M, N, tied_row = 40, 16, 35
    scores = torch.randn(M, N, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    bias = torch.zeros(N)
    top = torch.topk(torch.sigmoid(scores[tied_row].float()), 4).indices.tolist()
    a = top[3]  # the last routed slot: the tie straddles the boundary, one of the two is chosen
    b = next(e for e in range(N) if e not in top)
    scores[tied_row, b] = scores[tied_row, a]  # expert b ties expert a exactly (same score, no bias)
    inputs = dict(build_case(scores=scores, bias=bias, topk=4).inputs)
    weights, indices = reference(**inputs)
    row = indices[tied_row].tolist()
    chosen, other = (a, b) if a in row else (b, a)
    assert chosen in row and other not in row, (row, a, b)
    device_w, device_i = weights.clone(), indices.clone()  # the reference as another device ran it:
    device_i[tied_row, row.index(chosen)] = other  # the other expert of the tie
    device_w = torch.nextafter(device_w, torch.full_like(device_w, 2.0))  # and other last bits everywhere
    message = bench.judge_agrees("moe_fused_gate", (weights, indices), (device_w, device_i))
    assert message != "ok"
    explained = bench.explain_disagreement("moe_fused_gate", inputs, (weights, indices), (device_w, device_i), message)
    assert explained.startswith("risk tie"), explained
