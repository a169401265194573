"""Where Triton's CPU interpreter (``TRITON_INTERPRET=1``) differs from a GPU, and the fixes:
bfloat16 arithmetic (below), ``@triton.autotune`` (``enable_autotuning``), scalars used as Python
ints under Triton 3.6 (``enable_scalar_index``), a launch's compiled kernel kept and launched
again (``enable_compiled_handles``); and two for speed, the language's builtins found once
(``enable_cached_builtins``) and integer overflow checks that could not fire skipped
(``skip_inert_overflow_checks``). ``patch_interpreter()`` applies all six.

The gap
-------
NumPy has no bfloat16, so ``triton.runtime.interpreter`` stores bf16 tensors as
their raw bits in ``uint16`` arrays (``_get_np_dtype``) and then applies its
NumPy ops to those arrays unchanged.  Every bf16 operation therefore computes
on integer bit patterns: ``x * x + x`` gives garbage or NaN, ``tl.maximum`` and
``tl.max(..., return_indices=True)`` compare bits (wrong for negatives),
``tl.sum`` / ``tl.cumsum`` add bits, ``tl.dot`` multiplies bits.  The bf16
casts are not exact either: float32 -> bf16 (every ``.to(tl.bfloat16)`` and
every Python float constant in a bf16 expression) truncates instead of rounding
to nearest even, int/float64 -> bf16 stores the value itself as bits, bf16 <->
float32 mishandles subnormals, and using a bf16 compare as a number
(``x + (x < w)``) crashes, because its booleans carry a bf16 label.

The patch
---------
``enable_bf16_arithmetic()`` wraps (never copies) interpreter entry points.
Each wrapper checks whether its operands hold bf16 bits; if not it calls the
original untouched, so no other dtype changes behaviour.  For bf16 it does what
a GPU does: upcast the operands to float32 (exact: a bf16 is the top half of a
float32), call the original on float32, and round the float32 result back to
bf16 with round-to-nearest-even (NaN stays a quiet NaN, sign kept).

* ``InterpreterBuilder.binary_op``: fadd, fsub, fmul, fdiv, frem, precise and
  approx divf, minimumf/maximumf/minnumf/maxnumf, and every float compare
  (booleans computed on the float values, labelled int1 as they should be).
* ``InterpreterBuilder.unary_op``: exp, exp2, log, log2, sin, cos, sqrt,
  floor, ceil; fneg flips the sign bit, which is exact and what the GPU does.
  (Triton's frontend rejects bf16 for the tl.math transcendentals on GPU and
  interpreter alike; this covers builder-level callers.)
* ``create_rsqrt``, ``create_erf``, ``create_clampf``.
* ``create_fma``: the exact product x*y (float64) plus z, rounded once to bf16.
* ``create_dot``: bf16 operands are multiplied in float32 and accumulated in
  the float32 accumulator, as the tensor cores do.
* ``cast_impl``: bf16 -> anything goes through the exact float32 value;
  anything -> bf16 rounds to nearest even once (from float64 via
  round-to-odd, so there is no double rounding).
* ``ReduceOps.sum`` / ``ReduceOps.min_max`` (max/min/argmax/argmin) and
  ``ScanOps.cumsum`` / ``ScanOps.cumprod``: run the original on the float32
  values and round the result to bf16.  Reductions with a user combine_fn go
  through the patched builder ops already.

Known residual differences from a GPU
-------------------------------------
None for +, -, *, /, sqrt, compares, min/max, neg and casts: those are bit-exact
(float32 has more than 2*8+2 significand bits, so rounding a float32 result to
bf16 equals rounding the exact result once).  The rest:

* ``tl.sum``/``tl.cumsum``/``tl.cumprod`` of bf16 keep bf16 as the combine
  dtype; the GPU rounds to bf16 after every combine step of its reduction tree,
  while the patch sums in float32 and rounds once, so results can differ by
  bf16 rounding (a few bf16 ulps on long reductions).  Sum order differs too.
* Transcendentals use NumPy's float32 libm, not CUDA's; a result one float32
  ulp away can round to the neighbouring bf16 (at most 1 bf16 ulp).
* ``tl.dot`` accumulates in NumPy's float32 order; tensor cores use a
  different order (and internal precision), so expect float32-level, not
  bit-level, agreement.
* ``tl.fma`` rounds once (``fma.rn.bf16``); a backend that upcasts to a float32
  fma and rounds twice can differ by 1 bf16 ulp in rare halfway cases.
* NaN payloads are not canonicalised the way CUDA does (it produces 0x7FFF).
* int64 values beyond 2**53 are rounded twice on their way to bf16 (via float64).
* Not patched: bf16 atomics (``atomic_rmw`` fadd), bf16 <-> fp8 conversions and
  the explicit ``fp_downcast_rounding="rtz"`` path (both still go through the
  interpreter's ``_convert_float``), and ``dot_scaled``.

``bf16_arithmetic_is_exact()`` runs a tiny self-check kernel through the
interpreter and reports whether the patched interpreter agrees bit for bit with
torch's bf16 ops (torch CPU computes bf16 elementwise ops in float32 and rounds:
the GPU semantics).  Callers use it to mark bf16 cases untrusted on CPU when
the patch could not be applied to the installed Triton.

Importing this module has no side effects: triton and torch are imported only
when a function is called, because TRITON_INTERPRET must be set first.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import types
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Marks a wrapper installed by this module; checking for it on the live
# attribute is what makes enable_bf16_arithmetic() idempotent without keeping
# any state here.
_PATCH_MARK = "_tritonfuzz_bf16_patch"


# --- exact bf16 <-> float conversions (pure NumPy) ---------------------------


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """Exact: a bf16 value is the float32 whose low 16 bits are zero."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _f32_to_bf16_bits(values) -> np.ndarray:
    """Round float32 to bf16 bits, nearest-even, like cvt.rn.bf16.f32.

    Same arithmetic as torch's c10::round_to_nearest_even: adding 0x7FFF plus
    the lowest kept bit carries into the kept half exactly when the dropped
    half is above the midpoint, or at it with an odd kept half.  Overflow
    carries into the exponent and yields inf, as it should.  NaN would carry
    into garbage, so it is quieted and keeps its sign instead.
    """
    f32 = np.asarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)  # 64 bits: the carry cannot wrap
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    quiet_nan = (bits >> np.uint64(16)) | np.uint64(0x0040)
    return np.where(np.isnan(f32), quiet_nan, rounded).astype(np.uint16)


