"""Where the time goes: the measurements behind the limits in tests/results/benchmarks.md.
GPU only.

    python -m oracles.tools.bench_limits [--json PATH]

Prints, on the current CUDA device:
  - bandwidth: device-to-device copy; reads of a buffer that fits in L2 (L2 -> SM) and of one
    that does not (device memory);
  - hc_head's floor: a kernel that reads x once and writes y = sum_j c_j x[:, j] (no reductions)
    at the model shape, T = 2048 / 8192 / 32768 -- what any single-read design could reach --
    and the two launches of hc_head_two_launch timed alone;
  - host cost: one Triton launch of an empty kernel with 0 arguments and 10 of each kind, and
    torch.empty;
  - for the bundled entries at the judge's small cases: host time per call (300 calls back to
    back), GPU time (CUDA-graph replay) and do_bench's median on fixed inputs, next to the eager
    reference's. do_bench zeroes 256 MB before each call, so a call whose host time stays under
    that memset's GPU time (~50-60 us on an H200) is timed at its GPU time.

The measurements, with their dates and commands: tests/results/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import triton
import triton.language as tl
import triton.testing

from oracles.ops import OPS
from oracles.tools.bench import cases, copy_bandwidth, judge_agrees
from strategies.hc_head import bench_inputs as hc_head_inputs


@triton.jit
def _read_buffer(buf_ptr, out_ptr, n_buf, iters, BLOCK: tl.constexpr):
    """iters blocks a program, walking the buffer cyclically: with a buffer smaller than L2
    every read after the first pass comes from L2."""
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for it in range(iters):
        offs = ((pid + it * tl.num_programs(0)) * BLOCK) % n_buf
        acc += tl.load(buf_ptr + offs + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


@triton.jit
def _x_once(x_ptr, stride_xt, stride_xj, y_ptr, T, hidden, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """y[t, d] = sum_j c_j x[t, j, d] for fixed c (hc_mult = 4): hc_head's data movement without
    its reductions, the floor of any design that reads x once."""
    t0 = tl.program_id(0) * BLOCK_T
    rows = tl.arange(0, BLOCK_T)
    live_rows = ((t0 + rows) < T)[:, None]
    x_rows = x_ptr + tl.cast(t0, tl.int64) * stride_xt + rows[:, None] * stride_xt
    y_rows = y_ptr + tl.cast(t0, tl.int64) * hidden + rows[:, None] * hidden
    for d0 in range(0, hidden, BLOCK_D):
        d = (d0 + tl.arange(0, BLOCK_D))[None, :]
        live = live_rows & (d < hidden)
        y = 0.3 * tl.load(x_rows + d, mask=live, other=0.0).to(tl.float32)
        y += 0.2 * tl.load(x_rows + stride_xj + d, mask=live, other=0.0).to(tl.float32)
        y += 0.1 * tl.load(x_rows + 2 * stride_xj + d, mask=live, other=0.0).to(tl.float32)
        y += 0.4 * tl.load(x_rows + 3 * stride_xj + d, mask=live, other=0.0).to(tl.float32)
        tl.store(y_rows + d, y.to(y_ptr.dtype.element_ty), mask=live)


@triton.jit
def _no_args():
    pass


@triton.jit
def _ten_args(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    pass


def do_bench_us(fn) -> float:
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def host_us(fn, calls: int = 300) -> float:
    """Host time a call: calls back to back, no synchronization in between."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def graph_us(fn) -> float:
    """GPU time a call: fn captured in a CUDA graph, the replay timed by do_bench."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench_us(graph.replay)


def read_bandwidth(megabytes: int) -> float:
    """bytes/s of _read_buffer over a buffer of `megabytes`, ~8 GB read in all (median of 5)."""
    n = megabytes * 2**20 // 4
    buf = torch.randn(n, device="cuda")
    programs, block = torch.cuda.get_device_properties(0).multi_processor_count * 8, 2048
    iters = max(1, (8 * 2**30 // 4) // (programs * block))
    out = torch.empty(programs * block, device="cuda")
    launch = lambda: _read_buffer[(programs,)](buf, out, n, iters, BLOCK=block, num_warps=8)  # noqa: E731
    launch()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return programs * iters * block * 4 / sorted(times)[2]


def hc_head_floor(T: int, copy_bps: float) -> dict:
    from kernels.hc_head import _two_launch, two_launch_config
    inputs = hc_head_inputs(T, "cuda")
    x = inputs["x"]
    hidden = x.shape[2]
    y = torch.empty((T, hidden), dtype=x.dtype, device="cuda")
    moved = x.numel() * 2 + inputs["hc_fn"].numel() * 4 + y.numel() * 2
    once = graph_us(lambda: _x_once[(triton.cdiv(T, 4),)](x, x.stride(0), x.stride(1), y, T, hidden,
                                                          BLOCK_T=4, BLOCK_D=1024, num_warps=8))
    cfg = two_launch_config(T, x.shape[1], hidden)
    args = (x, inputs["hc_fn"], inputs["hc_scale"], inputs["hc_base"], inputs["norm_eps"], inputs["hc_eps"], y, cfg)
    both = graph_us(lambda: _two_launch(*args))
    return {"T": T, "x_once_us": once, "x_once_pct_copy": 100 * moved / (once * 1e-6) / copy_bps,
            "two_launch_us": both, "two_launch_pct_copy": 100 * moved / (both * 1e-6) / copy_bps}


def launch_costs() -> dict:
    z = torch.zeros(16, device="cuda")
    ints = [3, 5, 7, 9, 11, 13, 15, 17, 19, 21]
    costs = {"0 args": host_us(lambda: _no_args[(1,)]())}
    for label, values in (("10 ints", ints), ("10 floats", [0.5] * 10), ("10 tensors", [z] * 10)):
        costs[label] = host_us(lambda values=values: _ten_args[(1,)](*values))
    costs["torch.empty"] = host_us(lambda: torch.empty((8, 5), dtype=torch.bfloat16, device="cuda"))
    return costs


def small_case_split() -> list[dict]:
    """Every op's default entry at the two smallest sizes of its bench grid."""
    rows = []
    for op, spec in OPS.items():
        entry = getattr(spec.kernel_module, op)
        for _, size, _, build in sorted(cases(op), key=lambda c: c[1])[:2]:
            inputs = build(size, "cuda")
            call = lambda fn=entry, inputs=inputs: fn(**inputs)  # noqa: E731
            rows.append({"op": op, "size": size, "check": judge_agrees(op, call(), spec.reference(**inputs)),
                         "host_us": host_us(call), "gpu_us": graph_us(call), "do_bench_us": do_bench_us(call),
                         "eager_do_bench_us": do_bench_us(lambda r=spec.reference, i=inputs: r(**i))})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracles.tools.bench_limits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("oracles.tools.bench_limits measures a GPU; no CUDA device here", file=sys.stderr)
        return 2
    copy_bps = copy_bandwidth(quick=False)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "copy_TBps": copy_bps / 1e12,
              "read_TBps": {f"{mb} MB": read_bandwidth(mb) / 1e12 for mb in (24, 1024)},
              "hc_head_floor": [hc_head_floor(T, copy_bps) for T in (2048, 8192, 32768)],
              "launch_host_us": launch_costs(), "small_cases": small_case_split()}
    print(f"{report['device']} (torch {report['torch']}, triton {report['triton']}): copy {report['copy_TBps']:.2f} TB/s; "
          + ", ".join(f"reads of {k}: {v:.2f} TB/s" for k, v in report["read_TBps"].items()))
    for row in report["hc_head_floor"]:
        print(f"hc_head T={row['T']}: x once + y {row['x_once_us']:.1f} us ({row['x_once_pct_copy']:.0f}% of copy); "
              f"two_launch {row['two_launch_us']:.1f} us ({row['two_launch_pct_copy']:.0f}%)")
    print("host us a call: " + ", ".join(f"{k} {v:.1f}" for k, v in report["launch_host_us"].items()))
    print("| op | size | host us | GPU us | do_bench us | eager do_bench us | check |\n|---|---|---|---|---|---|---|")
    for row in report["small_cases"]:
        print(f"| {row['op']} | {row['size']} | {row['host_us']:.1f} | {row['gpu_us']:.1f} | {row['do_bench_us']:.1f} | "
              f"{row['eager_do_bench_us']:.1f} | {row['check']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
