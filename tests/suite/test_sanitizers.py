"""The sanitizers (oracles/harness/sanitizers.py) catch what allclose cannot, and leave correct kernels alone.

Each mutant in tests/mutants/hc_head/ is a copy of kernels/hc_head.py with one realistic bug
(tests/mutants/hc_head/MANIFEST.md says which); each must fail on a fixed small case with the
sanitizer's own check name and message. The bundled kernels must stay clean under every
sanitizer, and the interception must never outlive the call.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from kernels.hc_head import _hc_head_kernel, hc_head
from oracles.submission.loader import bundled_implementations, load_module_implementation
from oracles.harness.differential import RunOptions, interpreter_active, run_case
from oracles.platform.gpu_compile import GPU_COMPILE, gpu_compile_check
from oracles.harness.sanitizers import (SANITIZER_CHECKS, KernelScope, guarded_empty, launch_check, poison_pattern,
                                red_zone_check, run_kernel, sentinel_pattern)
from oracles.verdict import FAIL, PASS, RISK
from strategies.case import Case
from strategies.hc_head import build_case, judge_cases
from strategies.values import Layout, background, place

MUTANTS = Path(__file__).resolve().parents[1] / "mutants" / "hc_head"


def small_case(T=2, hc_mult=8, hidden=520, dtype=torch.float32, layout=Layout()) -> Case:
    """hc_mult = 8 gives BLOCK_D = 512, so hidden = 520 is one full block and a partial one of 8;
    float32 output, so that a last-bit difference between two runs is visible."""
    x = place(background((T, hc_mult, hidden), seed=3, scale=1.0, dtype=dtype), layout)
    return build_case(x=x, label=f"T={T} hc_mult={hc_mult} hidden={hidden}")


def mutant(name: str):
    return load_module_implementation("hc_head", MUTANTS / name, name=name)


def failing(verdict, name: str):
    check = verdict.check(name)
    assert check is not None, f"no {name!r} check in:\n{verdict.render()}"
    assert check.status == FAIL, f"{name!r} is {check.status}, expected fail:\n{verdict.render()}"
    return check


# ---------------------------------------------------------------------------------------------
# Mutants: each caught by its sanitizer, with the sanitizer's own message


@pytest.mark.hc_head
def test_store_one_past_the_row_is_an_out_of_bounds_store(run_options):
    verdict = run_case("hc_head", mutant("oob_store_past_row.py").fn, small_case(), run_options)
    message = failing(verdict, "red-zone").message
    assert "out-of-bounds store: output y (torch.empty([2, 520], torch.float32)" in message
    assert "1 element(s) changed in the guard band after its storage span, first at offset 1040" in message


@pytest.mark.hc_head
def test_unwritten_tail_is_poison(run_options):
    verdict = run_case("hc_head", mutant("unwritten_tail.py").fn, small_case(), run_options)
    message = failing(verdict, "poison").message
    assert message.startswith("16 element(s) of y were never written (still poison nan, bits 0x7FE5A5A5), "
                              "at y[0, 512]; y[0, 513]"), message
    assert failing(verdict, "specials")  # the NaN poison is visible to the value checks too


@pytest.mark.hc_head
@pytest.mark.parametrize("sanitize", [True, False], ids=["sanitized", "plain"])
def test_write_into_an_input_is_caught(run_options, sanitize):
    """The in-place fold is exact enough to pass every value check: only inputs-unchanged sees it,
    with or without the other sanitizers (one implementation for both)."""
    options = RunOptions(device=run_options.device, sanitize=sanitize)
    verdict = run_case("hc_head", mutant("scale_folded_into_input.py").fn, small_case(), options)
    message = failing(verdict, "inputs-unchanged").message
    assert message.startswith("the kernel wrote into its input(s): hc_fn: 33280 element(s) changed, "
                              "first at hc_fn[0, 0]"), message
    assert [c.name for c in verdict.failures()] == ["inputs-unchanged"], verdict.render()


@pytest.mark.hc_head
def test_result_that_moves_between_runs_fails_determinism(run_options):
    options = RunOptions(device=run_options.device, determinism=True)
    verdict = run_case("hc_head", mutant("launch_dependent_order.py").fn, small_case(), options)
    message = failing(verdict, "determinism").message
    assert message.startswith("two runs of the same case gave different bits"), message
    assert "element(s) differ bit for bit, at y[" in message
    assert [c.name for c in verdict.failures()] == ["determinism"], verdict.render()
    # Off by default: the same mutant passes a run without it.
    plain = run_case("hc_head", mutant("launch_dependent_order.py").fn, small_case(),
                     RunOptions(device=run_options.device))
    assert plain.check("determinism") is None and not plain.failures(), plain.render()


@pytest.mark.hc_head
def test_torch_fallback_launches_nothing(run_options):
    verdict = run_case("hc_head", mutant("torch_fallback_small.py").fn, small_case(), run_options)
    assert failing(verdict, "launch").message.startswith("no Triton kernel was launched during the call")
    assert [c.name for c in verdict.failures()] == ["launch"], verdict.render()


# ---------------------------------------------------------------------------------------------
# Correct kernels stay clean


def bundled_cases():
    """Small cases for every bundled implementation: hc_head (judge case, bf16 strided, T = 0)
    and sigmoid_gate_topk_renorm where that module exists."""
    params = []
    hc_cases = [judge_cases()[0], small_case(T=3, hc_mult=3, hidden=33, dtype=torch.bfloat16,
                                             layout=Layout("padded", 5)),
                small_case(T=0, hc_mult=4, hidden=33)]
    for impl in bundled_implementations("hc_head"):
        for case in hc_cases:
            params.append(pytest.param(impl, case, id=f"hc_head-{impl.name}-{case.label}",
                                       marks=pytest.mark.hc_head))
    if importlib.util.find_spec("kernels.sigmoid_gate_topk_renorm") is not None:
        from oracles.ops import get_op
        op = "sigmoid_gate_topk_renorm"
        small = [c for c in get_op(op).judge_cases()
                 if sum(t.numel() for t in c.tensors().values()) <= 4096][:2]
        for impl in bundled_implementations(op):
            for i, case in enumerate(small):
                params.append(pytest.param(impl, case, id=f"{op}-{impl.name}-judge{i}",
                                           marks=getattr(pytest.mark, op)))
    return params


@pytest.mark.parametrize("implementation,case", bundled_cases())
def test_bundled_kernels_are_clean_under_every_sanitizer(implementation, case, run_options):
    options = RunOptions(device=run_options.device, determinism=True)
    verdict = run_case(implementation.op, implementation.fn, case, options)
    for name in SANITIZER_CHECKS:
        if name == "memcheck" and not interpreter_active():  # lane by lane under the interpreter only
            continue
        check = verdict.check(name)
        assert check is not None and check.status == PASS, f"{name}: {check}\n{verdict.render()}"
    launched = not verdict.check("launch").message.startswith("nothing launched")
    if interpreter_active() and launched:  # every specialization the interpreter ran compiles for a GPU too
        check = verdict.check(GPU_COMPILE)
        assert check is not None and check.status == PASS, f"{check}\n{verdict.render()}"


@pytest.mark.hc_head
def test_no_launch_with_empty_outputs_is_not_flagged(run_options):
    """T = 0: the bundled kernel returns its empty y without a launch, which is right."""
    verdict = run_case("hc_head", hc_head, small_case(T=0, hc_mult=2, hidden=7), run_options)
    assert verdict.check("launch").status == PASS, verdict.render()
    assert verdict.check("launch").message.startswith("nothing launched, and every output is empty")
    assert not verdict.failures(), verdict.render()


# ---------------------------------------------------------------------------------------------
# Out-of-bounds loads: a copy that reads one element past its input carries the sentinel out


@triton.jit
def _copy_from_next(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs + 1, mask=mask), mask=mask)


def copy_from_next(x):
    y = torch.empty_like(x)
    _copy_from_next[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_sentinel_in_a_result_is_an_out_of_bounds_load(run_options, dtype):
    x = torch.arange(1, 6).to(dtype)
    run = run_kernel(copy_from_next, Case("hc_head", {"x": x}), run_options.device)
    assert run.error is None, run.error
    outputs, reference = {"y": run.outputs[0]}, {"y": x.roll(-1).to(run_options.device)}
    check = red_zone_check(run, outputs, reference)
    assert check.status == FAIL
    assert check.message.startswith("out-of-bounds load: 1 element(s) of y hold the red-zone sentinel"), check.message
    assert "at y[4]" in check.message
    assert launch_check(run, outputs).status == PASS


# ---------------------------------------------------------------------------------------------
# memcheck: an out-of-bounds read whose value never reaches an output


@triton.jit
def _copy_reading_one_past(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ahead = tl.load(x_ptr + offs, mask=offs <= n, other=0.0)  # reads x[n]: one past the end
    tl.store(y_ptr + offs, ahead, mask=offs < n)                # ...but never stores it


def copy_reading_one_past(x):
    y = torch.empty_like(x)
    _copy_reading_one_past[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel() + 1))
    return y


@pytest.mark.skipif(not interpreter_active(), reason="memcheck checks the CPU interpreter's lanes")
def test_an_out_of_bounds_read_that_leaves_the_output_right_fails_memcheck(run_options):
    from oracles.harness.sanitizers import memcheck_check
    x = torch.arange(1, 6, dtype=torch.float32)
    run = run_kernel(copy_reading_one_past, Case("hc_head", {"x": x}), run_options.device)
    assert run.error is None and torch.equal(run.outputs[0], x), (run.error, run.outputs)
    check = memcheck_check(run)
    assert check.status == FAIL and "load of 1 lane(s) past input x (first at element 5" in check.message, check
    # red zones cannot see it: no sentinel reached the output, no guard band was written
    assert red_zone_check(run, {"y": run.outputs[0]}, {"y": x}).status == PASS
    clean = run_kernel(copy_from_next, Case("hc_head", {"x": x}), run_options.device)
    assert memcheck_check(clean).status == FAIL  # reads x[5] too (its output shows the sentinel)


@pytest.mark.skipif(not interpreter_active(), reason="memcheck checks the CPU interpreter's lanes")
@pytest.mark.parametrize("case", judge_cases()[:2], ids=lambda c: c.label)
def test_the_bundled_kernel_is_clean_under_memcheck(run_options, case):
    verdict = run_case("hc_head", hc_head, case, run_options)
    assert verdict.check("memcheck").status == PASS, verdict.render()


# ---------------------------------------------------------------------------------------------
# The interception is scoped, and the guarded buffers are what they claim


def interception_state():
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import GridExecutor
    from triton.runtime.jit import JITFunction
    hooks = getattr(getattr(getattr(triton, "knobs", None), "runtime", None), "launch_enter_hook", None)
    return (GridExecutor.__dict__["__call__"], JITFunction.__dict__["run"], Autotuner.__dict__["run"],
            list(getattr(hooks, "calls", [hooks])), len(torch.overrides._get_current_function_mode_stack()))


def assert_plain_allocation():
    t = torch.empty(4)
    assert t.untyped_storage().nbytes() == 16 and t.storage_offset() == 0


def test_interception_is_restored_after_a_kernel_that_raises(run_options):
    before = interception_state()
    case = small_case(T=1, hc_mult=2, hidden=7)

    def launches_then_raises(**inputs):
        torch.empty(3)
        hc_head(**inputs)
        raise RuntimeError("boom after the launch")

    def raises_inside_the_launch(**inputs):
        torch.empty(3)
        _hc_head_kernel[(1,)](inputs["x"])  # too few arguments: raised inside Triton's launch path

    # The case lies outside the judge domain (float32, hidden 7): a raise is `unsupported` there.
    verdict = run_case("hc_head", launches_then_raises, case, run_options)
    assert verdict.check("contract").message.startswith("raised RuntimeError: boom after the launch")
    assert interception_state() == before
    assert_plain_allocation()
    verdict = run_case("hc_head", raises_inside_the_launch, case, run_options)
    assert verdict.check("contract").message.startswith("raised ")
    assert interception_state() == before
    assert_plain_allocation()
    with pytest.raises(ZeroDivisionError):
        with KernelScope():
            1 / 0
    assert interception_state() == before
    assert_plain_allocation()


def test_allocations_inside_the_scope_are_guarded_and_outside_untouched(run_options):
    device = run_options.device
    with KernelScope() as scope:
        e = torch.empty((3, 5), dtype=torch.float16, device=device)
        z = torch.zeros(4, dtype=torch.int32, device=device)
        f = e.new_full((2,), 7.0)
    assert [a.poisoned for a in scope.allocations] == [True, False, False]
    assert [a.call for a in scope.allocations] == ["torch.empty([3, 5], torch.float16)",
                                                   "torch.zeros([4], torch.int32)",
                                                   "Tensor.new_full([2], torch.float16)"]
    assert bool(e.isnan().all()) and z.tolist() == [0, 0, 0, 0] and f.tolist() == [7.0, 7.0]
    for a in scope.allocations:
        g = a.guarded
        assert g.guard > 0 and g.view.data_ptr() % 512 == g.buffer.data_ptr() % 512  # alignment kept
        assert g.view.stride() == (5, 1) or g.view.dim() == 1
    assert_plain_allocation()


def test_guarded_input_keeps_its_layout():
    x = place(torch.arange(12.0).reshape(3, 4), Layout("stepped", 0))
    g = guarded_empty(x.shape, x.stride(), x.storage_offset(), x.dtype, "cpu", label="x")
    assert g.view.stride() == x.stride() and g.view.storage_offset() == g.guard + x.storage_offset()
    assert g.extent == 3 * 8 - 1


def test_sentinels_and_poison_are_distinctive():
    def value(dtype, pattern):
        return torch.frombuffer(bytearray(pattern), dtype=torch.uint8).view(dtype)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        s = value(dtype, sentinel_pattern(dtype))
        assert bool(s.isfinite().all()) and float(s.abs()) >= 3e4  # large: a loaded sentinel shows
        p = value(dtype, poison_pattern(dtype))
        assert math.isnan(float(p))
        canonical = torch.full((1,), float("nan"), dtype=dtype).view(torch.uint8).numpy().tobytes()
        assert poison_pattern(dtype) != canonical  # a computed NaN is not "never written"
    # A float32 sentinel cast to bfloat16 is the bfloat16 sentinel, likewise float64 -> float32.
    f32 = value(torch.float32, sentinel_pattern(torch.float32))
    assert f32.to(torch.bfloat16).view(torch.uint8).numpy().tobytes() == sentinel_pattern(torch.bfloat16)
    f64 = value(torch.float64, sentinel_pattern(torch.float64))
    assert f64.to(torch.float32).view(torch.uint8).numpy().tobytes() == sentinel_pattern(torch.float32)
    assert value(torch.int32, poison_pattern(torch.int32)).item() == 2**31 - 1
    assert value(torch.int32, sentinel_pattern(torch.int32)).item() not in (0, 1, -1, 2**31 - 1)


# ---------------------------------------------------------------------------------------------
# gpu-compile: what the interpreter runs as Python but Triton's compiler rejects


_PLAIN_SCALE = 3  # a plain module global: the interpreter reads it, compiled Triton raises NameError
_CONSTEXPR_SCALE = tl.constexpr(3)


def _plain_double(v):
    return v * 2


@triton.jit
def _scale_by_plain_global(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * _PLAIN_SCALE, mask=offs < n)


@triton.jit
def _double_by_plain_function(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _plain_double(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.jit
def _scale_by_constexpr_global(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * _CONSTEXPR_SCALE, mask=offs < n)


@pytest.mark.parametrize("kernel,rejected", [
    pytest.param(_scale_by_plain_global, "Cannot access global variable _PLAIN_SCALE", id="plain-global"),
    pytest.param(_double_by_plain_function, "Unsupported function", id="plain-function"),
    pytest.param(_scale_by_constexpr_global, None, id="constexpr-global"),
])
def test_gpu_compile_fails_what_only_the_interpreter_runs(kernel, rejected):
    """The interpreter runs all three kernels correctly; the check compiles what each launch
    used for sm_90 and fails exactly the two that a GPU cannot compile, with the compiler's
    reason."""
    if not interpreter_active():
        pytest.skip("on a GPU every launch compiles for real")
    x = torch.arange(8, dtype=torch.float32)
    with KernelScope() as scope:
        kernel[(1,)](x, 5, BLOCK=8)
    assert x[:5].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0] or x[:5].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    check = gpu_compile_check(scope.launch_specs)
    if rejected is None:
        assert check.status == PASS, check
    else:
        assert check.status == FAIL and rejected in check.message, check


@triton.jit
def _dot_tile(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b).to(tl.float16))


@triton.jit
def _transpose_tile(a_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    tl.store(c_ptr + rn[:, None] * M + rm[None, :], tl.trans(tl.load(a_ptr + rm[:, None] * N + rn[None, :])))


def test_gpu_compile_reports_what_fits_an_h200_but_not_amd_as_a_risk():
    """Both run on an H200; on the judge's AMD-class chips (64-thread warps, 64 KB of LDS) they
    cannot launch: 32 warps are 2048 threads there, and a 256 x 256 float32 transpose goes
    through 256 KB of LDS (64 KB on sm_90). A risk, not a failure."""
    if not interpreter_active():
        pytest.skip("on a GPU every launch compiles for real")
    x = torch.ones(16, 16, dtype=torch.float16)
    out = torch.empty(16, 16, dtype=torch.float16)
    a = torch.arange(256 * 256, dtype=torch.float32).reshape(256, 256)
    t = torch.empty_like(a)
    for launch, why in ((lambda: _dot_tile[(1,)](x, x, out, M=16, N=16, K=16, num_warps=32), "2048 threads"),
                        (lambda: _transpose_tile[(1,)](a, t, M=256, N=256), "bytes of shared memory")):
        with KernelScope() as scope:
            launch()
        check = gpu_compile_check(scope.launch_specs)
        assert check.status == RISK and "gfx942" in check.message and why in check.message, check
    assert torch.equal(t, a.T) and float(out[0, 0]) == 16


def test_gpu_compile_fails_what_an_h200_cannot_launch():
    """A [256, 256] x [256, 256] float16 tl.dot stages 256 KB of operands in shared memory on
    sm_90; a block gets 227 KB: the interpreter computes it, an H200 refuses the launch."""
    if not interpreter_active():
        pytest.skip("on a GPU every launch compiles for real")
    a = torch.full((256, 256), 0.5, dtype=torch.float16)
    c = torch.empty(256, 256, dtype=torch.float16)
    with KernelScope() as scope:
        _dot_tile[(1,)](a, a, c, M=256, N=256, K=256)
    assert float(c[0, 0]) == 64.0
    check = gpu_compile_check(scope.launch_specs)
    assert check.status == FAIL and "sm_90" in check.message and "shared memory" in check.message, check


def test_gpu_compile_replaces_a_dead_worker():
    """The compiler worker is one process per test process; one that died (killed, or crashed on
    an earlier kernel) is replaced at the next compile instead of failing every later case."""
    if not interpreter_active():
        pytest.skip("on a GPU every launch compiles for real")
    from oracles.platform import gpu_compile
    x = torch.arange(8, dtype=torch.float32)
    with KernelScope() as scope:
        _scale_by_constexpr_global[(1,)](x, 5, BLOCK=8)
    [spec] = scope.launch_specs
    assert gpu_compile.compile_for_gpu(spec, ("sm_90",))[0].status == "ok"
    worker = gpu_compile._CLIENT.proc
    worker.kill()
    worker.wait()
    gpu_compile._CLIENT.cache.clear()
    assert gpu_compile.compile_for_gpu(spec, ("sm_90",))[0].status == "ok"
    assert gpu_compile._CLIENT.proc is not worker


@triton.jit
def _tanh_by_inline_ptx(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y, mask=offs < n)


def _hc_head_with_inline_ptx(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """Not hc_head (a GPU run would fail it on accuracy): a launch the interpreter cannot run."""
    y = torch.empty((x.shape[0], x.shape[2]), dtype=x.dtype, device=x.device)
    flat = x[:, 0, :].float().contiguous()
    out = torch.empty_like(flat)
    _tanh_by_inline_ptx[(1,)](flat, out, flat.numel(), BLOCK=triton.next_power_of_2(max(flat.numel(), 16)))
    return y.copy_(out)


@pytest.mark.hc_head
def test_what_the_interpreter_cannot_run_is_untrusted_not_failed():
    """Inline PTX raises NotImplementedError in the interpreter: the case is `untrusted` (run on a
    GPU), never the kernel's contract failure; gpu-compile still compiles the launch (inline PTX
    compiles for sm_90; on gfx942 it cannot: a risk under the gate's portability option)."""
    if not interpreter_active():
        pytest.skip("a GPU runs inline PTX")
    verdict = run_case("hc_head", _hc_head_with_inline_ptx, small_case(T=2, hc_mult=2, hidden=8),
                       RunOptions(device="cpu", portability=True))
    contract = verdict.check("contract")
    assert contract.status == "untrusted" and "interpreter" in contract.message, verdict.render()
    assert not verdict.failures(), verdict.render()
    compiled = verdict.check(GPU_COMPILE)
    assert compiled is not None and compiled.status == RISK and "gfx942" in compiled.message, verdict.render()


