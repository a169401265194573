"""Sanitizers: checks no allclose harness has. Each one is a named Check with its own message.

    red-zone          every tensor input, and every buffer the kernel allocates during the call,
                      lives inside a larger buffer with a guard band of sentinel elements before
                      and after its storage span. A guard band that changed is an out-of-bounds
                      store; a sentinel value found in a result is an out-of-bounds load.
    poison            buffers from torch.empty* during the call start POISONED (a NaN with a
                      payload, or the integer maximum), so an output element the kernel never
                      wrote cannot pass: it is still the poison bit pattern afterwards.
    inputs-unchanged  every input's storage span, strided gaps included, is byte-identical to
                      the case's after the call.
    determinism       (optional, it doubles the cost) the same case run twice gives the same
                      bits: a result that moves is a race or a read of unwritten memory.
    launch            at least one Triton kernel was launched during the call, unless every
                      output is empty (T = 0); the competition disqualifies torch fallbacks.
    process-state     the call left the process as it found it: the same working directory
                      (a changed one is restored; every relative path of the run would move)
                      and no thread of its own still running (it would run on into later cases,
                      and a non-daemon one keeps the worker from exiting). Idle workers of a
                      concurrent.futures pool are not counted: they end with the process.

Usage (oracles/harness/differential.py does this; the reference and the oracle run outside)::

    run = run_kernel(fn, case, device)                  # fn(**inputs) inside a KernelScope
    checks = [launch_check(run, outputs), red_zone_check(run, outputs, reference),
              poison_check(run, outputs, reference), inputs_unchanged_check(run, case)]

Layout of a guarded tensor (elements of its dtype; the view keeps the case's strides and its
storage offset relative to the span, so layouts stay what the case drew)::

    buffer = [ guard band | storage span [0, extent) of the view | guard band ]
               sentinel     gaps and storage offset included        sentinel

Guard bands are max(64 KiB, the span's size) up to 16 MiB on each side, a multiple of 512 bytes
so that the view keeps the alignment a fresh allocation would have (Triton specializes on
16-byte alignment, and the CUDA caching allocator hands out 512-byte aligned blocks): an
overrun by one element, one block or one extra row of a small tensor lands in the band.

Sentinels (the guard bands' bit pattern, per dtype): large, finite, negative values with an
unusual mantissa, so that a loaded sentinel is visible twice over -- bit-exact in a result that
copies it, and as a huge wrong value (its square overflows float32) in one that computes with it:

    float32   0xF1A55A5A  -1.6376e30  rounds to the bfloat16 sentinel when cast
    bfloat16  0xF1A5      -1.6341e30
    float16   0xF8A5      -38048      (float16 has no larger distinctive finite value)
    float64   0xC634AB4B45A5A5A5      rounds to the float32 sentinel when cast
    others    bytes 0xA5  e.g. int32 -1515870811, int8 -91, uint8 165 (never 0, 1, -1 or a max)

Poison (the interior of a torch.empty* buffer): a quiet NaN with a payload for floats -- NaN, so
the value checks see it too, and a payload that no arithmetic produces (computed NaNs are
canonical, 0x7FC00000 on CPU, 0x7FFFFFFF on CUDA), so that "never written" is told apart from
"computed NaN" -- and iinfo.max for integers (torch's fill_uninitialized_memory does the same):

    float32 0x7FE5A5A5   bfloat16 0x7FE5   float16 0x7E5A   float64 0x7FFCA5A5A5A5A5A5
    integers iinfo(dtype).max   bool True

zeros/ones/full keep their values (only empty* is poisoned); all of them get guard bands.

Interception (KernelScope) is scoped: a context manager that installs and always removes
- a torch.overrides.TorchFunctionMode that swaps the result of the allocators below for a view
  into a guarded buffer (a mode sees `from torch import empty` and Tensor methods alike);
- the launch counters: triton.knobs.runtime.launch_enter_hook (the hook chain the compiled
  launcher calls on every launch, triton/backends/nvidia/driver.c launchKernel) and
  triton.runtime.interpreter.GridExecutor.__call__ (every launch under TRITON_INTERPRET=1);
- a pause around Triton's own machinery (GridExecutor.__call__, JITFunction.run,
  Autotuner.run): Triton allocates with torch too (the interpreter's new_empty, the autotuner's
  cache flush, scratch allocators), and those buffers are none of the kernel's business.
Allocations outside the scope, and the reference and oracle computations, are untouched.

The per-call memory limit (oracles/harness/memory.py) is enforced here too: each of the kernel's own
allocations on the CPU is sized on the meta device first, and the one that would take the
call's total past `alloc_limit` bytes raises AllocationLimitError instead of allocating.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from oracles.platform.gpu_compile import launch_spec
from oracles.platform.interpreter import autotune_every_config
from oracles.harness.memory import AllocationLimitError, fmt_bytes, kernel_call_site
from oracles.verdict import FAIL, PASS, SKIP, Check, fmt, index_str, listed
from strategies.case import Case, storage_span

SANITIZER_CHECKS = ("launch", "red-zone", "poison", "inputs-unchanged", "determinism", "memcheck", "process-state")

GUARD_MIN_BYTES = 64 * 1024
GUARD_MAX_BYTES = 16 * 1024 * 1024
GUARD_ALIGN_BYTES = 512

_SENTINEL_BITS = {
    torch.float32: 0xF1A55A5A,
    torch.bfloat16: 0xF1A5,
    torch.float16: 0xF8A5,
    torch.float64: 0xC634AB4B45A5A5A5,
}
_POISON_BITS = {
    torch.float32: 0x7FE5A5A5,
    torch.bfloat16: 0x7FE5,
    torch.float16: 0x7E5A,
    torch.float64: 0x7FFCA5A5A5A5A5A5,
}

# Allocators swapped for guarded views during the call: the poisoned ones (contents undefined,
# so the kernel must write every element it returns) and the filled ones (values kept).
_POISONED = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty,
             torch.Tensor.new_empty_strided}
if hasattr(torch, "empty_permuted"):
    _POISONED.add(torch.empty_permuted)
_FILLED = {torch.zeros, torch.zeros_like, torch.ones, torch.ones_like, torch.full, torch.full_like,
           torch.Tensor.new_zeros, torch.Tensor.new_ones, torch.Tensor.new_full}
_METHODS = {torch.Tensor.new_empty, torch.Tensor.new_empty_strided, torch.Tensor.new_zeros,
            torch.Tensor.new_ones, torch.Tensor.new_full}
_LIKE = {torch.empty_like, torch.zeros_like, torch.ones_like, torch.full_like}  # device of their first argument


# ---------------------------------------------------------------------------------------------
# Bit patterns


def _pattern(dtype: torch.dtype, bits: int | None) -> bytes:
    itemsize = torch.empty((), dtype=dtype).element_size()
    if bits is None:
        return b"\xa5" * itemsize
    return bits.to_bytes(itemsize, sys.byteorder)


def sentinel_pattern(dtype: torch.dtype) -> bytes:
    """The guard bands' bytes for one element of `dtype`."""
    return _pattern(dtype, _SENTINEL_BITS.get(dtype))


