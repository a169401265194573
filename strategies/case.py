"""The Case: the unit that is generated, run, judged, minimized, saved and replayed.

A Case is a frozen record of one call of an op: its named inputs in call order (tensors, ints,
floats, strings, None), the features that produced it ("nan", "tail", "ties", ...) for statistics, and a
short label. Layout facts travel inside the tensors themselves: a strided view or a storage
offset is kept as such, and serialization records shape, strides, storage offset and the raw
bytes of the storage span the view can reach (the gaps included, so that a kernel that ignores
strides reads the same poison after a round trip).

Serialization is JSON with base64 raw bytes and, for small tensors, a readable preview. Floats
are stored as float.hex, so the round trip is bit-exact; loading never executes anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch

FORMAT_VERSION = 1
PREVIEW_MAX_ELEMENTS = 64
# A loaded tensor is materialized (copied into guard bands, upcast by the oracle): its logical
# size, whatever its strides, is bounded before anything is allocated. A stride-0 view of one
# stored element can claim billions of elements: such a file once took a worker to 21.7 GB.
MAX_TENSOR_ELEMENTS = 2 ** 27
# All of a loaded case's tensors together, materialized: judging a case takes about 20 times its
# bytes (guarded copies, the reference, the float64 oracle and its bounds: a 64 MiB hc_head case
# peaked 1.4 GB above the process's baseline), so 128 MiB stays inside the 4 GiB a test process
# may hold (oracles/harness/memory.py). The judge's largest case a fixture file can hold (512 MB of
# base64), hc_head at T = 2048, is 112 MiB.
MAX_CASE_BYTES = 128 * 1024 * 1024

DTYPES_BY_NAME = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES_BY_NAME.items()}


# The feature of a case made of a few rows of an input beyond 2^31 elements (oracles/harness/sampled_rows.py):
# the bug it shows needs the whole input, which the case does not hold.
BEYOND_INT32 = "beyond-int32"


def beyond_int32_violation(case) -> list[str]:
    """The judge-domain violation of such a case, whatever its rows are (the judge's T stops at
    65536 tokens, below 2^31 elements): listed first, it names the bug's input class."""
    return ["elements=beyond 2^31 (rows of a larger input)"] if BEYOND_INT32 in case.features else []


class LazyInputs(Mapping):
    """A case's inputs, built on first read (all at once, then kept), with each tensor's element
    count known before: the judge's bench-size hc_head cases (117 million elements, 2.5 s on a
    CPU) were built by every process that collected them, a gate's worker and each of the suite's,
    and on the CPU interpreter they are only skipped (OpSpec.runs_on_cpu reads the counts)."""

    def __init__(self, build, numels: Mapping[str, int]):
        self._build, self._numels, self._inputs = build, dict(numels), None

    def _built(self) -> dict:
        if self._inputs is None:
            self._inputs = dict(self._build())
        return self._inputs

    def numel(self, name: str) -> int:
        """Elements of tensor input `name`, without building the inputs."""
        return self._numels[name] if self._inputs is None else self._inputs[name].numel()

    def __getitem__(self, name: str):
        return self._built()[name]

    def __iter__(self):
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())


def input_numel(case, name: str) -> int:
    """Elements of case input `name`, without building lazy inputs (LazyInputs)."""
    inputs = case.inputs
    return inputs.numel(name) if isinstance(inputs, LazyInputs) else inputs[name].numel()


class CaseFormatError(ValueError):
    """A serialized case that cannot be read back: says which field and what was expected."""