def _f64_to_f32_round_to_odd(values: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd.

    An inexact result is forced to the neighbour with an odd last bit, which
    keeps "something was dropped" as a sticky bit.  With float32 having more
    than bf16's 8 + 2 significand bits, a later nearest-even rounding to bf16
    then equals rounding the float64 value once: no double rounding.
    """
    x64 = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = x64.astype(np.float32)
    back = x32.astype(np.float64)
    bits = x32.view(np.uint32).astype(np.int64)
    needs_odd = np.isfinite(x64) & (back != x64) & ((bits & 1) == 0)
    # Sign-magnitude: -1 steps toward zero, +1 away from it, for either sign.
    step = np.where(np.abs(back) > np.abs(x64), -1, 1)
    return np.where(needs_odd, bits + step, bits).astype(np.uint32).view(np.float32)


def _f64_to_bf16_bits(values) -> np.ndarray:
    """Round float64 to bf16 bits once, nearest-even."""
    return _f32_to_bf16_bits(_f64_to_f32_round_to_odd(values))


def _to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round any numeric array to bf16 bits once, nearest-even."""
    if values.dtype == np.float32:
        return _f32_to_bf16_bits(values)
    # float64 holds every float16, bool and int up to 2**53 exactly.
    return _f64_to_bf16_bits(values.astype(np.float64))


def _fma_to_bf16_bits(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """x * y + z for float32-held bf16 values, rounded once to bf16.

    The product of two 8-bit significands is exact in float64.  The float64
    sum may round; TwoSum recovers that error exactly, and rounding to odd on
    it keeps the sticky bit a tiny z would otherwise lose at a bf16 midpoint.
    """
    x, y, z = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (x, y, z)))
    product = x * y
    with np.errstate(invalid="ignore"):
        total = product + z
        z_part = total - product
        error = (product - (total - z_part)) + (z - z_part)
        bits = total.view(np.uint64)
        needs_odd = np.isfinite(total) & (error != 0) & ((bits & np.uint64(1)) == 0)
        total = np.where(needs_odd, np.nextafter(total, np.copysign(np.inf, error)), total)
    return _f64_to_bf16_bits(total)


# --- handles and tensors ------------------------------------------------------


def _holds_bf16(handle, tl) -> bool:
    """True for an interpreter TensorHandle carrying bf16 bits.

    The label alone is not enough: the shipped interpreter labels a bf16
    compare's booleans bf16, and those must stay booleans.
    """
    dtype = getattr(handle, "dtype", None)
    data = getattr(handle, "data", None)
    return (getattr(dtype, "scalar", None) == tl.bfloat16 and isinstance(data, np.ndarray)
            and data.dtype == np.uint16)