def poison_pattern(dtype: torch.dtype) -> bytes:
    """The bytes of one never-written element of `dtype` (a payload NaN or iinfo.max)."""
    if dtype in _POISON_BITS:
        return _pattern(dtype, _POISON_BITS[dtype])
    if dtype == torch.bool:
        return b"\x01"
    if dtype.is_floating_point or dtype.is_complex:
        return _value_bytes(torch.full((1,), float("nan"), dtype=dtype))
    return _value_bytes(torch.full((1,), torch.iinfo(dtype).max, dtype=dtype))


def _hex(pattern: bytes) -> str:
    return f"0x{int.from_bytes(pattern, sys.byteorder):0{2 * len(pattern)}X}"


def _value_bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def pattern_value(dtype: torch.dtype, pattern: bytes):
    """The value whose bytes are `pattern` (a Python number)."""
    return torch.frombuffer(bytearray(pattern), dtype=torch.uint8).view(dtype)[0].item()


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)


def element_bytes(t: torch.Tensor) -> torch.Tensor:
    """[numel, itemsize] uint8: the bytes of every element of `t` in row-major order."""
    flat = _flat(t)
    return flat.view(torch.uint8).view(flat.numel(), flat.element_size())


# Elements compared whole, as the integer of their size, rather than byte by byte and reduced:
# the same equality of bits, without an [numel, itemsize] comparison and its reduction
# (tests/results/2026-12-06-session19.md). The byte form stays for sizes with no such integer.
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def element_bits(t: torch.Tensor) -> torch.Tensor | None:
    """[numel]: every element of `t` in row-major order as the integer holding its bits, or None
    for an element size with no such integer (complex128)."""
    flat = _flat(t)
    as_int = _INT_OF_SIZE.get(flat.element_size())
    return None if as_int is None else flat.view(as_int)


def _pattern_int(pattern: bytes, as_int: torch.dtype) -> int:
    return int.from_bytes(pattern, sys.byteorder, signed=as_int != torch.uint8)


def matches(t: torch.Tensor, pattern: bytes) -> torch.Tensor:
    """[numel] bool: which elements of `t` hold exactly the bytes `pattern`."""
    bits = element_bits(t)
    if bits is not None and bits.element_size() == len(pattern):
        return bits == _pattern_int(pattern, bits.dtype)
    ref = torch.tensor(list(pattern), dtype=torch.uint8, device=t.device)
    return (element_bytes(t) == ref).all(-1)