def test_interpreter_builder_gaps_are_untrusted_and_kernel_errors_are_not(monkeypatch):
    """interpreter_gap on the errors themselves: a builder method the interpreter lacks (Triton
    3.6: get_bf16) is the interpreter's gap; an AttributeError of the kernel's own is not."""
    from oracles.harness import differential
    from triton.runtime.errors import InterpreterError
    monkeypatch.setattr(differential, "interpreter_active", lambda: True)

    def wrapped(cause):
        try:
            raise InterpreterError(repr(cause)) from cause
        except InterpreterError as e:
            return e

    gap = AttributeError("'InterpreterBuilder' object has no attribute 'get_bf16'")
    own = AttributeError("'tensor' object has no attribute 'nonexistent'")
    assert differential.interpreter_gap(wrapped(gap))
    assert not differential.interpreter_gap(wrapped(own))
    assert differential.interpreter_gap(wrapped(NotImplementedError("unsupported in the interpreter")))
    monkeypatch.setattr(differential, "interpreter_active", lambda: False)
    assert not differential.interpreter_gap(wrapped(gap))  # on a GPU nothing is the interpreter's


def _hc_head_sized_by_the_gpu(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    """A persistent kernel's wrapper: the grid from the GPU's multiprocessor count."""
    programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    return hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps) if programs else None