def _handle_as_f32(handle, interp):
    return interp.TensorHandle(_bf16_bits_to_f32(handle.data), interp.tl.float32)


def _handle_from_f32_path(handle, interp):
    """The result of an op run on upcast bf16 operands, brought back to bf16.

    Float results are rounded to bf16.  Boolean results (compares) are labelled
    int1: the interpreter labels them with the operand dtype, and a bf16 label on
    booleans sends a later cast of them (e.g. ``x + (x < w)``) into bit conversion.
    """
    data = handle.data
    if data.dtype == np.bool_:
        return interp.TensorHandle(data, interp.tl.int1)
    if data.dtype.kind == "f":
        data = _to_bf16_bits(data)
    return interp.TensorHandle(data, interp.tl.bfloat16)


def _tensor_retyped(tensor, handle, element_ty, interp):
    """A tl.tensor with a new handle and element type, same shape."""
    return interp.tl.core.tensor(handle, tensor.type.with_element_ty(element_ty))


def _tensor_as_f32(tensor, interp):
    return _tensor_retyped(tensor, _handle_as_f32(tensor.handle, interp), interp.tl.float32, interp)


def _tensors_back_to_bf16(result, interp):
    """Round the float32 tensors in a reduce/scan result to bf16; others (indices) stay."""
    if isinstance(result, (list, tuple)):
        return type(result)(_tensors_back_to_bf16(item, interp) for item in result)
    if isinstance(result, interp.tl.core.tensor) and result.handle.data.dtype == np.float32:
        return _tensor_retyped(result, _handle_from_f32_path(result.handle, interp), interp.tl.bfloat16, interp)
    return result


# --- wrappers: each takes the original and returns its replacement -------------


def _wrap_upcasting(original, interp):
    """Builder op on bf16 handles: run the original on their float32 values, round the result."""

    def wrapper(self, *args):
        if not any(_holds_bf16(arg, interp.tl) for arg in args):
            return original(self, *args)
        upcast = [_handle_as_f32(arg, interp) if _holds_bf16(arg, interp.tl) else arg for arg in args]
        return _handle_from_f32_path(original(self, *upcast), interp)

    return wrapper


def _wrap_unary_op(original, interp):
    upcasting = _wrap_upcasting(original, interp)

    def unary_op(self, arg, op):
        if op is np.negative and _holds_bf16(arg, interp.tl):
            # Exact, and keeps a NaN's payload with its sign flipped, as the GPU does.
            return interp.TensorHandle(arg.data ^ np.uint16(0x8000), arg.dtype.scalar)
        return upcasting(self, arg, op)

    return unary_op


def _wrap_fma(original, interp):

    def create_fma(self, x, y, z):
        if not all(_holds_bf16(arg, interp.tl) for arg in (x, y, z)):
            return original(self, x, y, z)
        bits = _fma_to_bf16_bits(*(_bf16_bits_to_f32(arg.data) for arg in (x, y, z)))
        return interp.TensorHandle(bits, z.dtype.scalar)

    return create_fma


def _wrap_dot(original, interp):

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if not (_holds_bf16(a, interp.tl) or _holds_bf16(b, interp.tl)):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        a, b, acc = (_handle_as_f32(h, interp) if _holds_bf16(h, interp.tl) else h for h in (a, b, d))
        out = original(self, a, b, acc, input_precision, max_num_imprecise_acc)
        # A bf16 accumulator (out_dtype=bf16) gets the float32 sum rounded once.
        return _handle_from_f32_path(out, interp) if _holds_bf16(d, interp.tl) else out

    return create_dot


def _wrap_cast(original, interp):
    tl = interp.tl

    def cast_impl(self, src, dst_type):
        dst = dst_type.scalar
        if _holds_bf16(src, tl) and dst != tl.bfloat16:
            as_f32 = _handle_as_f32(src, interp)
            return as_f32 if dst == tl.float32 else original(self, as_f32, dst_type)
        if dst == tl.bfloat16 and not _holds_bf16(src, tl):
            return interp.TensorHandle(_to_bf16_bits(np.asarray(src.data)), tl.bfloat16)
        return original(self, src, dst_type)

    return cast_impl


def _wrap_reduce_scan(original, interp):
    """For ReduceOps/ScanOps fast paths, which take a tl.tensor (or a (value, index) tuple)."""

    def wrapper(self, input, *args, **kwargs):
        value = input[0] if isinstance(input, tuple) else input
        if not (isinstance(value, interp.tl.core.tensor) and _holds_bf16(value.handle, interp.tl)):
            return original(self, input, *args, **kwargs)
        return _tensors_back_to_bf16(original(self, _tensor_as_f32(value, interp), *args, **kwargs), interp)

    return wrapper