def elements_differ(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[numel] bool: where the elements of `a` and `b` (same shape and dtype) differ in any bit."""
    bits_a, bits_b = element_bits(a), element_bits(b)
    if bits_a is not None:
        return bits_a != bits_b
    return (element_bytes(a) != element_bytes(b)).any(-1)


def fill_pattern(t: torch.Tensor, pattern: bytes) -> None:
    """Write `pattern` into every element of the contiguous 1-D tensor `t`."""
    if not t.numel():
        return
    as_int = _INT_OF_SIZE.get(t.element_size())
    if as_int is not None and t.element_size() == len(pattern):
        t.view(as_int).fill_(_pattern_int(pattern, as_int))
        return
    ref = torch.tensor(list(pattern), dtype=torch.uint8, device=t.device)
    t.view(torch.uint8).view(t.numel(), len(pattern)).copy_(ref.expand(t.numel(), len(pattern)))


# ---------------------------------------------------------------------------------------------
# Guarded buffers


def guard_elements(extent: int, itemsize: int, *, enabled: bool = True) -> int:
    """Elements of each guard band around a span of `extent` elements (see the module doc)."""
    if not enabled:
        return 0
    nbytes = min(max(extent * itemsize, GUARD_MIN_BYTES), GUARD_MAX_BYTES)
    nbytes = -(-nbytes // GUARD_ALIGN_BYTES) * GUARD_ALIGN_BYTES
    return nbytes // itemsize


@dataclass
class Guarded:
    """A view living inside `buffer` = [guard band | span [0, extent) | guard band]."""
    label: str
    buffer: torch.Tensor  # 1-D, contiguous
    guard: int            # elements in each guard band (0: no red zones)
    extent: int           # elements of the span the view can reach, storage offset included
    view: torch.Tensor

    @property
    def span(self) -> torch.Tensor:
        return self.buffer[self.guard: self.guard + self.extent]

    def bands(self):
        """(side, band, offset of the band's first element relative to the span's start)."""
        yield "before", self.buffer[: self.guard], -self.guard
        yield "after", self.buffer[self.guard + self.extent:], self.extent

    def owns(self, t: Any) -> bool:
        return (isinstance(t, torch.Tensor) and t.device == self.buffer.device
                and t.untyped_storage().data_ptr() == self.buffer.untyped_storage().data_ptr())


def guarded_empty(shape, stride, storage_offset: int, dtype: torch.dtype, device, *, label: str,
                  guard: bool = True) -> Guarded:
    """A view of the given layout inside a buffer whose guard bands hold the dtype's sentinel
    (the span itself is left uninitialized: the caller fills it)."""
    probe = torch.empty(0, dtype=dtype)
    extent = storage_offset + (1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0)
    g = guard_elements(extent, probe.element_size(), enabled=guard)
    buffer = torch.empty(extent + 2 * g, dtype=dtype, device=device)
    if g:
        pattern = sentinel_pattern(dtype)
        fill_pattern(buffer[:g], pattern)
        fill_pattern(buffer[g + extent:], pattern)
    view = buffer.as_strided(tuple(shape), tuple(stride), g + storage_offset)
    return Guarded(label, buffer, g, extent, view)


def guarded_copy(t: torch.Tensor, device, *, label: str, guard: bool = True) -> Guarded:
    """A copy of `t` on `device` inside guard bands: same shape, strides and storage offset
    relative to the span, the span's bytes (gaps included) copied."""
    g = guarded_empty(t.shape, t.stride(), t.storage_offset(), t.dtype, device, label=label, guard=guard)
    if g.extent:
        g.span.copy_(storage_span(t.detach()))
    return g


# ---------------------------------------------------------------------------------------------
# Interception during the kernel call


@dataclass
class Allocation:
    index: int
    call: str         # e.g. "torch.empty([2, 33], torch.float32)"
    poisoned: bool
    guarded: Guarded


class SanitizerError(RuntimeError):
    """The sanitizers themselves failed during the call: a harness bug, never a kernel verdict."""


class _AllocationMode(TorchFunctionMode):
    """Hands back guarded (and, for empty*, poisoned) views for the allocators in scope. A mode is
    off inside its own __torch_function__, so the real allocations below are not intercepted."""

    def __init__(self, scope: "KernelScope"):
        super().__init__()
        self.scope = scope

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        allocator = func in _POISONED or func in _FILLED
        if allocator and not self.scope.paused:
            self.scope.admit(func, args, kwargs)  # past the per-call limit: raises, nothing allocated
        result = func(*args, **kwargs)
        if self.scope.paused or not allocator or kwargs.get("out") is not None:
            return result
        try:
            return self.scope.guard_allocation(func, result, kwargs)
        except Exception as e:  # ours, not the kernel's: must not become the kernel's verdict
            raise SanitizerError(f"guarding the result of {func.__name__} failed: {type(e).__name__}: {e}") from e


_SCOPE_FILES = (__file__,)


def _allocates_on_cpu(func, args, kwargs) -> bool:
    """Whether an allocator call would allocate on the CPU."""
    device = kwargs.get("device")
    if device is None and (func in _LIKE or func in _METHODS) and args and isinstance(args[0], torch.Tensor):
        device = args[0].device
    if device is None:
        device = torch.get_default_device() if hasattr(torch, "get_default_device") else "cpu"
    try:
        return torch.device(device).type == "cpu"
    except (RuntimeError, TypeError):
        return False


@dataclass
class MemoryAccess:
    kind: str      # "load" or "store"
    label: str     # the buffer whose guard band the lane hit
    offset: int    # elements relative to the start of that buffer's span (negative: before it)
    lanes: int     # masked-in lanes of this access that hit it


class MemoryMap:
    """memcheck under the CPU interpreter: every masked-in lane of every interpreted load and
    store is looked up among the guarded buffers of the call (inputs and the kernel's own
    allocations). A lane in a guard band is an out-of-bounds access of that buffer, whether or
    not the value ever reaches an output (an out-of-bounds read that the output's mask discards
    still faults, or reads another buffer, on a GPU). Lanes outside every known buffer are not
    judged: a module-level tensor the suite did not allocate may live there."""

    MAX_RECORDED = 5

    def __init__(self):
        self.bands: list[tuple[int, int, int, int, str]] = []  # (lo, hi, span_lo, itemsize, label), bytes
        self.accesses: list[MemoryAccess] = []
        self.total = 0

    def add(self, g: "Guarded") -> None:
        if not g.guard or g.buffer.device.type != "cpu":
            return
        size = g.buffer.element_size()
        base = g.buffer.data_ptr()
        span_lo, span_hi = base + g.guard * size, base + (g.guard + g.extent) * size
        self.bands.append((base, span_lo, span_lo, size, g.label))
        self.bands.append((span_hi, span_hi + g.guard * size, span_lo, size, g.label))

    def check(self, kind: str, ptrs, mask) -> None:
        import numpy as np
        if not self.bands:
            return
        addresses = np.asarray(ptrs).astype(np.uint64).reshape(-1)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), np.asarray(ptrs).shape).reshape(-1)]
        if not addresses.size:
            return
        for lo, hi, span_lo, size, label in self.bands:
            hit = addresses[(addresses >= lo) & (addresses < hi)]
            if hit.size:
                self.total += int(hit.size)
                if len(self.accesses) < self.MAX_RECORDED:
                    first = (int(hit.min()) - span_lo) // size
                    self.accesses.append(MemoryAccess(kind, label, first, int(hit.size)))


