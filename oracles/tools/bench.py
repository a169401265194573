"""Time the bundled kernels against the task reference on a GPU; measure the fuzz throughput.

    python -m oracles.tools.bench [--op OP] [--quick] [--json PATH] [--dry-run] [--no-compile] [--no-rotate]
                            [--no-sweep] [--fuzz-seconds S] [--budget-s S]

On a CUDA device, for each op at the judge's bench cases (and one larger case):
  - checks every bundled implementation (IMPLEMENTATIONS) against the task reference with the
    judge's check (the verdict's judge check: the op's tolerance, integer outputs exactly), then times
    it, the reference (eager) and torch.compile(reference) (if compiling fails, says why and
    goes on), with triton.testing.do_bench(return_mode="median");
  - reports the speedups over both, the achieved bandwidth against the device's measured copy
    bandwidth, and the average speedup over the bench cases (the judge's metric: reference time
    / kernel time, averaged over the bench cases);
  - sweeps the launch parameters the default kernels expose for tuning (the op's
    OpSpec.tuning_sweep), each configuration checked like the rest, for the next tuning round.
Then, on the GPU and on the CPU (Triton's interpreter, in a subprocess), the fuzz throughput:
examples a second of each op's property (a case drawn from strategies.<op>.<op>_cases(**SIZES
[device]) run through oracles.harness.differential.run_case), for --fuzz-seconds each.
Without a GPU the timing part is skipped (say --dry-run to build its inputs on the CPU and print
the plan) and only the CPU throughput runs. The last thing printed is a markdown table.

Nothing here is imported by the suite or by kernels/<op>.py (which stay submittable as they are).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from oracles.ops import OPS as REGISTERED_OPS  # imports no kernel
from oracles.harness.sampled_rows import verdict_on_rows
from oracles.tolerances import judge_tolerance
from oracles.verdict import PASS, judge_check

ROOT = Path(__file__).resolve().parents[2]
OPS = tuple(REGISTERED_OPS)

# Input rotation. Every call a timing makes takes the next of n_sets copies of the case's inputs,
# so the inputs of one call were last touched n_sets - 1 calls earlier: with the copies totalling
# max(ROTATE_MIN_BYTES = 256 MB, 2 x L2) no input is still in L2 when it is read again, and a
# small case is timed from device memory, as a real call meets it, not from L2. (triton's
# do_bench also writes a 256 MB buffer before each timed call, which flushes L2 as well; the
# rotation does not rely on that, and also covers do_bench's warm-up calls.) Tiny cases stop at
# MAX_SETS copies (512 copies of a 1 KB case are far from 256 MB, but each timed call is then
# preceded by do_bench's flush); a case whose inputs alone pass 256 MB gets a single set.
ROTATE_MIN_BYTES = 256 * 2**20
MAX_SETS = 512
COPY_BYTES = 2**30  # the copy-bandwidth probe copies 1 GiB device to device


# ---------------------------------------------------------------------------------------------
# Cases: the judge's bench grid and one larger size, as the op declares them (OpSpec.bench_cases)


def cases(op: str):
    """(label, size, is_bench_case, builder) for the op; builder(size, device) -> inputs."""
    return REGISTERED_OPS[op].bench_cases()


def tensor_bytes(value) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def traffic_bytes(op: str, inputs: dict) -> int:
    """Bytes a kernel must move at least: each tensor input read once + each output the task
    reference returns for these inputs written once."""
    out = REGISTERED_OPS[op].reference(**inputs)
    return sum(tensor_bytes(v) for v in inputs.values()) + sum(
        tensor_bytes(t) for t in (out if isinstance(out, tuple) else (out,)))


def input_sets(inputs: dict, l2_bytes: int) -> list[dict]:
    """n_sets copies of the inputs for rotation (see ROTATE_MIN_BYTES); the first is `inputs`."""
    set_bytes = max(1, sum(tensor_bytes(v) for v in inputs.values()))
    n_sets = min(MAX_SETS, max(1, math.ceil(max(ROTATE_MIN_BYTES, 2 * l2_bytes) / set_bytes)))
    sets = [inputs]
    for _ in range(n_sets - 1):
        sets.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
    return sets


def rotating(fn, sets: list[dict]):
    """A no-argument callable for do_bench: each call runs fn on the next input set."""
    position = [0]

    def call():
        i = position[0]
        position[0] = (i + 1) % len(sets)
        return fn(**sets[i])
    return call


# ---------------------------------------------------------------------------------------------
# Checks and timing on the GPU


def judge_agrees(op: str, out, ref) -> str:
    """'ok', or what differs, by the verdict's own judge check (oracles/verdict.py judge_check):
    assert_close after a float32 cast at the op's judge tolerance, integer outputs exactly."""
    spec = REGISTERED_OPS[op]
    out = out if isinstance(out, tuple) else (out,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    if len(out) != len(ref):
        return f"returned {len(out)} value(s), the reference {len(ref)}"
    check = judge_check(dict(zip(spec.output_names, out)), dict(zip(spec.output_names, ref)),
                        tolerance_dtype=spec.judge_tolerance_dtype)
    return "ok" if check.status == PASS else check.message


MAX_EXPLAINED_ROWS = 32  # rows of a disagreement the float64 verdict looks at


def differing_rows(out, ref, tolerance_dtype=None) -> list[int]:
    """Rows the judge's check rejects: an integer output differs, or a float one is outside the
    judge's tolerance (torch.isclose at the dtype the official test names, else the
    reference's; a NaN where the reference has none, or the reverse). The first
    MAX_EXPLAINED_ROWS of them. (Every row whose float32 bits differ would be most rows of a
    large case: on the H200 the first 32 such rows of moe's m=65536 bench case all agreed with
    the reference within the tolerance, and the verdict on them said nothing about the rows the
    judge rejected.)"""
    out = out if isinstance(out, tuple) else (out,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    rows = torch.zeros(out[0].shape[0], dtype=torch.bool, device=out[0].device)
    for o, r in zip(out, ref):
        if r.is_floating_point():
            atol, rtol = judge_tolerance(tolerance_dtype or r.dtype)
            same = torch.isclose(o.float(), r.to(o.device).float(), rtol=rtol, atol=atol, equal_nan=True)
        else:
            same = o == r.to(o.device)
        rows |= ~same.reshape(same.shape[0], -1).all(dim=1)
    return rows.nonzero().flatten()[:MAX_EXPLAINED_ROWS].tolist()


def explain_disagreement(op: str, inputs: dict, out, ref, judge_message: str) -> str:
    """When the judge's exact check rejects a bench case, the op's own verdict (float64 oracle,
    valid top-k sets within float32 rounding, NaN rules) on the differing rows says whether the
    kernel is wrong ('DIFF: ...') or only differs where the reference's order or rounding is not
    the contract ('risk tie: ...', say: torch.topk orders exact ties differently on CUDA, and
    random bf16 scores at 65,536 rows hold exact ties)."""
    rows = differing_rows(out, ref, REGISTERED_OPS[op].judge_tolerance_dtype)
    if not rows:
        return f"DIFF: {judge_message}"
    # the outputs already returned, against the reference's own rows (its device's tie order)
    _, verdict = verdict_on_rows(op, inputs, out, rows, features=frozenset(), reference_raw=ref)
    failing = verdict.failures()
    if failing:
        return f"DIFF: {'; '.join(c.message.splitlines()[0][:300] for c in failing)}"
    kinds = sorted({c.kind for c in verdict.risks()})
    if not kinds:
        return f"DIFF: {judge_message}"
    return (f"risk {', '.join(kinds)}: the judge's exact check differs in {len(rows)} row(s), "
            f"the op's verdict passes them ({judge_message.splitlines()[0][:200]})")


def check_label(check: str | None) -> str:
    """The bench table's check column: ok, risk (the verdict explains the difference) or DIFF."""
    if check == "ok":
        return "ok"
    return "risk" if check and check.startswith("risk") else "DIFF"


def timed(fn, sets, quick: bool) -> float:
    """Median time in microseconds of fn over rotating input sets (triton.testing.do_bench)."""
    import triton.testing
    warmup, rep = (5, 20) if quick else (25, 100)
    return 1e3 * triton.testing.do_bench(rotating(fn, sets), warmup=warmup, rep=rep, return_mode="median")


def copy_bandwidth(quick: bool) -> float:
    """Device-to-device copy of COPY_BYTES, bytes read + written over the median time: bytes/s."""
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    t_us = timed(lambda a, b: b.copy_(a), [{"a": src, "b": dst}], quick)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / (t_us * 1e-6)


def compile_reference(reference):
    """torch.compile(reference) with a per-shape graph; (compiled fn, None) or (None, why)."""
    import torch._dynamo
    for knob in ("cache_size_limit", "recompile_limit"):  # one graph per case shape: 6 shapes
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    try:
        return torch.compile(reference, dynamic=False), None
    except Exception as e:  # noqa: BLE001 -- a benchmark reports why and goes on
        return None, f"{type(e).__name__}: {e}"


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def free_cached(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def bench_op(op: str, args, copy_bps: float, l2_bytes: int, deadline: float, log, device: str = "cuda") -> dict:
    """Check and time every implementation, the reference and torch.compile at every case."""
    kernel_module = REGISTERED_OPS[op].kernel_module
    reference = REGISTERED_OPS[op].reference
    entry = getattr(kernel_module, op)
    impls = list(kernel_module.IMPLEMENTATIONS)
    if all(fn is not entry for _, fn in impls):
        # The entry the judge calls may dispatch among the designs (by size, say), so it
        # is timed itself, and the goals are judged on it, not on any one design.
        impls.insert(0, ("entry", entry))
    default = next(name for name, fn in impls if fn is entry)
    compiled, compile_error = (None, "--no-compile") if args.no_compile else compile_reference(reference)
    if compile_error and not args.no_compile:
        log(f"[{op}] torch.compile(reference) failed: {compile_error}; continuing without it")
    rows = []
    for label, size, is_bench, build in cases(op):
        inputs = build(size, device)
        sets = [inputs] if args.no_rotate else input_sets(inputs, l2_bytes)
        nbytes = traffic_bytes(op, inputs)
        ref_out = reference(**inputs)
        synchronize(device)
        row = {"op": op, "case": label, "size": size, "bench": is_bench, "bytes": nbytes, "sets": len(sets),
               "kernels": {}, "eager_us": None, "compile_us": None, "compile_error": None}
        row["eager_us"] = timed(reference, sets, args.quick)
        if compiled is not None and time.monotonic() < deadline:
            try:
                out = compiled(**inputs)  # compiles this shape (not timed)
                synchronize(device)
                agrees = judge_agrees(op, out, ref_out)
                if agrees != "ok":
                    log(f"[{op} {label}] note: torch.compile(reference) vs eager: {agrees}")
                row["compile_us"] = timed(compiled, sets, args.quick)
            except Exception as e:  # noqa: BLE001
                row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log(f"[{op} {label}] torch.compile(reference) failed: {row['compile_error']}; continuing")
        elif compiled is not None:
            row["compile_error"] = "skipped: past --budget-s"
        for name, fn in impls:
            entry = {"check": None, "us": None, "error": None}
            try:
                out = fn(**inputs)
                entry["check"] = judge_agrees(op, out, ref_out)
                if entry["check"] != "ok":
                    entry["check"] = explain_disagreement(op, inputs, out, ref_out, entry["check"])
                del out
                entry["us"] = timed(fn, sets, args.quick)
            except Exception as e:  # noqa: BLE001 -- report the kernel's error, time the rest
                entry["error"] = f"{type(e).__name__}: {e}"
            row["kernels"][name] = entry
        rows.append(row)
        log(describe_row(row, copy_bps))
        del sets, inputs, ref_out
        free_cached(device)
    return {"op": op, "default": default, "rows": rows, "compile_error": compile_error}


def sweep_op(op: str, args, l2_bytes: int, log, device: str = "cuda", sizes=None) -> list[dict]:
    """Time the default implementation's tunable launch parameters (OpSpec.tuning_sweep)."""
    spec = REGISTERED_OPS[op]
    if spec.tuning_sweep is None:
        log(f"[sweep {op}] no launch-parameter sweep declared for this op")
        return []
    results = []
    for point in spec.tuning_sweep(device, sizes):
        run, inputs = point.pop("run"), point.pop("inputs")
        point.update(op=op, check=judge_agrees(op, run(**inputs), spec.reference(**inputs)),
                     us=timed(run, input_sets(inputs, l2_bytes), args.quick))
        results.append(point)
        log(f"[sweep {op} {point['case']}] {point['param']} {point['value']}{' (default)' if point['default'] else ''}: "
            f"{point['us']:.1f} us, check {point['check']}")
    return results


def describe_row(row: dict, copy_bps: float) -> str:
    parts = [f"[{row['op']} {row['case']}] {row['bytes'] / 1e6:.2f} MB moved, {row['sets']} input set(s); "
             f"eager {fmt_us(row['eager_us'])}, compile {fmt_us(row['compile_us'])}"]
    for name, e in row["kernels"].items():
        if e["error"]:
            parts.append(f"{name}: ERROR {e['error']}")
            continue
        gbs = row["bytes"] / (e["us"] * 1e-6) / 1e9
        parts.append(f"{name}: {fmt_us(e['us'])} x{row['eager_us'] / e['us']:.2f} eager"
                     + (f" x{row['compile_us'] / e['us']:.2f} compile" if row["compile_us"] else "")
                     + f", {gbs:.0f} GB/s ({100 * gbs * 1e9 / copy_bps:.0f}% of copy), check {e['check']}")
    return "\n    ".join(parts)


def fmt_us(us) -> str:
    return "n/a" if us is None else (f"{us:.1f} us" if us < 1000 else f"{us / 1000:.2f} ms")


# ---------------------------------------------------------------------------------------------
# Dry run: the GPU plan, built on the CPU


def dry_run(ops, log) -> list[str]:
    """Build every case's inputs on the CPU and print what the GPU run would do; run the judge
    check of each implementation on the small cases (the CPU interpreter)."""
    lines = []
    l2_bytes = 50 * 2**20  # an H200's L2, for the rotation plan
    for op in ops:
        kernel_module = REGISTERED_OPS[op].kernel_module
        reference = REGISTERED_OPS[op].reference
        smallest = min(size for _, size, _, _ in cases(op))
        for label, size, is_bench, build in cases(op):
            t0 = time.monotonic()
            inputs = build(size, "cpu")
            set_bytes = sum(tensor_bytes(v) for v in inputs.values())
            n_sets = min(MAX_SETS, max(1, math.ceil(max(ROTATE_MIN_BYTES, 2 * l2_bytes) / set_bytes)))
            shapes = ", ".join(f"{k} {str(v.dtype).split('.')[-1]}{list(v.shape)}" for k, v in inputs.items()
                               if isinstance(v, torch.Tensor))
            line = (f"[plan {op} {label}]{' bench' if is_bench else ' large'}: {shapes}; "
                    f"{traffic_bytes(op, inputs) / 1e6:.2f} MB moved; {n_sets} rotating input set(s) "
                    f"({n_sets * set_bytes / 2**20:.0f} MiB); built in {time.monotonic() - t0:.1f} s")
            if size == smallest:  # the interpreter takes seconds per case: the smallest only
                ref = reference(**inputs)
                checks = []
                for name, fn in kernel_module.IMPLEMENTATIONS:
                    t1 = time.monotonic()
                    checks.append(f"{name} {judge_agrees(op, fn(**inputs), ref)} ({time.monotonic() - t1:.1f} s)")
                line += "; judge check on the CPU interpreter: " + ", ".join(checks)
            log(line)
            lines.append(line)
            del inputs
    return lines


# ---------------------------------------------------------------------------------------------
# Fuzz throughput


PHASES = ("draw", "kernel", "compile", "reference", "oracle", "sanitizers", "other")


class PhaseClock:
    """Where a fuzz example's time goes, by wrapping (for the duration of a `with`) the functions
    run_case calls: the kernel's calls (oracles.harness.sanitizers.run_kernel, first run and
    determinism rerun, sanitizers included), Triton's compiles inside them (between Triton's
    jit_cache_hook and jit_post_compile_hook; on the CPU, the gpu-compile check's compiles for a
    GPU), the reference (call_kernel of spec.reference), the op's verdict (spec.verdict_checks:
    the float64 oracle and the checks) and the sanitizers' checks after the call (red zones,
    poison, memcheck, launches, inputs unchanged, process state, determinism). "draw" is the time
    outside run_case (Hypothesis and the strategy); "other" is the rest of run_case."""

    SANITIZER_CHECKS = ("launch_check", "red_zone_check", "poison_check", "memcheck_check", "inputs_unchanged_check",
                        "process_state_check", "determinism_check")

    def __init__(self, op: str):
        self.op = op
        self.seconds = dict.fromkeys(PHASES + ("jit_compile",), 0.0)
        self._undo = []
        self._compile_started = None

    def _timed(self, owner, name, phase, put=setattr, only_for=None):
        """Wrap owner.name so its time counts toward `phase` (only calls whose first argument is
        `only_for`, when given); undone on exit."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            if only_for is not None and (not args or args[0] is not only_for):
                return original(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - t0
        put(owner, name, timed)
        self._undo.append(lambda: put(owner, name, original))

    def __enter__(self):
        import dataclasses

        import oracles.harness.differential as differential
        spec = differential.get_op(self.op)
        get_op = differential.get_op
        timed_spec = dataclasses.replace(spec)
        self._timed(differential, "run_kernel", "kernel")
        self._timed(differential, "gpu_compile_check", "compile")
        for name in self.SANITIZER_CHECKS:
            if hasattr(differential, name):
                self._timed(differential, name, "sanitizers")
        # the reference goes through call_kernel with spec.reference; the kernel through run_kernel
        self._timed(differential, "call_kernel", "reference", only_for=spec.reference)
        self._timed(timed_spec, "verdict_checks", "oracle", put=object.__setattr__)
        differential.get_op = lambda name: timed_spec if name == self.op else get_op(name)
        self._undo.append(lambda: setattr(differential, "get_op", get_op))
        try:
            from triton import knobs
        except ImportError:
            return self
        hooks = knobs.runtime
        cache_hook, post_hook = hooks.jit_cache_hook, hooks.jit_post_compile_hook

        def before_compile(*args, **kwargs):
            self._compile_started = time.perf_counter()
            return cache_hook(*args, **kwargs) if cache_hook else None

        def after_compile(*args, **kwargs):
            if self._compile_started is not None:
                self.seconds["jit_compile"] += time.perf_counter() - self._compile_started
                self._compile_started = None
            return post_hook(*args, **kwargs) if post_hook else None
        hooks.jit_cache_hook, hooks.jit_post_compile_hook = before_compile, after_compile
        self._undo.append(lambda: (setattr(hooks, "jit_cache_hook", cache_hook),
                                   setattr(hooks, "jit_post_compile_hook", post_hook)))
        return self

    def __exit__(self, *exc):
        while self._undo:
            self._undo.pop()()

    def shares(self, total: float, in_case: float) -> dict:
        """Seconds by phase: Triton's compiles are carved out of kernel; draw = total - time in run_case."""
        s = dict(self.seconds)
        jit = s.pop("jit_compile")
        s["kernel"] = max(s["kernel"] - jit, 0.0)
        s["compile"] += jit
        s["draw"] = max(total - in_case, 0.0)
        s["other"] = max(in_case - sum(s[k] for k in PHASES if k not in ("draw", "other")), 0.0)
        return {k: round(v, 3) for k, v in s.items()}


def fuzz_throughput(op: str, device: str, seconds: float) -> dict:
    """Run op's property (draw a case, run_case) for about `seconds` on `device`; count examples
    and rows (the row inputs' first dimension), and say where the time went (PhaseClock).

    The bundled default implementation (kernels.<op>.<op>) is the kernel under test. The time
    includes drawing cases, the kernel's Triton compiles for new specializations, the reference
    and the float64 oracle (on the CPU), as in the suite.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings

    from oracles.harness.differential import RunOptions, run_case
    spec = REGISTERED_OPS[op]
    kernel_module = spec.kernel_module
    fn = getattr(kernel_module, op)
    name = next((n for n, f in kernel_module.IMPLEMENTATIONS if f is fn), op)
    strategy = spec.cases(**spec.sizes[device])
    options = RunOptions(device=device)
    stats = {"op": op, "device": device, "implementation": name, "examples": 0, "rows": 0, "failures": 0,
             "untrusted": 0, "errors": 0, "first_failure": None}
    in_case = [0.0]

    class Done(Exception):
        pass

    deadline = time.monotonic() + seconds

    @settings(max_examples=10**9, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, print_blob=False,
              report_multiple_bugs=False)
    @given(case=strategy)
    def prop(case):
        if time.monotonic() > deadline:
            raise Done  # the only way out of @given: caught below, never a test failure
        t0 = time.perf_counter()
        try:
            verdict = run_case(op, fn, case, options)
        except Exception as e:  # noqa: BLE001 -- the suite's own error: count it, keep fuzzing
            stats["errors"] += 1
            stats["first_failure"] = stats["first_failure"] or f"{type(e).__name__}: {e}"
            stats["examples"] += 1
            return
        finally:
            in_case[0] += time.perf_counter() - t0
        stats["examples"] += 1
        stats["rows"] += case.inputs[spec.row_inputs[0]].shape[0]
        if verdict.failures():
            stats["failures"] += 1
            stats["first_failure"] = stats["first_failure"] or f"{case.summary()}: " + "; ".join(
                str(c) for c in verdict.failures())[:500]
        if verdict.untrusted():
            stats["untrusted"] += 1

    t0 = time.monotonic()
    with PhaseClock(op) as clock:
        try:
            prop()
        except Done:
            pass
    stats["seconds"] = time.monotonic() - t0
    stats["per_second"] = stats["examples"] / stats["seconds"] if stats["seconds"] else 0.0
    stats["rows_per_second"] = stats["rows"] / stats["seconds"] if stats["seconds"] else 0.0
    stats["phases"] = clock.shares(stats["seconds"], in_case[0])
    return stats


def start_cpu_fuzz(ops, seconds: float, log):
    """Start the CPU throughput run from a GPU process: a subprocess with TRITON_INTERPRET=1 and
    no GPU visible (the interpreter is chosen when Triton is imported, so it cannot be switched
    in this process). It runs while this process fuzzes on the GPU; finish_cpu_fuzz collects it."""
    out = Path(tempfile.gettempdir()) / f"tritonfuzz-bench-cpu-fuzz-{os.getpid()}.json"
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "oracles.tools.bench", "--fuzz-worker", "--fuzz-seconds", str(seconds),
           "--json", str(out)] + [a for op in ops for a in ("--op", op)]
    log(f"[fuzz cpu] started: {' '.join(cmd[1:])} (TRITON_INTERPRET=1, CUDA_VISIBLE_DEVICES='')")
    # Its output goes to a file, not a pipe: a full pipe nobody reads would stall it.
    output = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
    return proc, out, output, len(ops) * (seconds + 120)


def finish_cpu_fuzz(started, log) -> list[dict]:
    proc, out, output, timeout = started
    try:
        proc.wait(timeout=timeout)
        if proc.returncode != 0:
            output.seek(0)
            log(f"[fuzz cpu] subprocess failed ({proc.returncode}):\n{output.read()[-2000:]}")
            return []
        return json.loads(out.read_text())["fuzz"]
    except Exception as e:  # noqa: BLE001 -- a timeout or unreadable result: report, go on
        proc.kill()
        log(f"[fuzz cpu] subprocess failed: {type(e).__name__}: {e}")
        return []
    finally:
        output.close()
        if out.exists():
            out.unlink()


# ---------------------------------------------------------------------------------------------
# Report


def summary(results: list[dict], copy_bps: float) -> list[dict]:
    """Average speedups over the bench cases, per op and implementation."""
    out = []
    for res in results:
        names = list(res["rows"][0]["kernels"]) if res["rows"] else []
        for name in names:
            eager, comp = [], []
            for row in res["rows"]:
                e = row["kernels"][name]
                if row["bench"] and e["us"]:
                    eager.append(row["eager_us"] / e["us"])
                    if row["compile_us"]:
                        comp.append(row["compile_us"] / e["us"])
            out.append({"op": res["op"], "implementation": name, "default": name == res["default"],
                        "avg_x_eager": sum(eager) / len(eager) if eager else None,
                        "avg_x_compile": sum(comp) / len(comp) if len(comp) == len(eager) and comp else None,
                        "cases": len(eager)})
    return out


def goals(meta: dict, results: list[dict], averages: list[dict]) -> list[str]:
    """The tuning goals of issue 7, met or not, for each op's default entry."""
    out = []
    for res in results:
        default = res["default"]
        avg = next((a for a in averages if a["op"] == res["op"] and a["implementation"] == default), None)
        bench = [r for r in res["rows"] if r["bench"] and r["kernels"][default]["us"]]
        slower = [r["case"] for r in bench if r["compile_us"] and r["compile_us"] < r["kernels"][default]["us"]]
        no_compile = [r["case"] for r in bench if not r["compile_us"]]
        spec = REGISTERED_OPS[res["op"]]
        want = spec.bench_goal_x_eager
        ae = avg["avg_x_eager"] if avg and avg["avg_x_eager"] else 0.0
        target = "no goal set" if want is None else f"want >= {want:g}: {'met' if ae >= want else 'NOT met'}"
        line = (f"goal {res['op']} ({default}): average x eager {ae:.2f} ({target}); "
                f"faster than torch.compile at every bench case: "
                + ("not measured" if len(no_compile) == len(bench) else
                   ("yes" if not slower else f"NO ({', '.join(slower)})") + (f" (no compile time at {', '.join(no_compile)})" if no_compile else "")))
        if spec.bench_goal_copy_pct is not None:
            from_size, want_pct = spec.bench_goal_copy_pct
            pct = [(r["case"], 100 * r["bytes"] / (r["kernels"][default]["us"] * 1e-6) / meta["copy_bandwidth_Bps"])
                   for r in res["rows"] if r["size"] >= from_size and r["kernels"][default]["us"]]
            met = "met" if pct and all(p >= want_pct for _, p in pct) else "NOT met"
            line += (f"; % of copy bandwidth at size >= {from_size}: " + ", ".join(f"{c} {p:.0f}%" for c, p in pct)
                     + f" (want >= {want_pct:g}%: {met})")
        out.append(line)
    return out


def table(meta: dict, results: list[dict], averages: list[dict], sweeps: list[dict], fuzz: list[dict]) -> str:
    lines = [f"### tritonfuzz bench -- {meta['date']}", "",
             f"device: {meta['device']}; torch {meta['torch']}, triton {meta['triton']}, Python {meta['python']}",
             f"command: `{meta['command']}` ({meta.get('elapsed_s', 0):.0f} s)"]
    if meta.get("copy_bandwidth_TBps"):
        lines.append(f"copy bandwidth (device-to-device, read + write, median): {meta['copy_bandwidth_TBps']:.2f} TB/s")
    for note in meta.get("notes", []):
        lines.append(f"note: {note}")
    if results:
        lines += ["", "| op | case | impl | kernel | eager | compile | x eager | x compile | GB/s | % copy | check |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for res in results:
            for row in res["rows"]:
                for name, e in row["kernels"].items():
                    star = "*" if name == res["default"] else ""
                    case = row["case"] + ("" if row["bench"] else " (large)")
                    if e["error"]:
                        lines.append(f"| {row['op']} | {case} | {name}{star} | ERROR | {fmt_us(row['eager_us'])} | "
                                     f"{fmt_us(row['compile_us'])} | | | | | {e['error'][:60]} |")
                        continue
                    gbs = row["bytes"] / (e["us"] * 1e-6) / 1e9
                    pct = 100 * gbs * 1e9 / meta["copy_bandwidth_Bps"]
                    xc = f"{row['compile_us'] / e['us']:.2f}" if row["compile_us"] else "n/a"
                    lines.append(f"| {row['op']} | {case} | {name}{star} | {fmt_us(e['us'])} | {fmt_us(row['eager_us'])} | "
                                 f"{fmt_us(row['compile_us'])} | {row['eager_us'] / e['us']:.2f} | {xc} | {gbs:.0f} | "
                                 f"{pct:.0f}% | {check_label(e['check'])} |")
        for a in averages:
            star = "*" if a["default"] else ""
            ae = f"{a['avg_x_eager']:.2f}" if a["avg_x_eager"] else "n/a"
            ac = f"{a['avg_x_compile']:.2f}" if a["avg_x_compile"] else "n/a"
            lines.append(f"| {a['op']} | **bench avg ({a['cases']} cases)** | {a['implementation']}{star} | | | | "
                         f"**{ae}** | {ac} | | | |")
        lines.append("(* = the op's default entry, the one the judge calls; check = the judge's check against the "
                     "reference on this device; GB/s = (inputs read once + outputs written once) / kernel time)")
        lines += [""] + goals(meta, results, averages)
    if sweeps:
        lines += ["", "| sweep | case | time by launch parameter (* = the default) |", "|---|---|---|"]
        keyed = {}
        for s in sweeps:
            keyed.setdefault((s["op"], s["case"]), []).append(s)
        for (op, case), ss in keyed.items():
            lines.append(f"| {op} | {case} | " + ", ".join(f"{s['param'] + '=' if s['param'] else ''}{s['value']}: {fmt_us(s['us'])}"
                                                            f"{'*' if s['default'] else ''}"
                                                            f"{'' if s['check'] == 'ok' else ' (DIFF)'}" for s in ss) + " |")
    if fuzz:
        lines += ["", "| fuzz | device | impl | examples | seconds | examples/s | rows/s | failures | untrusted | errors | "
                      "time: " + ", ".join(PHASES) + " |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for f in fuzz:
            phases = f.get("phases") or {}
            split = " / ".join(f"{100 * phases.get(k, 0.0) / f['seconds']:.0f}%" for k in PHASES) if f['seconds'] else ""
            lines.append(f"| {f['op']} | {f['device']} | {f['implementation']} | {f['examples']} | {f['seconds']:.1f} | "
                         f"{f['per_second']:.2f} | {f.get('rows_per_second', 0.0):.0f} | {f['failures']} | "
                         f"{f['untrusted']} | {f['errors']} | {split} |")
        for f in fuzz:
            if f.get("first_failure"):
                lines.append(f"first failure ({f['op']}, {f['device']}): {f['first_failure']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m oracles.tools.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", choices=OPS, help="only this op (repeatable; default: all)")
    p.add_argument("--no-rotate", action="store_true",
                   help="time every call on the same inputs, as the judge's do_bench does (default: rotate input "
                        "copies so that no input is still in L2; do_bench's 256 MB flush empties L2 either way, "
                        "but rotation also changes the host's work per call)")
    p.add_argument("--quick", action="store_true", help="fewer timing repetitions and 5 s of fuzzing an op: a smoke test")
    p.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    p.add_argument("--dry-run", action="store_true",
                   help="build the GPU cases' inputs on the CPU and print the plan (no timing)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile(reference)")
    p.add_argument("--no-sweep", action="store_true", help="skip the launch-parameter sweeps")
    p.add_argument("--fuzz-seconds", type=float, default=None, help="fuzzing time per op and device (default 20, --quick 5)")
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="past this many seconds, skip the optional parts left (torch.compile of further "
                        "cases, sweeps) so that the run, fuzzing included, ends within about 8 minutes "
                        "(default 300)")
    p.add_argument("--fuzz-worker", action="store_true", help=argparse.SUPPRESS)  # the CPU throughput subprocess
    return p.parse_args(argv)


def main(argv=None) -> int:
    started = time.monotonic()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ops = tuple(args.op or OPS)
    seconds = args.fuzz_seconds if args.fuzz_seconds is not None else (5.0 if args.quick else 20.0)
    gpu = torch.cuda.is_available() and not args.fuzz_worker
    if not gpu:
        # The interpreter is bound when Triton is imported (kernel modules decorate at import):
        # decide it before any of them is imported, and make its bf16 arithmetic exact as conftest does.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton
    if os.environ.get("TRITON_INTERPRET") == "1":
        from oracles.platform.interpreter import patch_interpreter
        patch_interpreter()

    # As pyproject.toml does for the suite: NumPy's overflow warnings from the interpreter are
    # the kernels' inf/NaN cases working as intended.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"numpy")

    def log(msg):
        print(msg, flush=True)

    if args.fuzz_worker:
        fuzz = [fuzz_throughput(op, "cpu", seconds) for op in ops]
        Path(args.json).write_text(json.dumps({"fuzz": fuzz}))
        return 0

    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name() if gpu else f"CPU ({platform.processor() or platform.machine()}), "
                                                              f"Triton interpreter",
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": "python -m oracles.tools.bench" + ("" if not sys.argv[1:] else " " + " ".join(sys.argv[1:])),
            "notes": []}
    results, averages, sweeps, fuzz, plan = [], [], [], [], []
    deadline = started + args.budget_s

    if args.dry_run:
        log("dry run: building the GPU cases' inputs on the CPU (no timing)")
        plan = dry_run(ops, log)
        meta["notes"].append("dry run: inputs built on the CPU, nothing timed")
    elif not gpu:
        msg = ("no CUDA device: the timing part (kernels vs reference vs torch.compile) is skipped -- it needs a "
               "GPU; --dry-run builds its inputs on the CPU and prints the plan. Fuzz throughput runs on the CPU.")
        log(msg)
        meta["notes"].append(msg)
    else:
        props = torch.cuda.get_device_properties(0)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
        copy_bps = copy_bandwidth(args.quick)
        meta.update(copy_bandwidth_Bps=copy_bps, copy_bandwidth_TBps=copy_bps / 1e12, l2_bytes=l2_bytes,
                    sms=props.multi_processor_count)
        log(f"device {meta['device']}: {props.multi_processor_count} SMs, L2 {l2_bytes / 2**20:.0f} MiB; "
            f"copy bandwidth {copy_bps / 1e12:.2f} TB/s (1 GiB device-to-device, read + write)")
        for op in ops:
            try:
                results.append(bench_op(op, args, copy_bps, l2_bytes, deadline, log))
            except Exception as e:  # noqa: BLE001 -- e.g. out of memory: report it, go on to the rest
                log(f"[{op}] benchmark failed: {type(e).__name__}: {e}")
                meta["notes"].append(f"{op} benchmark failed: {type(e).__name__}: {str(e)[:200]}")
                torch.cuda.empty_cache()
        averages = summary(results, copy_bps)
        for a in averages:
            log(f"[{a['op']}] {a['implementation']}: average over {a['cases']} bench cases x{a['avg_x_eager'] or 0:.2f} "
                f"eager" + (f", x{a['avg_x_compile']:.2f} compile" if a["avg_x_compile"] else ""))
        if not args.no_sweep and not args.quick:
            for op in ops:
                if time.monotonic() > deadline:
                    meta["notes"].append(f"sweep of {op} skipped: past --budget-s")
                    continue
                try:
                    sweeps += sweep_op(op, args, l2_bytes, log)
                except Exception as e:  # noqa: BLE001
                    log(f"[sweep {op}] failed: {type(e).__name__}: {e}")

    if not args.dry_run:
        device = "cuda" if gpu else "cpu"
        cpu_fuzz = start_cpu_fuzz(ops, seconds, log) if gpu else None
        for op in ops:
            log(f"[fuzz {device}] {op}: {seconds:.0f} s ...")
            try:
                fuzz.append(fuzz_throughput(op, device, seconds))
            except Exception as e:  # noqa: BLE001
                log(f"[fuzz {device}] {op} failed: {type(e).__name__}: {e}")
                meta["notes"].append(f"fuzz {op} on {device} failed: {type(e).__name__}: {str(e)[:200]}")
        if cpu_fuzz is not None:
            fuzz += finish_cpu_fuzz(cpu_fuzz, log)

    meta["elapsed_s"] = time.monotonic() - started
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results, "averages": averages,
                                               "sweeps": sweeps, "fuzz": fuzz, "plan": plan}, indent=1, default=str))
    print()
    print(table(meta, results, averages, sweeps, fuzz), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