# (owner in triton.runtime.interpreter, attribute, wrapper factory)
_PATCHES = (
    ("InterpreterBuilder", "binary_op", _wrap_upcasting),
    ("InterpreterBuilder", "unary_op", _wrap_unary_op),
    ("InterpreterBuilder", "create_rsqrt", _wrap_upcasting),
    ("InterpreterBuilder", "create_erf", _wrap_upcasting),
    ("InterpreterBuilder", "create_clampf", _wrap_upcasting),
    ("InterpreterBuilder", "create_fma", _wrap_fma),
    ("InterpreterBuilder", "create_dot", _wrap_dot),
    ("InterpreterBuilder", "cast_impl", _wrap_cast),
    ("ReduceOps", "sum", _wrap_reduce_scan),
    ("ReduceOps", "min_max", _wrap_reduce_scan),
    ("ScanOps", "cumsum", _wrap_reduce_scan),
    ("ScanOps", "cumprod", _wrap_reduce_scan),
)

# What the wrappers use from the interpreter module; without it nothing is patched.
_REQUIRED = ("TensorHandle", "tl")


def _patched_attributes():
    """(owner, name) of every interpreter attribute this module has wrapped, in this process.

    Each wrapper keeps its original as ``__wrapped__``.
    """
    try:
        import triton.runtime.interpreter as interp
    except ImportError:
        return []
    found = []
    for owner_name, name, _ in _PATCHES:
        owner = getattr(interp, owner_name, None)
        if getattr(getattr(owner, name, None), _PATCH_MARK, False):
            found.append((owner, name))
    return found


def enable_bf16_arithmetic() -> None:
    """Make the Triton interpreter compute bf16 operations the way a GPU does.

    Idempotent.  Entry points the installed triton lacks are left alone.
    """
    try:
        import triton.runtime.interpreter as interp
    except ImportError:
        return
    if not all(hasattr(interp, name) for name in _REQUIRED):
        return
    for owner_name, name, make_wrapper in _PATCHES:
        owner = getattr(interp, owner_name, None)
        original = getattr(owner, name, None)
        if not callable(original) or getattr(original, _PATCH_MARK, False):
            continue
        wrapper = functools.wraps(original)(make_wrapper(original, interp))
        setattr(wrapper, _PATCH_MARK, True)
        setattr(owner, name, wrapper)


# --- self-check ---------------------------------------------------------------

# Exact bf16 values.  Products of x and w need rounding (some are exact ties, so
# round-half-up or truncation would be caught); negatives catch max on raw bits;
# magnitudes keep every float32 partial sum exact, so the sum's order cannot
# matter; exp(x) lands far from a bf16 rounding boundary, so a float32-ulp
# difference between NumPy's and torch's exp cannot show.
_CHECK_X = (1.0078125, -1.0078125, 1.3984375, -2.765625, 0.59765625, -0.3671875, 3.21875, 1.9453125)
_CHECK_W = (1.5, 1.5, -1.2421875, 0.8984375, -3.046875, 2.171875, -0.6953125, 1.7265625)


def _run_selfcheck() -> bool:
    import torch
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    def selfcheck_kernel(X, W, PRODUCT, PRODUCT_PLUS_X, EXP, MAX, SUM, ARGMAX, N: tl.constexpr):
        offsets = tl.arange(0, N)
        x = tl.load(X + offsets)
        w = tl.load(W + offsets)
        product = x * w
        tl.store(PRODUCT + offsets, product)
        tl.store(PRODUCT_PLUS_X + offsets, product + x)
        tl.store(EXP + offsets, tl.exp(x.to(tl.float32)).to(tl.bfloat16))
        tl.store(MAX + offsets, tl.maximum(x, w))
        tl.store(SUM, tl.sum(product, axis=0))
        tl.store(ARGMAX, tl.max(product, axis=0, return_indices=True)[1])

    # The interpreter copies its own module namespace into a kernel's globals;
    # private globals keep that out of this module.
    private = types.FunctionType(selfcheck_kernel.__code__, {"tl": tl}, selfcheck_kernel.__name__, None,
                                 selfcheck_kernel.__closure__)
    kernel = InterpretedFunction(private)

    x = torch.tensor(_CHECK_X, dtype=torch.bfloat16)
    w = torch.tensor(_CHECK_W, dtype=torch.bfloat16)
    n = x.numel()
    got = {name: torch.full((n, ), float("nan"), dtype=torch.bfloat16) for name in ("mul", "add", "exp", "max")}
    got_sum = torch.full((1, ), float("nan"), dtype=torch.bfloat16)
    got_argmax = torch.full((1, ), -1, dtype=torch.int32)
    kernel[(1, )](x, w, got["mul"], got["add"], got["exp"], got["max"], got_sum, got_argmax, N=n)

    product = x * w
    expected = {"mul": product, "add": product + x, "exp": torch.exp(x.float()).bfloat16(),
                "max": torch.maximum(x, w)}
    def same_bits(a, b):
        return torch.equal(a.view(torch.int16), b.view(torch.int16))

    return (all(same_bits(got[name], expected[name]) for name in expected)
            and same_bits(got_sum, product.sum().reshape(1))
            and int(got_argmax) == int(torch.argmax(product)))