class KernelScope:
    """Context manager around the kernel call: guards allocations, counts Triton launches, and
    always restores everything it patched (also when the kernel raises). `alloc_limit`: bytes the
    kernel's own CPU allocations may total during the call (None: no limit)."""

    def __init__(self, memory: MemoryMap | None = None, *, alloc_limit: int | None = None):
        self.memory = memory if memory is not None else MemoryMap()
        self.launches: list[str] = []
        self.launch_specs: list = []  # interpreted launches, for the gpu-compile check (oracles/platform/gpu_compile.py)
        self.allocations: list[Allocation] = []
        self.alloc_limit = alloc_limit
        self.allocated_bytes = 0  # the kernel's own CPU allocations so far, as requested (no guard bands)
        self.paused = 0
        self._stack: contextlib.ExitStack | None = None

    # -- allocations ---------------------------------------------------------------------------
    def admit(self, func, args, kwargs) -> None:
        """Size an allocation on the meta device before it is made; refuse the one that would take
        the call's CPU allocations past the limit. An allocation the meta device cannot size is
        left to the real call, which raises the same error itself."""
        if self.alloc_limit is None or not _allocates_on_cpu(func, args, kwargs):
            return
        probe_kwargs = {k: v for k, v in kwargs.items() if k not in ("out", "pin_memory", "device")}
        try:
            probe = func(*args, device="meta", **probe_kwargs)
            nbytes = probe.untyped_storage().nbytes()
        except Exception:
            return
        if self.allocated_bytes + nbytes > self.alloc_limit:
            name = f"Tensor.{func.__name__}" if func in _METHODS else f"torch.{func.__name__}"
            raise AllocationLimitError(
                f"{name}({list(probe.shape)}, {probe.dtype}){kernel_call_site(_SCOPE_FILES)} asks for "
                f"{fmt_bytes(nbytes)} on the CPU during the kernel call, {fmt_bytes(self.allocated_bytes)} already "
                f"allocated in this call: past the per-call limit of {fmt_bytes(self.alloc_limit)} "
                f"(--memory-limit; refused, nothing allocated)")
        self.allocated_bytes += nbytes

    def guard_allocation(self, func, result, kwargs) -> Any:
        if (not isinstance(result, torch.Tensor) or result.layout != torch.strided or result.requires_grad
                or result.device.type == "meta" or kwargs.get("pin_memory") or result.is_quantized):
            return result
        poisoned = func in _POISONED
        name = f"Tensor.{func.__name__}" if func in _METHODS else f"torch.{func.__name__}"
        call = f"{name}({list(result.shape)}, {result.dtype})"
        g = guarded_empty(result.shape, result.stride(), result.storage_offset(), result.dtype,
                          result.device, label=call)
        if poisoned:
            fill_pattern(g.span, poison_pattern(result.dtype))
        else:
            fill_pattern(g.span, sentinel_pattern(result.dtype))  # gaps, if any, read as red zone
            g.view.copy_(result)
        self.allocations.append(Allocation(len(self.allocations), call, poisoned, g))
        self.memory.add(g)
        return g.view

    # -- launches ------------------------------------------------------------------------------
    def _launched(self, name: str) -> None:
        self.launches.append(name)

    @contextlib.contextmanager
    def _paused(self):
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def _patch(self, stack: contextlib.ExitStack, owner, attr: str, *, count: bool) -> None:
        original = owner.__dict__[attr]
        scope = self

        def wrapper(this, *args, **kwargs):
            if count:
                scope._launched(getattr(getattr(this, "fn", None), "__name__", "kernel"))
                if hasattr(this, "arg_names") and hasattr(this, "constexprs"):  # an interpreter GridExecutor
                    with scope._paused():
                        try:
                            spec = launch_spec(this.fn, this.arg_names, this.constexprs, args, kwargs)
                        except Exception as e:  # the recorder's own gap: never the kernel's exception
                            spec = (f"{getattr(this.fn, '__name__', 'kernel')}: the launch could not be recorded "
                                    f"({type(e).__name__}: {e}), a gap of tritonfuzz's recorder")
                        scope.launch_specs.append(spec)
            with scope._paused():
                return original(this, *args, **kwargs)

        setattr(owner, attr, wrapper)
        stack.callback(setattr, owner, attr, original)

    def _hook_compiled_launches(self, stack: contextlib.ExitStack) -> None:
        import triton

        def enter_hook(metadata):
            data = getattr(metadata, "data", None)
            self._launched(data.get("name", "kernel") if isinstance(data, dict) else "kernel")

        knobs = getattr(triton, "knobs", None)
        chain = getattr(getattr(knobs, "runtime", None), "launch_enter_hook", None)
        if hasattr(chain, "add") and hasattr(chain, "remove"):  # Triton >= 3.4: a HookChain
            chain.add(enter_hook)
            stack.callback(chain.remove, enter_hook)
            return
        # Older Triton: one hook attribute (knobs.runtime, or CompiledKernel before knobs existed).
        from triton.compiler import CompiledKernel
        owner = knobs.runtime if knobs is not None and hasattr(knobs.runtime, "launch_enter_hook") else CompiledKernel
        previous = getattr(owner, "launch_enter_hook", None)

        def chained(metadata):
            enter_hook(metadata)
            if previous is not None:
                previous(metadata)

        setattr(owner, "launch_enter_hook", chained)
        stack.callback(setattr, owner, "launch_enter_hook", previous)

    def _hook_interpreter_memory(self, stack: contextlib.ExitStack) -> None:
        """Wrap the interpreter builder's masked loads and stores (plain ones call them) and atomics:
        each access's masked-in pointers go through the memory map first."""
        from triton.runtime.interpreter import InterpreterBuilder
        memory = self.memory
        hooks = {"create_masked_load": ("load", 0, 1), "create_masked_store": ("store", 0, 2),
                 "create_atomic_rmw": ("store", 1, 3), "create_atomic_cas": ("store", 0, None)}
        for attr, (kind, ptr_at, mask_at) in hooks.items():
            original = InterpreterBuilder.__dict__.get(attr)
            if original is None:
                continue

            def wrapper(this, *args, _original=original, _kind=kind, _ptr=ptr_at, _mask=mask_at, **kwargs):
                try:
                    ptrs = args[_ptr].data
                    mask = args[_mask].data if _mask is not None and args[_mask] is not None else None
                    memory.check(_kind, ptrs, mask)
                except Exception:  # a form the map cannot read: not checked, never the kernel's error
                    pass
                return _original(this, *args, **kwargs)

            setattr(InterpreterBuilder, attr, wrapper)
            stack.callback(setattr, InterpreterBuilder, attr, original)

    def __enter__(self) -> "KernelScope":
        stack = contextlib.ExitStack()
        try:
            from triton.runtime.autotuner import Autotuner
            from triton.runtime.interpreter import GridExecutor
            from triton.runtime.jit import JITFunction

            self._patch(stack, GridExecutor, "__call__", count=True)    # interpreter launches
            self._hook_interpreter_memory(stack)                         # memcheck
            self._patch(stack, JITFunction, "run", count=False)         # compiled: pause only
            self._patch(stack, Autotuner, "run", count=False)
            self._hook_compiled_launches(stack)                          # compiled launches
            stack.enter_context(_AllocationMode(self))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()


