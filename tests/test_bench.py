"""kernels/bench.py without a GPU: the timer is a stub (do_bench needs CUDA), the cases are tiny,
and what is tested is what the benchmark times and how it judges the goals -- the entry the judge
calls is timed even when it only dispatches among the bundled designs, and the goals are judged
on it."""

import argparse
import math

import torch

from kernels import bench
from oracles.hc_head import reference as hc_head_reference

EAGER_US, KERNEL_US = 100.0, 10.0


def tiny_hc_head(T, device):
    gen = torch.Generator().manual_seed(T)
    return {"x": torch.randn(T, 4, 64, generator=gen).to(torch.bfloat16).to(device),
            "hc_fn": 0.02 * torch.randn(4, 256, generator=gen).to(device),
            "hc_scale": torch.tensor([1.5], device=device), "hc_base": 0.1 * torch.randn(4, generator=gen).to(device),
            "norm_eps": 1e-6, "hc_eps": 1e-3}


def fake_timed(fn, sets, quick):
    return EAGER_US if fn is hc_head_reference else KERNEL_US


def run_bench_op(monkeypatch, op):
    monkeypatch.setattr(bench, "cases", lambda _: [("T=2", 2, True, tiny_hc_head), ("T=5", 5, False, tiny_hc_head)])
    monkeypatch.setattr(bench, "timed", fake_timed)
    args = argparse.Namespace(no_compile=True, no_rotate=True, quick=True)
    logged = []
    result = bench.bench_op(op, args, copy_bps=1e12, l2_bytes=2**20, deadline=math.inf, log=logged.append,
                            device="cpu")
    return result, logged


def test_the_dispatching_entry_is_timed_and_judged(monkeypatch):
    result, logged = run_bench_op(monkeypatch, "hc_head")
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


def test_an_entry_that_is_one_of_the_designs_is_not_timed_twice(monkeypatch):
    import kernels.hc_head as module
    monkeypatch.setattr(module, "hc_head", module.hc_head_two_launch)
    result, _ = run_bench_op(monkeypatch, "hc_head")
    assert result["default"] == "two_launch"
    assert list(result["rows"][0]["kernels"]) == ["per_token", "two_launch"]