@functools.cache
def bf16_arithmetic_is_exact() -> bool:
    """Whether the interpreter, after enable_bf16_arithmetic(), computes bf16 bit for bit like torch.

    Enables the patch first (idempotent), so the answer is about the patched
    interpreter.  False also when the check cannot run at all.  Cached.
    """
    enable_bf16_arithmetic()
    try:
        return _run_selfcheck()
    except Exception:  # an interpreter that cannot even run the check is not exact
        return False


# ---------------------------------------------------------------------------------------------
# Autotuning


def enable_autotuning() -> None:
    """Make ``@triton.autotune`` with several configs run under the interpreter.

    The stock ``Autotuner`` times each config with the active driver's benchmarker; under
    ``TRITON_INTERPRET=1`` there is no driver ("0 active drivers"), so every autotuned kernel with
    more than one config raised on its first call, and a CPU run would blame the kernel for the
    interpreter's gap. Timing interpreted programs would mean nothing anyway, so the patched
    ``Autotuner._bench`` runs nothing and returns a pseudo-time, a stable hash (CRC-32) of the
    autotuning key and the config: each key (shapes, dtypes) takes one config, different keys take
    different ones -- across a fuzz run every config's results are checked -- and the same case
    always takes the same config, so the determinism check still holds. Conflicting meta-parameters
    raise ValueError as the stock one does. Idempotent; a triton without the Autotuner internals
    this relies on is left alone.
    """
    Autotuner, stock = _unpatched_autotuner()
    if Autotuner is None:
        return

    def _bench(self, *args, config, **meta):
        conflicts = meta.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(conflicts)}."
                             " Make sure that you don't re-define auto-tuned symbols.")
        pseudo_time = _pseudo_time(self, args, meta, config)
        return [pseudo_time, pseudo_time, pseudo_time]

    setattr(_bench, _PATCH_MARK, True)
    Autotuner._tritonfuzz_stock_bench = stock  # kept for tests/suite/test_interpreter.py's twin
    Autotuner._bench = _bench


def _unpatched_autotuner():
    """(Autotuner, its stock _bench), or (None, None) when there is none or it is patched already."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return None, None
    stock = getattr(Autotuner, "_bench", None)
    if stock is None or getattr(stock, _PATCH_MARK, False):
        return None, None
    return Autotuner, stock


def _pseudo_time(tuner, args, meta, config) -> float:
    """A stable stand-in for a config's time: a hash of the autotuning key and the config."""
    return _pseudo_time_named(tuner, {**dict(zip(tuner.arg_names, args)), **meta}, config)