# ---------------------------------------------------------------------------------------------
# One sanitized call


@dataclass
class KernelRun:
    """What one call of the kernel left behind: its inputs (guarded), its result or error, and
    what happened during the call (launches, allocations)."""
    inputs: dict[str, Guarded]
    outputs: tuple | None = None
    error: BaseException | None = None
    sanitized: bool = True
    launches: list[str] = field(default_factory=list)
    launch_specs: list = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    memory: MemoryMap | None = None
    process_changes: list[str] = field(default_factory=list)  # what the call left changed (process_state_check)


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run_kernel(fn, case: Case, device, *, sanitize: bool = True, alloc_limit: int | None = None) -> KernelRun:
    """Call fn(**inputs) as the judge does (keyword arguments), on guarded copies of the case's
    inputs, inside a KernelScope when `sanitize` (its allocations on the CPU limited to
    `alloc_limit` bytes). The kernel's exception is kept, not raised."""
    guarded = {name: guarded_copy(t, case.device_of(name, device), label=f"input {name}", guard=sanitize)
               for name, t in case.tensors().items()}
    args = {k: guarded[k].view if k in guarded else v for k, v in case.inputs.items()}
    run = KernelRun(guarded, sanitized=sanitize)
    memory = MemoryMap()
    for g in guarded.values():
        memory.add(g)
    scope = KernelScope(memory, alloc_limit=alloc_limit) if sanitize else None
    cwd, threads = os.getcwd(), set(threading.enumerate())
    try:
        with scope if scope is not None else contextlib.nullcontext(), autotune_every_config("judge" in case.features):
            out = fn(**args)
        synchronize(device)
        run.outputs = out if isinstance(out, tuple) else (out,)
    except SanitizerError:
        raise
    except Exception as e:  # the kernel's own error on a valid case is a verdict, not a crash
        if isinstance(e.__cause__, SanitizerError) or isinstance(e.__context__, SanitizerError):
            raise
        run.error = e
    finally:
        run.process_changes = _process_changes(cwd, threads)
    if scope is not None:
        run.launches, run.allocations, run.launch_specs = scope.launches, scope.allocations, scope.launch_specs
        run.memory = scope.memory
    return run