@dataclass(frozen=True, repr=False)
class Case:
    op: str
    inputs: Mapping[str, Any]
    features: frozenset = field(default_factory=frozenset)
    label: str = ""
    # Tensor inputs the caller keeps on the host whatever the device, as the judge's
    # `torch.tensor(gs)` global_scale: a kernel must accept a CPU 0-dim tensor there.
    host_inputs: frozenset = field(default_factory=frozenset)

    def __repr__(self) -> str:
        label = f" {self.label!r}" if self.label else ""
        return f"Case({self.op}{label}: {self.summary()}; features={sorted(self.features)})"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis's "Draw 1 (case): ..." line
        printer.text(repr(self))

    def to_json(self) -> dict:
        """What Hypothesis's observability (and so HypoFuzz) records of a drawn case: its summary,
        not its tensors. Left to itself it pretty-prints every tensor: under HypoFuzz's coverage
        tracing a GPU case's repr took minutes (an H200 run of the engine's test fuzzed 3 inputs in
        136 s). The fixture format is case_to_json."""
        return {"op": self.op, "label": self.label, "summary": self.summary(), "features": sorted(self.features)}

    def with_inputs(self, **changes: Any) -> "Case":
        return replace(self, inputs={**self.inputs, **changes})

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.inputs.items() if isinstance(v, torch.Tensor)}

    def nonfinite_inputs(self) -> tuple[str, ...]:
        """The inputs holding NaN or +-inf (a floating tensor with any such element, a float
        scalar that is one), in argument order. Every judge's inputs are finite (torch.randn tensors,
        constants): a case with one is a case no judge run meets."""
        def nonfinite(value) -> bool:
            if isinstance(value, torch.Tensor):
                return (value.is_floating_point() or value.is_complex()) and value.numel() > 0 \
                    and not bool(torch.isfinite(value).all())
            return isinstance(value, float) and not math.isfinite(value)
        return tuple(name for name, value in self.inputs.items() if nonfinite(value))

    def finite_twin(self) -> "Case | None":
        """This case with every NaN and +-inf element of its inputs replaced by 0, each tensor
        keeping its shape, strides and storage offset (the gaps of a strided view are not its
        elements and stay as they are): what a bug shows on inputs a judge can send. None when a
        scalar input is NaN or inf (no value stands in for an eps) or an input's elements share
        memory (a broadcast view cannot be written element by element)."""
        names = self.nonfinite_inputs()
        if any(not isinstance(self.inputs[name], torch.Tensor) for name in names):
            return None
        changes = {}
        for name in names:
            t = self.inputs[name]
            twin = copy_preserving_layout(t, t.device)
            try:
                twin.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
            except RuntimeError:  # "more than one element of the written-to tensor refers to a single memory location"
                return None
            changes[name] = twin
        return self.with_inputs(**changes)

    def device_of(self, name: str, device: str | torch.device) -> str | torch.device:
        """Where input `name` goes when the case runs on `device` (host inputs stay on the CPU)."""
        return "cpu" if name in self.host_inputs else device

    def to(self, device: str | torch.device) -> dict[str, Any]:
        """Fresh copies of the inputs on `device` (host inputs on the CPU), each with the same
        strides and storage offset."""
        return {k: copy_preserving_layout(v, self.device_of(k, device)) if isinstance(v, torch.Tensor) else v
                for k, v in self.inputs.items()}

    def on(self, device: str | torch.device) -> "Case":
        """This case with its inputs on `device` (host inputs on the CPU), layouts kept: itself
        when they already are. run_case judges a case where it runs: on a GPU the float64 oracle
        and the checks of a bulk-row case (millions of values) took 0.2-3 s a case on the host
        against the milliseconds they take on the device (H200, 2026-12-04)."""
        if all(_same_device(t.device, torch.device(self.device_of(name, device))) for name, t in self.tensors().items()):
            return self
        return replace(self, inputs=self.to(device))

    def summary(self) -> str:
        """One line naming every argument: shapes, dtypes, layouts and scalars."""
        parts = []
        for name, value in self.inputs.items():
            if isinstance(value, torch.Tensor):
                layout = "" if value.is_contiguous() and value.storage_offset() == 0 else (
                    f" stride={tuple(value.stride())} offset={value.storage_offset()}")
                shape = "x".join(map(str, value.shape)) or "0-dim"
                parts.append(f"{name}=[{shape}] {DTYPE_NAMES.get(value.dtype, value.dtype)}{layout}")
            else:
                parts.append(f"{name}={value!r}")
        return ", ".join(parts)

    def content_hash(self) -> str:
        """Identity of the case: op and exact inputs (not features or label)."""
        identity = {"op": self.op, "inputs": _inputs_to_json(self.inputs, preview=False)}
        if self.host_inputs:  # only when set, so that older fixtures keep their names
            identity["host_inputs"] = sorted(self.host_inputs)
        payload = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _same_device(have: torch.device, want: torch.device) -> bool:
    """`have` is `want` ("cuda" means the current device: any index will do for one GPU a process)."""
    return have.type == want.type and (want.index is None or have.index == want.index)