def _hc_head_asserting_its_own(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    assert x.shape[1] == 4, "only hc_mult 4"
    return hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


@pytest.mark.hc_head
def test_asking_the_cpu_platform_for_a_gpu_is_untrusted_and_a_kernels_own_assert_is_not():
    """A wrapper that asks for the GPU's properties raises on the CPU platform, never on the GPU
    it was written for: `untrusted` (rerun on a GPU), not a contract failure; the kernel's own
    assert on a judge-domain input stays a failure."""
    if torch.cuda.is_available():
        pytest.skip("a GPU answers the query")
    case = judge_cases()[0]  # the judge's own first case (hc_mult 2): inside its domain
    asked = run_case("hc_head", _hc_head_sized_by_the_gpu, case, RunOptions(device="cpu"))
    assert asked.check("contract").status == "untrusted", asked.render()
    assert "CUDA" in asked.check("contract").message and not asked.failures(), asked.render()
    own = run_case("hc_head", _hc_head_asserting_its_own, case, RunOptions(device="cpu"))
    assert own.check("contract").status == "fail", own.render()


# ---------------------------------------------------------------------------------------------
# Every argument form real kernels launch with: the recorder and the gpu-compile check take them


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _heuristic_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit(do_not_specialize=["n"])
def _unspecialized_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _zero_output(nargs):
    nargs["y_ptr"].zero_()


@triton.autotune(configs=[triton.Config({"BLOCK": 8}, pre_hook=_zero_output),
                          triton.Config({"BLOCK": 16}, num_warps=2, pre_hook=_zero_output)], key=["n"])
@triton.jit
def _autotuned_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _tuple_and_none(x_ptr, y_ptr, bias_ptr, n, SHAPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
    if bias_ptr is not None:
        v += tl.load(bias_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, v * SHAPE[0], mask=offs < n)


def test_every_launch_form_is_recorded_and_never_the_suites_error(run_options):
    """@triton.heuristics, do_not_specialize, autotune configs with pre-hooks, a tuple constexpr
    and a None pointer: each runs inside the sanitizers' scope and goes through the gpu-compile
    check, which compiles what it can send to the compiler and skips (never fails, never raises
    through) what it cannot."""
    x = torch.arange(1, 13, dtype=torch.float32, device=run_options.device)
    for launch, expected in (
            (lambda y: _heuristic_copy[(1,)](x, y, 12, BLOCK=16), x),
            (lambda y: _unspecialized_copy[(1,)](x, y, 12, BLOCK=16), x),
            (lambda y: _autotuned_add[lambda meta: (triton.cdiv(12, meta["BLOCK"]),)](x, y, 12), x),
            (lambda y: _tuple_and_none[(1,)](x, y, None, 12, SHAPE=(2, 3), BLOCK=16), 2 * x)):
        y = torch.full_like(x, 7.0)
        with KernelScope() as scope:
            launch(y)
        assert torch.equal(y, expected), (y, expected)
        assert scope.launches, "the launch was not counted"
        if interpreter_active():
            check = gpu_compile_check(scope.launch_specs)
            assert check.status in (PASS, "skip"), check


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32,
                                   torch.int64, torch.int8, torch.uint8, torch.bool, torch.complex64,
                                   torch.complex128])