def _process_changes(cwd: str, threads: set) -> list[str]:
    """What a call changed in the process: the working directory (restored here) and threads of
    its own still running (idle concurrent.futures workers aside)."""
    changes = []
    try:
        now = os.getcwd()
    except OSError as e:  # the directory the call moved to was removed
        now = f"unreadable ({e.strerror})"
    if now != cwd:
        os.chdir(cwd)
        changes.append(f"changed the working directory to {now!r} (restored to {cwd!r})")
    started = [t for t in threading.enumerate() if t not in threads and t.is_alive()
               and getattr(getattr(t, "_target", None), "__module__", "") != "concurrent.futures.thread"]
    if started:
        names = ", ".join(f"{t.name!r}{' (daemon)' if t.daemon else ''}" for t in started[:5])
        changes.append(f"left {len(started)} thread(s) of its own running after it returned: {names}")
    return changes


# ---------------------------------------------------------------------------------------------
# Checks


PROCESS_STATE = "process-state"


def process_state_check(run: KernelRun) -> Check:
    if not run.process_changes:
        return Check(PROCESS_STATE, PASS)
    return Check(PROCESS_STATE, FAIL, "the call " + "; ".join(run.process_changes) + ". A kernel call must leave "
                                      "the process as it found it: a thread runs on into later cases (and a "
                                      "non-daemon one keeps the process from exiting), a changed directory moves "
                                      "every relative path")


MEMCHECK = "memcheck"