def storage_extent(t: torch.Tensor) -> int:
    """Elements of storage from index 0 that the view can reach (0 for an empty tensor)."""
    if t.numel() == 0:
        return t.storage_offset()
    return t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def storage_span(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of the storage elements [0, storage_extent) underlying `t`."""
    return t.as_strided((storage_extent(t),), (1,), 0)


def copy_preserving_layout(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """A copy of `t` on `device` with the same shape, strides and storage offset (gaps copied too)."""
    span = storage_span(t).detach().clone().to(device)
    return span.as_strided(t.shape, t.stride(), t.storage_offset())


def relayout_like(small: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
    """`small`'s values laid out the way `like` is: the same order of dimensions in memory, the
    same gap factor between each dimension and the next inner one, the same storage offset, the
    gaps filled as the strategies fill them (NaN for floats, so a kernel that reads them shows
    it). None when `like` is contiguous or broadcast (a stride 0 over several elements).
    The minimizer uses it so that a case shrunk for a layout bug keeps its layout. Not
    strategies.values.place: that draws a named Layout, and a case being minimized (or replayed
    from a fixture) has only its strides."""
    if small.dim() != like.dim() or (like.is_contiguous() and like.storage_offset() == 0):
        return None
    if any(st == 0 and n > 1 for st, n in zip(like.stride(), like.shape)):
        return None
    order = sorted(range(like.dim()), key=lambda d: (like.stride(d), -d))  # innermost first
    strides = [0] * like.dim()
    like_span, new_span = 1, 1  # elements one step of the next outer dimension must clear
    for d in order:
        gap = max(1, -(-like.stride(d) // like_span)) if like.size(d) > 1 else 1
        strides[d] = gap * new_span
        if like.size(d) > 1:
            like_span = like.stride(d) * like.size(d)
        new_span = strides[d] * max(small.size(d), 1)
    extent = like.storage_offset() + sum((n - 1) * st for n, st in zip(small.shape, strides)) + 1
    fill = float("nan") if small.is_floating_point() else 0
    out = torch.full((max(extent, 1),), fill, dtype=small.dtype, device=small.device).as_strided(
        small.shape, strides, like.storage_offset())
    out.copy_(small)
    return out


# ---------------------------------------------------------------------------------------------
# JSON (de)serialization


def float_to_json(value: float) -> dict:
    return {"float": float(value).hex(), "value": value if math.isfinite(value) else repr(value)}


def tensor_to_json(t: torch.Tensor, *, preview: bool = True) -> dict:
    # The storage span is taken where the tensor lives, then copied: `.cpu()` of a CUDA view with
    # gaps or an offset returns a compacted copy, whose bytes did not match the strides and offset
    # written beside them (every GPU fixture of a strided case was unreadable or shifted;
    # "view needs 4333823 storage elements, file has 2166912", H100 2026-12-06).
    span = storage_span(t.detach()).contiguous().cpu()
    raw = span.view(torch.uint8).numpy().tobytes() if span.numel() else b""
    out = {
        "dtype": DTYPE_NAMES[t.dtype],
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "storage_offset": t.storage_offset(),
        "storage_elements": span.numel(),
        "bytes_b64": base64.b64encode(raw).decode("ascii"),
    }
    if preview and t.numel() <= PREVIEW_MAX_ELEMENTS:
        out["preview"] = _readable(t)
    return out


def _readable(t: torch.Tensor):
    """Nested lists of numbers; non-finite values as strings so the file stays strict JSON."""
    values = t.detach().cpu()
    if values.is_floating_point():
        values = values.double()

    def fmt(v):  # 9 significant digits tell float32 values apart and read as the value drawn
        return v if not isinstance(v, float) else float(f"{v:.9g}") if math.isfinite(v) else repr(v)

    def walk(x):
        return [walk(e) for e in x] if isinstance(x, list) else fmt(x)

    return walk(values.tolist())


def tensor_from_json(obj: Mapping, *, where: str) -> torch.Tensor:
    try:
        dtype = DTYPES_BY_NAME[obj["dtype"]]
        shape, stride = [int(n) for n in obj["shape"]], [int(s) for s in obj["stride"]]
        offset, elements = int(obj["storage_offset"]), int(obj["storage_elements"])
        raw = base64.b64decode(obj["bytes_b64"], validate=True)
    except KeyError as e:
        raise CaseFormatError(f"{where}: missing field {e.args[0]!r} (expected dtype, shape, stride, "
                              f"storage_offset, storage_elements, bytes_b64)") from None
    except (ValueError, TypeError, AttributeError) as e:
        raise CaseFormatError(f"{where}: malformed tensor field: {e}") from None
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(shape) != len(stride) or any(n < 0 for n in shape) or any(s < 0 for s in stride):
        raise CaseFormatError(f"{where}: shape {shape} and stride {stride} do not describe a view")
    logical = math.prod(shape)
    if logical > MAX_TENSOR_ELEMENTS or elements > MAX_TENSOR_ELEMENTS:
        raise CaseFormatError(f"{where}: shape {shape} ({logical} elements, {elements} stored) is over the "
                              f"{MAX_TENSOR_ELEMENTS} elements a fixture tensor may have once materialized")
    if len(raw) != elements * itemsize:
        raise CaseFormatError(f"{where}: field 'bytes_b64' holds {len(raw)} bytes, expected storage_elements "
                              f"{elements} of {obj['dtype']} = {elements * itemsize} bytes")
    span = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
    needed = offset + (1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0)
    if needed > elements:
        raise CaseFormatError(f"{where}: view needs {needed} storage elements, file has {elements}")
    return span.as_strided(shape, stride, offset)


def _inputs_to_json(inputs: Mapping[str, Any], *, preview: bool) -> dict:
    out = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            out[name] = {"tensor": tensor_to_json(value, preview=preview)}
        elif isinstance(value, (bool, str)) or value is None or isinstance(value, int):
            out[name] = {"int": value} if isinstance(value, int) and not isinstance(value, bool) else {"value": value}
        elif isinstance(value, float):
            out[name] = float_to_json(value)
        else:
            raise TypeError(f"input {name!r}: cannot serialize {type(value).__name__}")
    return out


def _input_from_json(name: str, obj: Mapping, *, where: str = "case") -> Any:
    where = f"{where}: input {name!r}"
    if not isinstance(obj, Mapping):
        raise CaseFormatError(f"{where}: expected an object, got {type(obj).__name__}")
    if "tensor" in obj:
        if not isinstance(obj["tensor"], Mapping):
            raise CaseFormatError(f"{where}: 'tensor' must be an object, got {type(obj['tensor']).__name__}")
        return tensor_from_json(obj["tensor"], where=where)
    if "float" in obj:
        try:
            return float.fromhex(obj["float"])
        except (TypeError, ValueError):
            raise CaseFormatError(f"{where}: 'float' must be a float.hex string, got {obj['float']!r}") from None
    if "int" in obj:
        if not isinstance(obj["int"], int):
            raise CaseFormatError(f"{where}: 'int' must be an integer, got {obj['int']!r}")
        return obj["int"]
    if "value" in obj:
        return obj["value"]
    raise CaseFormatError(f"{where}: expected one of 'tensor', 'float', 'int', 'value'")


def case_to_json(case: Case) -> dict:
    return {
        "format": FORMAT_VERSION,
        "op": case.op,
        "label": case.label,
        "features": sorted(case.features),
        "host_inputs": sorted(case.host_inputs),
        "inputs": _inputs_to_json(case.inputs, preview=True),
    }


def case_from_json(obj: Any, *, where: str = "case") -> Case:
    if not isinstance(obj, Mapping):
        raise CaseFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if obj.get("format") != FORMAT_VERSION:
        raise CaseFormatError(f"{where}: format {obj.get('format')!r}, this tritonfuzz reads {FORMAT_VERSION}")
    for key in ("op", "inputs"):
        if key not in obj:
            raise CaseFormatError(f"{where}: missing field {key!r}")
    inputs = obj["inputs"]
    if not isinstance(inputs, Mapping):
        raise CaseFormatError(f"{where}: 'inputs' must be an object")
    values, total = {}, 0
    for name, value in inputs.items():
        values[name] = _input_from_json(name, value, where=where)
        if isinstance(values[name], torch.Tensor):  # a view of the stored bytes: nothing materialized yet
            t = values[name]
            total += max(t.numel(), t.untyped_storage().nbytes() // t.element_size()) * t.element_size()
            if total > MAX_CASE_BYTES:
                raise CaseFormatError(f"{where}: the case's tensors hold {total} bytes once materialized by input "
                                      f"{name!r}; a case may hold at most {MAX_CASE_BYTES} in all")
    return Case(
        op=str(obj["op"]),
        inputs=values,
        features=frozenset(obj.get("features", ())),
        label=str(obj.get("label", "")),
        host_inputs=frozenset(obj.get("host_inputs", ())),
    )