def _pseudo_time_named(tuner, named: dict, config) -> float:
    key = [named[k] for k in tuner.keys if k in named] + [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return zlib.crc32(repr((key, str(config))).encode()) / 2**32


# Whether a GPU autotuner runs every config of a new key (the judge's own cases: on the judge's
# machine the stock tuner runs each of them, out-of-bounds configs included) or only the key's
# pick (drawn cases). Set around each kernel call by oracles.harness.sanitizers.run_kernel.
_EVERY_CONFIG = [False]
# What a config the tuner never ran reports: later than every pseudo-time (those are in [0, 1)).
_NOT_RUN = 2.0


@contextlib.contextmanager
def autotune_every_config(every: bool):
    """Within the block, a GPU autotuner meeting a new key runs every config (True) or only the
    key's pick (False); see sample_autotuning_on_gpu."""
    before, _EVERY_CONFIG[0] = _EVERY_CONFIG[0], bool(every)
    try:
        yield
    finally:
        _EVERY_CONFIG[0] = before


def sample_autotuning_on_gpu() -> None:
    """On a GPU, ``@triton.autotune`` never times a config: a new key runs its pick, or on the
    judge's own cases every config, once.

    The stock tuner times every config of every new key (do_bench: ~100 ms and dozens of runs a
    config); a fuzzer meets a new key nearly every case, so two public autotuned kernels ran past
    240 s of a 30 s gate with no verdict, the tuner's runs unchecked. Even run once, every config
    of every new key costs a compile each: an hc_head with three tuners of eight configs took
    14-23 s a judge case on an H200 (2026-12-01). Here:

    * the pruned configs are put in pseudo-time order (the same hash as under the interpreter);
    * on a drawn case, ``_bench`` runs the configs in that order through the stock machinery
      (pre-hooks, reset_to_zero / restore_value; a config that fails to compile or runs out of
      resources gets an infinite time) until one succeeds; the rest report a time later than any
      and are not compiled. The key's pick is the interpreter's pick, keys spread over every
      config across a fuzz run, and the same case always takes the same config (determinism);
    * on the judge's own cases (``autotune_every_config(True)``) every config runs once, as the
      stock tuner runs each on the judge's machine: each run writes into the case's guarded
      buffers, so an out-of-bounds config is caught at the judge's case even when it is not picked.

    Idempotent.
    """
    Autotuner, stock = _unpatched_autotuner()
    if Autotuner is None:
        return
    if "_tritonfuzz_stock_prune" not in vars(Autotuner):
        Autotuner._tritonfuzz_stock_prune = Autotuner.prune_configs
    stock_prune = Autotuner._tritonfuzz_stock_prune

    def prune_configs(self, kwargs, *rest, **more):
        pruned = stock_prune(self, kwargs, *rest, **more)
        named = {**getattr(self, "nargs", {}), **kwargs}
        self._tritonfuzz_picked = False  # a new key's tuning starts here
        if _EVERY_CONFIG[0] and len(pruned) > 1 and not self.__dict__.get("_tritonfuzz_precompiling"):
            _precompile(self, pruned, kwargs)
        return sorted(pruned, key=lambda config: _pseudo_time_named(self, named, config))

    def _bench(self, *args, config, **meta):
        if self.__dict__.get("_tritonfuzz_picked") and not _EVERY_CONFIG[0]:
            return [_NOT_RUN] * 3
        pseudo_time = _pseudo_time(self, args, meta, config)

        def run_once(kernel_call, quantiles=None, **_):
            kernel_call()
            return [pseudo_time] * (len(quantiles) if quantiles else 1)
        timer = self.__dict__.get("do_bench")
        self.do_bench = run_once
        try:
            timings = stock(self, *args, config=config, **meta)
        finally:
            if timer is None:
                del self.do_bench
            else:
                self.do_bench = timer
        if all(math.isfinite(t) for t in (timings if isinstance(timings, (list, tuple)) else [timings])):
            self._tritonfuzz_picked = True
        return timings

    setattr(_bench, _PATCH_MARK, True)
    setattr(prune_configs, _PATCH_MARK, True)
    Autotuner._bench = _bench
    Autotuner.prune_configs = prune_configs


def _precompile(tuner, configs, kwargs) -> None:
    """Compile every config of a new key at once (Triton's AsyncCompileMode over a thread pool),
    before the tuner runs them one by one: an hc_head with three tuners of eight configs spent
    14-23 s a judge case compiling them in turn. Best effort: a Triton without AsyncCompileMode, a
    tuned function without warmup, or a config that fails to compile leaves the tuner to compile
    (and judge) it itself, as before."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    warmup = getattr(tuner.fn, "warmup", None)
    if warmup is None:
        return
    named = {**getattr(tuner, "nargs", {}), **{k: v for k, v in kwargs.items() if k != "warmup"}}
    tuner._tritonfuzz_precompiling = True
    try:
        with ThreadPoolExecutor(max_workers=min(len(configs), os.cpu_count() or 1)) as pool, \
                AsyncCompileMode(pool, ignore_errors=True):
            for config in configs:
                try:
                    warmup(**named, **config.all_kwargs())
                except Exception:  # noqa: BLE001 -- the tuner's own run of this config will say why
                    pass
    except Exception:  # noqa: BLE001 -- best effort, see above
        pass
    finally:
        tuner._tritonfuzz_precompiling = False


# ---------------------------------------------------------------------------------------------
# Scalars used as Python ints


def enable_scalar_index() -> None:
    """Let the interpreter use a one-element scalar as a Python int (``range(pid * B, T, ...)``).

    Under the interpreter every scalar is a tensor, and ``range()`` or indexing converts it with
    ``tl.tensor.__index__``, which the interpreter sets at each launch. Triton 3.6 sets it to
    ``int(self.handle.data)``; a scalar computed from ``tl.program_id`` (``pid * BLOCK_T``)
    holds a one-element 1-D array there, and NumPy >= 2.4 refuses ``int()`` of any array with
    a dimension ("only 0-dimensional arrays can be converted to Python scalars"). With Triton 3.6
    (torch 2.11's) and a current NumPy, every kernel with such a loop failed every CPU case --
    both bundled kernels among them (seen on the H200 machine's image, 2026-11-30): the
    interpreter's gap blamed on the kernel. Triton 3.9 converts ``data.squeeze()`` instead.

    The wrapper lets the interpreter install its own ``__index__`` and then replaces it, through
    the same launch-scoped setter, by one that converts any one-element array and raises as
    before for anything larger. Idempotent; a triton without ``_patch_lang_tensor`` is left alone.
    """
    try:
        import triton.runtime.interpreter as interp
    except ImportError:
        return
    original = getattr(interp, "_patch_lang_tensor", None)
    if not callable(original) or getattr(original, _PATCH_MARK, False):
        return

    def scalar_index(self):
        data = np.asarray(self.handle.data)
        return int(data.reshape(())) if data.size == 1 else int(data)  # int(data): NumPy's own error

    @functools.wraps(original)
    def _patch_lang_tensor(tensor, *args, **kwargs):
        result = original(tensor, *args, **kwargs)
        scope = args[0] if args else None
        if hasattr(scope, "set_attr"):
            scope.set_attr(tensor, "__index__", scalar_index)  # restored with the rest after the launch
        else:
            tensor.__index__ = scalar_index
        return result

    setattr(_patch_lang_tensor, _PATCH_MARK, True)
    interp._patch_lang_tensor = _patch_lang_tensor


# ---------------------------------------------------------------------------------------------
# A launch's compiled kernel, kept and launched again


class InterpretedLaunch:
    """What ``kernel[grid](...)`` and ``kernel.warmup(...)`` return under the interpreter, in place
    of the GPU's ``CompiledKernel``: indexed with a grid it gives a runner that launches the same
    kernel again, ``handle[grid](*args)``.

    Kernels that skip Triton's launch overhead keep that handle and launch through it later (the
    organiser's Ascend gate_topk caches it on the kernel object, 2026-12-06). The interpreter's
    launch returns None, so the second call raised ``TypeError: 'NoneType' object is not
    subscriptable`` -- a `contract` failure inside the judge's domain that was the interpreter's,
    not the kernel's. As on a GPU, the runner takes either every parameter in order (Triton >= 3.3)
    or only the non-constexpr ones (older Triton, whose compiled kernel had its constexprs baked
    in); constexprs and launch options left out are the ones the handle was made with."""

    def __init__(self, kernel, launched: dict):
        self.kernel = kernel
        self.launched = launched

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            names = self.kernel.arg_names
            if len(args) < len(names):
                names = [n for n in names if n not in _constexpr_names(self.kernel.fn)]
            if len(args) > len(names):
                raise TypeError(f"{self.kernel.__name__}: the compiled kernel takes {len(names)} arguments, got {len(args)}")
            given = dict(zip(names, args))
            kept = {name: value for name, value in self.launched.items() if name not in given}
            self.kernel.run(grid=tuple(grid), warmup=False, **given, **kept)
        return runner


def _constexpr_names(fn) -> set:
    import inspect
    import triton.language as tl
    return {p.name for p in inspect.signature(fn).parameters.values()
            if p.annotation is tl.constexpr or p.annotation in ("tl.constexpr", "constexpr")}


def enable_compiled_handles() -> None:
    """Interpreted launches and warmups return an ``InterpretedLaunch`` instead of None. Idempotent;
    a triton without ``InterpretedFunction.run`` is left alone."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return
    original = getattr(InterpretedFunction, "run", None)
    if not callable(original) or getattr(original, _PATCH_MARK, False):
        return

    @functools.wraps(original)
    def run(self, *args, grid, warmup, **kwargs):
        result = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        if result is not None:
            return result
        return InterpretedLaunch(self, {**dict(zip(self.arg_names, args)), **kwargs})

    setattr(run, _PATCH_MARK, True)
    InterpretedFunction.run = run


# ---------------------------------------------------------------------------------------------
# The language's builtins, found once


def _members_signature(pkg) -> tuple:
    """Changes when an attribute is added to or removed from `pkg` or (for a class) its bases."""
    owners = pkg.__mro__ if isinstance(pkg, type) else (pkg,)
    return tuple(len(vars(owner)) for owner in owners if hasattr(owner, "__dict__"))


def enable_cached_builtins() -> None:
    """Each launch, and each call of one @triton.jit function from another, makes the interpreter
    wrap every builtin of triton.language, tl.math and tl.tensor (``_patch_builtin``), finding them
    with ``inspect.getmembers``, which reads and sorts every attribute each time (a quarter of an
    interpreted kernel's time: tests/results/2026-12-06-session19.md). The names of the builtins
    are kept per package instead, found again whenever the package gains or loses an
    attribute; each is still read live and wrapped only if it is a builtin now, as the original
    does (a nested call finds them already wrapped, and wraps nothing). Idempotent; a triton whose
    ``_patch_builtin``/``_patch_attr`` do not take (pkg, ...)/(obj, name, member, ...) alike is left
    alone."""
    import inspect
    try:
        import triton.language as tl
        import triton.runtime.interpreter as interp
    except ImportError:
        return
    original, patch_attr = getattr(interp, "_patch_builtin", None), getattr(interp, "_patch_attr", None)
    if not callable(original) or not callable(patch_attr) or getattr(original, _PATCH_MARK, False):
        return
    try:
        extra = len(inspect.signature(original).parameters) - 1
        if len(inspect.signature(patch_attr).parameters) != 3 + extra:
            return
    except (TypeError, ValueError):
        return
    is_builtin = tl.core.is_builtin
    # (id(pkg), its signature) -> (pkg, its builtins' names). A package has a few states: as
    # imported, and inside a launch (where the launch added attributes of its own).
    names: dict = {}

    @functools.wraps(original)
    def _patch_builtin(pkg, *args):
        key = (id(pkg), _members_signature(pkg))
        kept = names.get(key)
        if kept is None or kept[0] is not pkg:
            kept = names[key] = (pkg, tuple(n for n, m in inspect.getmembers(pkg) if is_builtin(m)))
        for name in kept[1]:
            member = getattr(pkg, name, None)
            if is_builtin(member):
                interp._patch_attr(pkg, name, member, *args)

    setattr(_patch_builtin, _PATCH_MARK, True)
    interp._patch_builtin = _patch_builtin


def skip_inert_overflow_checks() -> None:
    """Triton's semantic checks every int32 add, sub and mul for overflow: it recomputes the op in
    int64 and compares it with the int32 range, and its only effect is a ``device_assert``, which
    does nothing unless the options' ``debug`` is on. The interpreter's options never turn it on.
    So every interpreted integer op paid for a check that could not fire (about a sixth of the
    mutant tests' time: tests/results/2026-12-06-session19.md). Each op still wraps as on a GPU.
    The interpreter's own semantic instance skips the check while ``debug`` is off, and runs it as
    before when it is on; the GPU compiler's semantic is untouched. Left alone where the installed
    Triton's check or device_assert reads differently. Idempotent."""
    import inspect
    import types
    try:
        import triton.runtime.interpreter as interp
        from triton.language.semantic import TritonSemantic
    except ImportError:
        return
    semantic = getattr(interp, "interpreter_semantic", None)
    original = getattr(TritonSemantic, "binary_op_sanitize_overflow_impl", None)
    if semantic is None or original is None or getattr(semantic.binary_op_sanitize_overflow_impl, _PATCH_MARK, False):
        return
    try:
        inert_without_debug = ("if not self.builder.options.debug:\n            return"
                               in inspect.getsource(TritonSemantic.device_assert))
        only_asserts = "self.device_assert(" in inspect.getsource(original)
    except (OSError, TypeError):
        return
    if not (inert_without_debug and only_asserts):
        return

    @functools.wraps(original)
    def binary_op_sanitize_overflow_impl(self, lhs, rhs, binary_op):
        if not self.builder.options.debug:
            return None
        return original(self, lhs, rhs, binary_op)

    setattr(binary_op_sanitize_overflow_impl, _PATCH_MARK, True)
    semantic.binary_op_sanitize_overflow_impl = types.MethodType(binary_op_sanitize_overflow_impl, semantic)


def patch_interpreter() -> None:
    """Every fix of this module: bf16 arithmetic, autotuning, scalars as ints, kept launch handles,
    builtins found once, inert overflow checks skipped.
    Call it after setting TRITON_INTERPRET=1 and before the first launch. Idempotent."""
    enable_bf16_arithmetic()
    enable_autotuning()
    enable_scalar_index()
    enable_compiled_handles()
    enable_cached_builtins()
    skip_inert_overflow_checks()