def memcheck_check(run: KernelRun) -> Check:
    """Out-of-bounds loads and stores seen lane by lane under the interpreter (MemoryMap)."""
    memory = run.memory
    if memory is None or not memory.bands:
        return Check(MEMCHECK, SKIP, "no guarded CPU buffers to check (a GPU run, or sanitizers off)")
    if not memory.total:
        return Check(MEMCHECK, PASS)
    shown = "; ".join(f"{a.kind} of {a.lanes} lane(s) {'before' if a.offset < 0 else 'past'} {a.label} "
                      f"(first at element {a.offset} relative to its storage span)" for a in memory.accesses)
    more = f"; ... ({memory.total} lanes in all)" if len(memory.accesses) == MemoryMap.MAX_RECORDED else ""
    return Check(MEMCHECK, FAIL, f"out-of-bounds access under the interpreter: {shown}{more}. On a GPU such an "
                                 f"access faults or reads/writes another buffer, even where the output is right")


def launch_check(run: KernelRun, outputs: dict[str, Any]) -> Check:
    if run.launches:
        names = ", ".join(dict.fromkeys(run.launches))
        return Check("launch", PASS, f"{len(run.launches)} Triton launch(es): {names}")
    tensors = [t for t in outputs.values() if isinstance(t, torch.Tensor)]
    if tensors and all(t.numel() == 0 for t in tensors):
        return Check("launch", PASS, "nothing launched, and every output is empty: nothing to compute")
    return Check("launch", FAIL, "no Triton kernel was launched during the call: the outputs were computed "
                                 "by other means (torch ops?); the competition disqualifies a torch fallback")


def _owners(g: Guarded, outputs: dict[str, Any]) -> list[str]:
    return [name for name, t in outputs.items() if g.owns(t)]


def _allocation_label(a: Allocation, outputs: dict[str, Any]) -> str:
    owners = _owners(a.guarded, outputs)
    if owners:
        return f"output {'/'.join(owners)} ({a.call}, allocated during the call)"
    return f"allocation #{a.index} {a.call} (not returned)"


def _band_problems(g: Guarded, label: str) -> list[str]:
    problems = []
    pattern = sentinel_pattern(g.buffer.dtype)
    for side, band, base in g.bands():
        if not band.numel():
            continue
        changed = (~matches(band, pattern)).nonzero().flatten()
        if not changed.numel():
            continue
        first, last = int(changed[0]), int(changed[-1])
        where = f"offset {first + base}" + (f" (last at {last + base})" if last != first else "")
        problems.append(
            f"out-of-bounds store: {label}: {changed.numel()} element(s) changed in the guard band {side} its "
            f"storage span, first at {where} relative to the span [0, {g.extent}); value written there "
            f"{_show(band[first].item())}")
    return problems


def _show(v) -> str:
    return fmt(v) if isinstance(v, float) else repr(v)


def _loaded_sentinels(run: KernelRun, out: torch.Tensor) -> list[bytes]:
    """Byte patterns in `out`'s dtype that mean "a guard band was read": its own sentinel, and
    the sentinel of every guarded float dtype converted to it where that stays finite."""
    patterns = [sentinel_pattern(out.dtype)]
    dtypes = {g.buffer.dtype for g in run.inputs.values()} | {a.guarded.buffer.dtype for a in run.allocations}
    for dtype in dtypes:
        if dtype != out.dtype and dtype.is_floating_point and out.dtype.is_floating_point:
            value = torch.frombuffer(bytearray(sentinel_pattern(dtype)), dtype=torch.uint8).view(dtype).to(out.dtype)
            if bool(value.isfinite().all()):
                patterns.append(_value_bytes(value))
    return list(dict.fromkeys(patterns))


def red_zone_check(run: KernelRun, outputs: dict[str, Any], reference: dict[str, Any] | None = None) -> Check:
    """Out-of-bounds stores (a changed guard band of an input or of an allocation made during the
    call) and out-of-bounds loads (a sentinel in an output where the reference has other bits)."""
    if not run.sanitized:
        return Check("red-zone", SKIP, "sanitizers off")
    problems = []
    for g in run.inputs.values():
        problems += _band_problems(g, g.label)
    for a in run.allocations:
        problems += _band_problems(a.guarded, _allocation_label(a, outputs))
    for name, out in outputs.items():
        if not isinstance(out, torch.Tensor) or not out.numel():
            continue
        ref = (reference or {}).get(name)
        comparable = isinstance(ref, torch.Tensor) and ref.shape == out.shape and ref.dtype == out.dtype
        for pattern in _loaded_sentinels(run, out):
            hit = matches(out, pattern)
            if comparable:
                hit &= ~matches(ref.to(out.device), pattern)
            where = hit.nonzero().flatten()
            if where.numel():
                shape = tuple(out.shape)
                problems.append(
                    f"out-of-bounds load: {where.numel()} element(s) of {name} hold the red-zone sentinel "
                    f"{_show(pattern_value(out.dtype, pattern))}, at "
                    + listed(where.cpu(), lambda i: f"{name}{index_str(i, shape)}")
                    + ": the kernel read a guard band (past an input's or a buffer's storage span)")
    return Check("red-zone", FAIL, " | ".join(problems)) if problems else Check("red-zone", PASS)