def test_whole_element_bit_comparisons_agree_with_the_byte_by_byte_ones(dtype):
    """matches, elements_differ and fill_pattern compare and write whole elements as integers of
    their size; they must say what the byte-by-byte forms say, for every element size (complex128,
    16 bytes, keeps the byte form), planted patterns, NaN payloads and -0.0 included."""
    from oracles.harness import sanitizers as san
    g = torch.Generator().manual_seed(5)
    raw = torch.randint(0, 256, (64 * torch.empty((), dtype=dtype).element_size(),), dtype=torch.uint8, generator=g)
    t = raw.view(dtype).clone()
    pattern = poison_pattern(dtype)
    san.fill_pattern(t[5:9], pattern)
    bytewise = lambda x: (san.element_bytes(x) == torch.tensor(list(pattern), dtype=torch.uint8)).all(-1)  # noqa: E731
    assert torch.equal(san.matches(t, pattern), bytewise(t))
    assert bytewise(t)[5:9].all() and int(bytewise(t).sum()) >= 4
    u = t.clone()
    u.view(torch.uint8)[3 * u.element_size()] ^= 1  # one bit of element 3
    if dtype.is_floating_point and dtype != torch.bfloat16 and dtype != torch.float16:
        u[10] = -0.0
        t[10] = 0.0  # equal as numbers, not as bits
    differ = san.elements_differ(t, u)
    assert torch.equal(differ, (san.element_bytes(t) != san.element_bytes(u)).any(-1))
    assert differ[3] and (not dtype.is_floating_point or dtype in (torch.bfloat16, torch.float16) or differ[10])