def poison_check(run: KernelRun, outputs: dict[str, Any], reference: dict[str, Any] | None = None) -> Check:
    """Elements of a returned torch.empty* buffer that still hold the poison bit pattern, where
    the reference does not hold that pattern: never written by the kernel."""
    problems, checked = [], []
    for name, out in outputs.items():
        if not isinstance(out, torch.Tensor):
            continue
        if not any(a.poisoned and a.guarded.owns(out) for a in run.allocations):
            continue
        checked.append(name)
        pattern = poison_pattern(out.dtype)
        stale = matches(out, pattern)
        ref = (reference or {}).get(name)
        if isinstance(ref, torch.Tensor) and ref.shape == out.shape and ref.dtype == out.dtype:
            stale &= ~matches(ref.to(out.device), pattern)
        where = stale.nonzero().flatten()
        if where.numel():
            shape = tuple(out.shape)
            problems.append(f"{where.numel()} element(s) of {name} were never written (still poison "
                            f"{pattern_value(out.dtype, pattern)!r}, bits {_hex(pattern)}), at "
                            + listed(where.cpu(), lambda i: f"{name}{index_str(i, shape)}"))
    if problems:
        return Check("poison", FAIL, " | ".join(problems))
    if not checked:
        return Check("poison", SKIP, "no output came from torch.empty* during the call, so an element the "
                                     "kernel never wrote cannot be told apart" if run.sanitized else "sanitizers off")
    return Check("poison", PASS)


def inputs_unchanged_check(run: KernelRun, case: Case) -> Check:
    """Every input's storage span (strided gaps included) byte-identical to the case's."""
    problems = []
    for name, g in run.inputs.items():
        if not g.extent:
            continue
        before = storage_span(case.inputs[name].detach()).to(g.buffer.device)
        changed = elements_differ(before, g.span).nonzero().flatten()
        if not changed.numel():
            continue
        k = int(changed[0])
        offset = g.view.storage_offset() - g.guard  # the view's storage offset within the span
        index = _index_at(tuple(g.view.shape), tuple(g.view.stride()), offset, k)
        where = f"{name}{index}" if index else f"storage element {k} of {name} (a gap between its strided elements)"
        problems.append(f"{name}: {changed.numel()} element(s) changed, first at {where}: "
                        f"{_show(before[k].item())} before, {_show(g.span[k].item())} after")
    if problems:
        return Check("inputs-unchanged", FAIL, "the kernel wrote into its input(s): " + "; ".join(problems))
    return Check("inputs-unchanged", PASS)


def _index_at(shape, stride, offset: int, k: int) -> str | None:
    """The index [i, j, ...] of the view (shape, stride, offset) whose element is storage element
    k, or None when k is none of its elements. Greedy over strides, largest first: exact for the
    non-overlapping layouts cases draw; the result is verified."""
    rem = k - offset
    idx = [0] * len(shape)
    for d in sorted(range(len(shape)), key=lambda d: -stride[d]):
        if stride[d] and shape[d] and rem >= 0:
            idx[d] = min(rem // stride[d], shape[d] - 1)
            rem -= idx[d] * stride[d]
    return "[" + ", ".join(map(str, idx)) + "]" if rem == 0 and k >= offset else None


def determinism_check(first: dict[str, Any], second: dict[str, Any] | BaseException) -> Check:
    """The same case twice gives the same bits, NaN payloads included."""
    if isinstance(second, BaseException):
        return Check("determinism", FAIL, f"the second run of the same case raised {type(second).__name__}: {second}")
    problems = []
    for name, a in first.items():
        b = second.get(name)
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{name}: shape/dtype {tuple(a.shape)} {a.dtype} then {tuple(b.shape)} {b.dtype}")
            continue
        differ = elements_differ(a, b.to(a.device)).nonzero().flatten()
        if differ.numel():
            fa, fb, shape = a.reshape(-1), b.reshape(-1), tuple(a.shape)
            problems.append(f"{name}: {differ.numel()} element(s) differ bit for bit, at " + listed(
                differ.cpu(), lambda i: f"{name}{index_str(i, shape)} {_show(fa[i].item())} then {_show(fb[i].item())}"))
    if problems:
        return Check("determinism", FAIL, "two runs of the same case gave different bits (a result that moves is "
                                          "a race, or a read of memory nobody wrote): " + " | ".join(problems))
    return Check("determinism", PASS)


__all__ = ["SANITIZER_CHECKS", "Guarded", "KernelRun", "KernelScope", "SanitizerError", "determinism_check", "guarded_copy",
           "guarded_empty", "inputs_unchanged_check", "launch_check", "poison_check", "poison_pattern",
           "process_state_check", "red_zone_check", "run_kernel", "sentinel_pattern"]
