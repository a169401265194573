"""Static gate rules: an AST scan of a submitted kernel module that never imports it.

The competition judge (its rules: each op's contract in oracles/ops/<op>.py) disqualifies a
submission whose core computation is not a Triton kernel -- no try/except, no device checks, no
branch that falls back to torch -- and its security scan rejects dict/set globals. This module
reads the submitted source with :mod:`ast` alone: the module is never imported, compiled to
bytecode or run, so a broken or hostile submission cannot act during the scan.

Severities:

- ``error``: the judge would reject the file or the rule it enforces is broken; the gate fails.
- ``warning``: legal but worth a look (try/finally, a list global, a torch cast or copy in the
  wrapper, a torch function on neither list).
- ``info``: a portability risk on one of the judge's non-NVIDIA backends (README "CPU vs GPU, and portability"), with
  ``backends`` naming who is at risk. Nothing local can test these; a note is all we can honestly say.

Every rule id, its severity and what it means are listed in :data:`RULES`.

Usage::

    findings = scan_file("hc_head.py", entry="hc_head")  # a .py, or the competition .zip
    print(format_findings(findings))
    gate_passes = not has_errors(findings)

The scan is syntactic. Names are resolved through the module's own imports
(``import torch.nn.functional as F`` makes ``F.softmax`` mean ``torch.nn.functional.softmax``),
never through values, so a receiver's type is unknown. Known limits that follow:

- missed: tensor arithmetic by operators other than ``@`` (``x * w``, ``x[mask] = 0``: ``*`` is
  also integer arithmetic); torch reached through ``getattr``, strings, ``self.attr`` or another
  file of the submission; device checks hidden behind more than names and return values;
  vector int64 not derived from ``tl.arange``/``tl.zeros``/``tl.full`` in the same kernel.
- over-reported: a list's bare ``.sort()`` and other tensor method names called on non-tensors
  (``.max()``, ``.sum()``, ``.to()``) on the entry path; any condition comparing to a vendor
  string such as ``"cpu"``; device comparisons other than ``a.device == b.device``; a torch
  function named ``reference`` kept for self-tests (it is an entry name, see REFERENCE_ENTRY).
- torch work at import time (module level, ``if __name__ == "__main__":``) is not on the entry
  path; try/except, device checks and dynamic code there are still reported.
"""

from __future__ import annotations

import ast
import io
import tokenize
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ("RULES", "Finding", "format_findings", "has_errors", "scan_file", "scan_source")

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)  # also the order in which findings on one column sort

# (rule id, severity, what it means). mutable-global, dynamic-code and zip-layout have a warning form too.
RULES = (
    ("syntax-error", ERROR, "the file does not parse (or nests too deeply to scan); nothing else was checked"),
    ("try-except", ERROR, "try/except or contextlib.suppress anywhere: a fallback hides a kernel failure"),
    ("try-finally", WARNING, "try/finally without except"),
    ("device-branch", ERROR, "a condition inspects the device, vendor, platform or environment"),
    ("torch-compute", ERROR, "torch computes on the entry path instead of a Triton kernel"),
    ("numpy-compute", WARNING, "a numpy compute function on the entry path (fine on shapes, a fallback on data)"),
    ("torch-cast", WARNING, "a dtype conversion in torch on the entry path"),
    ("torch-copy", WARNING, "a copy without arithmetic (cat, stack, clone, ...) on the entry path"),
    ("torch-unlisted", WARNING, "a torch function on the entry path that is on neither list"),
    ("entry-missing", WARNING, "no entry function, so torch-compute could not be checked"),
    ("mutable-global", ERROR, "a dict/set global or a functools cache (warning: a list global, `global`)"),
    ("jit-global", ERROR, "a @triton.jit function reads a plain-value module global (not tl.constexpr(...))"),
    ("dynamic-code", ERROR, "eval/exec/compile/__import__, importlib, subprocess, ctypes, file writes"),
    ("monkeypatch", ERROR, "assigning attributes of imported modules, os.environ, sys.modules, sys.path"),
    ("zip-layout", ERROR, "a submission .zip without <op>.py (warning: other members)"),
    ("tie-break-fast", WARNING, "an index reduction with tie_break_left=False: on ties, threads may disagree (NVIDIA, measured)"),
    ("portability-sort", INFO, "tl.topk/sort/argmax/argmin (kunlunxin)"),
    ("portability-scan", INFO, "tl.cumsum/associative_scan/atomic_* (kunlunxin)"),
    ("portability-erf", INFO, "tl.math.erf (kunlunxin)"),
    ("portability-dot-tf32", INFO, "tl.dot without input_precision (iluvatar runs fp32 as tf32)"),
    ("portability-int64", INFO, "vector int64 arithmetic (enflame, ascend)"),
    ("portability-2d-grid", INFO, "a launch grid of two or more dimensions (kunlunxin)"),
    ("portability-2d-tile", INFO, "a 1-D grid over a kernel with 2-D tiles (metax)"),
    ("portability-grid-stride", INFO, "an input-sized grid over a kernel without a grid-stride loop (enflame, ascend)"),
    ("portability-num-warps", INFO, "num_warps > 4 (enflame)"),
    ("portability-num-stages", INFO, "num_stages > 2 (ascend)"),
)

# The competition calls some entries by this name (oracles/ops/sigmoid_gate_topk_renorm.py), so a
# function of this name is an entry too, beside the op's own name: the judge may call either.
REFERENCE_ENTRY = "reference"

# --- torch-compute: what the entry path may and may not call -------------------------------------
# The entry path is the entry function and every module-level function or class it names,
# transitively, minus @triton.jit functions (device code; torch cannot run there anyway).

# Functions and tensor methods that compute. On the entry path each one is torch doing the op's
# work, which the judge disqualifies. Generous on purpose: a wrapper needs none of them to validate,
# allocate and launch. Matched on the last name, so torch.X, torch.Tensor.X, torch.ops.aten.X
# (.default), x.X() and the in-place x.X_() all count; numpy.X with these names is a warning.
TORCH_COMPUTE = frozenset({
    # selection and ordering: the top-k task's whole point
    "topk", "sort", "argsort", "msort", "kthvalue", "median", "mode", "unique",
    "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "maximum", "minimum", "fmax", "fmin",
    # activations and normalizations
    "sigmoid", "softmax", "log_softmax", "logsigmoid", "silu", "gelu", "relu", "tanh", "softplus",
    "layer_norm", "rms_norm", "group_norm", "batch_norm", "normalize", "norm", "renorm",
    # linear algebra
    "linear", "matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "tensordot", "einsum",
    "addmm", "addbmm", "baddbmm", "addmv",
    # reductions and scans
    "sum", "nansum", "mean", "nanmean", "prod", "std", "var", "std_mean", "var_mean", "logsumexp",
    "cumsum", "cumprod", "cummax", "cummin", "all", "any", "count_nonzero",
    # elementwise arithmetic and math
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
    "remainder", "fmod", "pow", "square", "neg", "negative", "abs", "sign", "reciprocal", "exp",
    "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "erf", "erfc", "sin", "cos",
    "floor", "ceil", "round", "trunc", "clamp", "clip", "clamp_min", "clamp_max", "lerp", "addcmul",
    "addcdiv", "nan_to_num",
    # comparisons and masking
    "where", "masked_fill", "masked_scatter", "masked_select", "eq", "ne", "lt", "le", "gt", "ge",
    "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_not", "logical_xor",
    # gathers and scatters: in a routing op these are the computation
    "gather", "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add", "index_copy",
    "index_put", "take", "take_along_dim",
})

# Namespaces that hold nothing but compute: every F.* functional op is an error.
TORCH_COMPUTE_NAMESPACES = ("torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch.sparse")

# Handing a torch function to a compiler is still a torch fallback, with generated kernels.
TORCH_CODEGEN = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "torch._dynamo.optimize"})

# Method names that ordinary Python objects have too (set.add, re.Pattern.sub, Logger.log): on a
# receiver of unknown type they prove nothing, so only their torch.X spelling is flagged.
# list.sort is told apart by its key=/reverse= arguments instead (see _tensor_method_verdict).
METHODS_SHARED_WITH_PYTHON = frozenset({"add", "sub", "log"})

# Dtype conversions. A pre-cast on the entry path is torch work, but cheap and sometimes the
# simplest correct thing (int64 -> int32 indices for the output contract), so it is a warning:
# the gate should not fail a kernel for `.float()`. The kernel can usually absorb it (load the
# input dtype, convert in registers), which is what the warning suggests.
TORCH_CASTS = frozenset({"to", "type", "type_as", "float", "half", "bfloat16", "double", "int", "long", "short", "bool"})

# Copies that do no arithmetic: legal, but an extra launch and pass over memory. cat/stack are
# here rather than in TORCH_COMPUTE because assembling outputs is data movement; if what gets
# assembled was computed in torch, that computation is flagged where it happens.
TORCH_COPIES = frozenset({
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "clone", "repeat", "repeat_interleave",
    "tile", "flip", "roll",
})

# What a wrapper needs: allocation, shape/stride/layout queries, views, dtype and device objects,
# grad-mode context managers. (triton.cdiv and triton.next_power_of_2 are not torch and need no
# listing.) A torch.X call on neither list gets a torch-unlisted warning; a method call on a
# receiver of unknown type is only checked against the deny lists above, so for methods this
# list documents what is fine rather than gating it.
TORCH_ALLOWED = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "arange", "tensor", "as_tensor",
    "view", "view_as", "reshape", "contiguous", "is_contiguous", "stride", "size", "numel", "dim",
    "ndimension", "data_ptr", "storage_offset", "element_size", "permute", "transpose", "t",
    "unsqueeze", "squeeze", "flatten", "unflatten", "expand", "expand_as", "broadcast_to", "narrow",
    "select", "split", "chunk", "unbind", "movedim", "as_strided", "fill_", "zero_", "copy_",
    "device", "finfo", "iinfo", "is_tensor", "is_floating_point", "is_complex", "get_default_dtype",
    "promote_types", "result_type", "Size", "no_grad", "inference_mode", "enable_grad",
    "set_grad_enabled",
})

# Device plumbing (streams, synchronize, custom-op registration, autograd.Function): no compute.
# Conditions that query these are still device-branch errors.
TORCH_ALLOWED_NAMESPACES = (
    "torch.cuda", "torch.xpu", "torch.npu", "torch.mlu", "torch.musa", "torch.accelerator",
    "torch.backends", "torch.library", "torch.autograd", "torch.utils",
)

# numpy.X with a TORCH_COMPUTE name is only a warning: in a wrapper it is nearly always shape
# arithmetic (np.prod(x.shape)); a numpy fallback on tensor data also needs a host copy.
NUMPY = "numpy"

# Methods of torch.autograd.Function subclasses that the forward-only judge never calls.
UNJUDGED_METHODS = frozenset({"backward", "jvp", "vjp"})

# --- device-branch ---------------------------------------------------------------------------------
# A condition that reads any of these is a device or vendor check: the judge forbids them, and a
# test for "cuda" is false on most of the eight backends it runs the same file on.
DEVICE_ATTRIBUTES = frozenset({
    "is_cuda", "is_cpu", "is_xpu", "is_mps", "is_hip", "is_npu", "is_mlu", "is_musa", "device", "device_type",
})
DEVICE_NAMES = frozenset({"device", "device_type", "dev"})  # parameters and locals that hold a device
DEVICE_QUERIES = (
    "torch.cuda", "torch.version", "torch.backends", "torch.xpu", "torch.npu", "torch.mlu", "torch.musa",
    "torch.mps", "torch.accelerator", "torch.device", "torch.get_device", "torch_npu", "torch_mlu",
    "torch_musa", "triton.runtime.driver", "platform", "os.environ", "os.getenv", "os.name", "os.uname",
    "sys.platform",
)
VENDOR_STRINGS = frozenset({
    "cuda", "cpu", "xpu", "npu", "mps", "hip", "rocm", "musa", "mlu", "gcu", "maca", "corex", "ixuca",
    "dcu", "nvidia", "amd", "hygon", "ascend", "kunlun", "kunlunxin", "metax", "iluvatar", "enflame",
    "cambricon", "mthreads",
})

# --- mutable-global --------------------------------------------------------------------------------
DICT_FACTORIES = frozenset({
    "dict", "collections.defaultdict", "collections.OrderedDict", "collections.Counter",
    "collections.ChainMap", "types.SimpleNamespace", "weakref.WeakKeyDictionary", "weakref.WeakValueDictionary",
})
SET_FACTORIES = frozenset({"set", "weakref.WeakSet"})
LIST_FACTORIES = frozenset({"list", "collections.deque", "bytearray"})
CACHE_DECORATORS = frozenset({"functools.cache", "functools.lru_cache"})  # each keeps a dict

# --- dynamic-code and monkeypatch ------------------------------------------------------------------
DYNAMIC_BUILTINS = frozenset({"eval", "exec", "compile", "__import__"})
# Importing these is flagged, and so is every call into them.
DYNAMIC_MODULES = (
    "importlib", "subprocess", "ctypes", "cffi", "runpy", "pty", "marshal", "pickle", "dill", "socket",
    "multiprocessing",
)
DYNAMIC_CALLS = (
    "os.system", "os.popen", "os.fork", "os.kill", "os.remove", "os.unlink", "os.rmdir", "os.removedirs",
    "os.rename", "os.replace", "shutil.rmtree", "shutil.move", "shutil.copy", "shutil.copyfile",
    "shutil.copytree",
)
DYNAMIC_CALL_PREFIXES = ("os.exec", "os.spawn")  # os.execv, os.spawnlp, ...
OPEN_FUNCTIONS = frozenset({"open", "io.open", "codecs.open"})
WRITE_METHODS = frozenset({"write_text", "write_bytes"})  # pathlib
OPEN_MODE_CHARS = frozenset("rwxabt+U")
WRITE_MODE_CHARS = frozenset("wax+")
# Process-wide state a kernel module has no business changing (the judge's reference runs in
# the same process), and the methods that change it.
PROCESS_STATE = ("os.environ", "sys.modules", "sys.path")
STATE_MUTATORS = frozenset({
    "update", "setdefault", "pop", "popitem", "clear", "insert", "append", "extend", "remove",
    "__setitem__", "__delitem__",
})

# --- portability (README "CPU vs GPU, and portability") ---------------------------------------------------------
JIT_DECORATORS = frozenset({"triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit", "triton.experimental.gluon.jit"})
KUNLUNXIN_SORTING = frozenset({"topk", "sort", "argsort", "argmax", "argmin"})
KUNLUNXIN_SCANS = frozenset({"cumsum", "cumprod", "associative_scan"})  # and every atomic_*
VECTOR_SOURCES = frozenset({"arange", "zeros", "full", "zeros_like", "full_like"})  # tl.* that make blocks
INT64_DTYPES = frozenset({"triton.language.int64", "triton.language.uint64"})
ENFLAME_MAX_PROGRAMS = 12
ENFLAME_MAX_NUM_WARPS = 4
ASCEND_MAX_NUM_STAGES = 2

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_TRY_NODES = tuple(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)  # except*: 3.11+
_MAX_ZIP_MEMBER_BYTES = 4 * 1024 * 1024  # a kernel file is kilobytes; never inflate a zip bomb


@dataclass(frozen=True)
class Finding:
    """One thing the scan found, printed like a compiler diagnostic.

    ``line`` is 1-based and ``col`` 0-based, as :mod:`ast` reports them: a ``try`` indented four
    spaces on line 12 prints as ``hc_head.py:12:4: error [try-except] ...``. ``backends`` names the
    judge's backends at risk (portability findings only).
    """

    path: str
    line: int
    col: int
    severity: str  # "error" | "warning" | "info"
    rule: str  # short kebab-case id, listed in RULES
    message: str
    backends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity={self.severity!r}: expected one of {SEVERITIES}")

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}:{self.col}: {self.severity} [{self.rule}] {self.message}"
        if self.backends:
            text += f" (at risk: {', '.join(self.backends)})"
        return text


def scan_source(source: str, *, path: str, entry: str) -> list[Finding]:
    """Findings for one module's source, sorted by line. Never imports or runs the module.

    ``entry`` is the op's entry function (``"hc_head"``); a function named ``reference``, which
    the competition calls some entries, is an entry too. A file that does not parse yields a
    single syntax-error finding instead of an exception.
    """
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes, before Python 3.12
        line = getattr(exc, "lineno", None) or 1
        col = max((getattr(exc, "offset", None) or 1) - 1, 0)
        return [Finding(path, line, col, ERROR, "syntax-error", f"cannot parse: {getattr(exc, 'msg', exc)}")]
    except (RecursionError, MemoryError):
        return [_too_deep(path)]
    module = _Module.build(path, tree)
    try:  # the visitors recurse; a pathological nesting must still give a verdict
        findings = [
            *_try_findings(module),
            *_device_branch_findings(module),
            *_torch_compute_findings(module, entry),
            *_mutable_global_findings(module),
            *_jit_global_findings(module),
            *_dynamic_code_findings(module),
            *_monkeypatch_findings(module),
            *_portability_findings(module),
        ]
    except RecursionError:
        return [_too_deep(path)]
    return _sorted(findings)


def scan_file(path: str | Path, *, entry: str) -> list[Finding]:
    """Findings for a kernel file, or for every ``.py`` member of a competition ``.zip``.

    A zip must hold ``<entry>.py`` and may hold per-vendor ``<entry>_<vendor>.py`` files
    (oracles/ops/hc_head.py); members are reported as ``archive.zip/member.py``, as zipimport names them.
    The file is read, never imported; a missing file raises ``FileNotFoundError``.
    """
    path = Path(path)
    if path.suffix.lower() == ".zip":
        return _scan_zip(path, entry)
    return _scan_bytes(path.read_bytes(), path=str(path), entry=entry)


def format_findings(findings: Iterable[Finding]) -> str:
    """One line per finding, then a count by severity; ``"no findings"`` when there are none."""
    findings = list(findings)
    if not findings:
        return "no findings"
    count = {severity: sum(f.severity == severity for f in findings) for severity in SEVERITIES}
    summary = (
        f"{count[ERROR]} error{'s' * (count[ERROR] != 1)}, "
        f"{count[WARNING]} warning{'s' * (count[WARNING] != 1)}, {count[INFO]} info"
    )
    return "\n".join([*map(str, findings), summary])


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding fails the gate."""
    return any(f.severity == ERROR for f in findings)


# --- reading files ---------------------------------------------------------------------------------


def _scan_bytes(data: bytes, *, path: str, entry: str) -> list[Finding]:
    """Decode as Python does (PEP 263 cookie, BOM), then scan; undecodable bytes are a finding."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return [Finding(path, 1, 0, ERROR, "syntax-error", f"cannot decode: {exc}")]
    return scan_source(source, path=path, entry=entry)


def _scan_zip(path: Path, entry: str) -> list[Finding]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        return [Finding(str(path), 1, 0, ERROR, "zip-layout", f"not a readable zip: {exc}")]
    findings: list[Finding] = []
    with archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        if f"{entry}.py" not in {info.filename for info in members}:
            findings.append(Finding(str(path), 1, 0, ERROR, "zip-layout", f"no top-level {entry}.py in the zip"))
        for info in members:
            name = info.filename
            expected = name == f"{entry}.py" or (name.startswith(f"{entry}_") and name.endswith(".py") and "/" not in name)
            if not expected:
                findings.append(Finding(
                    str(path), 1, 0, WARNING, "zip-layout",
                    f"unexpected member {name!r}: the judge reads {entry}.py and {entry}_<vendor>.py",
                ))
            if not name.endswith(".py"):
                continue
            if info.file_size > _MAX_ZIP_MEMBER_BYTES:
                member = f"{path}/{name}"
                findings.append(Finding(member, 1, 0, ERROR, "zip-layout", f"{info.file_size} bytes: too large to scan"))
                continue
            findings.extend(_scan_bytes(archive.read(info), path=f"{path}/{name}", entry=entry))
    return _sorted(findings)


def _too_deep(path: str) -> Finding:
    return Finding(path, 1, 0, ERROR, "syntax-error", "nested too deeply to scan")


def _sorted(findings: Iterable[Finding]) -> list[Finding]:
    unique = dict.fromkeys(findings)  # one construct can match twice (e.g. reached by two names)
    return sorted(unique, key=lambda f: (f.path, f.line, f.col, SEVERITIES.index(f.severity), f.rule, f.message))


# --- the module model shared by the rules ----------------------------------------------------------


class _Names:
    """Resolves names through the module's imports: ``F.softmax`` -> ``torch.nn.functional.softmax``."""

    def __init__(self, tree: ast.Module, statements: list[ast.stmt]) -> None:
        self.aliases: dict[str, str] = {}
        for node in ast.walk(tree):  # imports inside functions count too
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    self.aliases[bound] = alias.name if alias.asname else bound
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.bound: set[str] = set()  # module-level names that shadow builtins
        for stmt in statements:
            if isinstance(stmt, _DEFINITIONS):
                self.bound.add(stmt.name)
            for target in _assigned_targets(stmt):
                self.bound.update(_bound_names(target))
        for stmt in statements:  # `F = torch.nn.functional` is an import by another spelling
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                dotted = self.resolve(stmt.value)
                if dotted is not None:
                    self.aliases[stmt.targets[0].id] = dotted

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted name for a Name/Attribute chain rooted at an import; None otherwise."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def callee(self, node: ast.AST) -> str | None:
        """Like resolve, but a bare builtin the module does not rebind resolves to its name."""
        dotted = self.resolve(node)
        if dotted is None and isinstance(node, ast.Name) and node.id not in self.bound:
            dotted = node.id
        if dotted is not None and dotted.startswith("builtins."):
            dotted = dotted[len("builtins."):]
        return dotted


@dataclass
class _Module:
    path: str
    tree: ast.Module
    names: _Names
    definitions: dict[str, list[ast.stmt]]  # module-level def/class by name (through if/try/with)
    assignments: dict[str, list[ast.expr]]  # module-level `name = value`
    kernels: dict[str, ast.FunctionDef]  # @triton.jit functions by name, at any depth
    kernel_ids: frozenset[int]

    @classmethod
    def build(cls, path: str, tree: ast.Module) -> _Module:
        statements = list(_module_statements(tree.body))
        names = _Names(tree, statements)
        definitions: dict[str, list[ast.stmt]] = {}
        assignments: dict[str, list[ast.expr]] = {}
        for stmt in statements:
            if isinstance(stmt, _DEFINITIONS):
                definitions.setdefault(stmt.name, []).append(stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                for target in _assigned_targets(stmt):
                    for name in _bound_names(target):
                        assignments.setdefault(name, []).append(stmt.value)
        kernels = [fn for fn in ast.walk(tree) if isinstance(fn, _FUNCTIONS) and _is_kernel(fn, names)]
        return cls(
            path, tree, names, definitions, assignments,
            {fn.name: fn for fn in kernels}, frozenset(map(id, kernels)),
        )

    def at(self, node: ast.AST, severity: str, rule: str, message: str, backends: tuple[str, ...] = ()) -> Finding:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        return Finding(self.path, line, col, severity, rule, message, backends)

    def host_walk(self, node: ast.AST) -> Iterator[ast.AST]:
        """ast.walk that does not enter @triton.jit functions: their bodies are device code."""
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(child for child in ast.iter_child_nodes(current) if id(child) not in self.kernel_ids)


def _module_statements(statements: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at import: the module body and its if/try/with/for blocks, not def bodies."""
    for stmt in statements:
        yield stmt
        if not isinstance(stmt, _DEFINITIONS):
            yield from _module_statements(_child_statements(stmt))


def _child_statements(node: ast.AST) -> Iterator[ast.stmt]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            yield child
        elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
            yield from _child_statements(child)


def _assigned_targets(stmt: ast.AST) -> list[ast.expr]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return [stmt.target]
    if isinstance(stmt, ast.Delete):
        return list(stmt.targets)
    return []


def _bound_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _flat_targets(targets: Iterable[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from _flat_targets(target.elts)
        elif isinstance(target, ast.Starred):
            yield from _flat_targets([target.value])
        else:
            yield target


def _is_kernel(fn: ast.AST, names: _Names) -> bool:
    """Decorated with triton.jit, bare or called (`@triton.jit(do_not_specialize=...)`)."""
    for decorator in fn.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if names.resolve(target) in JIT_DECORATORS:
            return True
    return False


def _in_namespaces(dotted: str, namespaces: Iterable[str]) -> bool:
    return any(dotted == ns or dotted.startswith(ns + ".") for ns in namespaces)


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _int_constant(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


# --- try-except ------------------------------------------------------------------------------------


_TRY_WHY = "the judge rejects try/except; a fallback hides a kernel failure"


def _try_findings(module: _Module) -> Iterator[Finding]:
    """Every try with an except handler, anywhere: at import, in the wrapper, in dead code."""
    for node in ast.walk(module.tree):
        if isinstance(node, _TRY_NODES):
            if node.handlers:
                caught = ", ".join(_short(h.type) if h.type else "bare except" for h in node.handlers)
                yield module.at(node, ERROR, "try-except", f"try/except ({caught}): {_TRY_WHY}")
            else:
                yield module.at(node, WARNING, "try-finally", (
                    "try/finally without except cannot hide a failure, but a scan for `try` may still object; "
                    "prefer plain code or a context manager"
                ))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                manager = item.context_expr
                if isinstance(manager, ast.Call) and module.names.resolve(manager.func) == "contextlib.suppress":
                    yield module.at(node, ERROR, "try-except", f"contextlib.suppress is try/except by another name: {_TRY_WHY}")


# --- device-branch ---------------------------------------------------------------------------------


def _device_branch_findings(module: _Module) -> Iterator[Finding]:
    """Conditions (if, while, ternary, assert, comprehension if, match) that inspect the device."""
    device_valued = _device_valued_names(module)
    for anchor, test in _conditions(module.tree):
        evidence = _device_evidence(test, module.names, device_valued)
        if evidence is not None:
            yield module.at(anchor, ERROR, "device-branch", (
                f"condition depends on the device, vendor or environment ({evidence}): the judge forbids device "
                "checks and fallback branches, and runs this same file on eight backends"
            ))


def _conditions(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.expr]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            yield node, node.test
        elif isinstance(node, ast.Match):
            yield node, node.subject
        elif isinstance(node, ast.comprehension):
            for condition in node.ifs:
                yield condition, condition


def _device_valued_names(module: _Module) -> set[str]:
    """Names that hold or return a device query, so `if on_gpu:` and `if _on_cuda(x):` are caught.

    `on_gpu = x.is_cuda` binds one; so does `def _on_cuda(x): return x.is_cuda`. Only the value
    itself counts, not the arguments of calls in it: `out = torch.empty(n, device=x.device)` does
    not make `out` a device value.
    """
    bindings = []
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bindings.append(({name for t in targets for name in _bound_names(t)}, node.value))
        elif isinstance(node, _FUNCTIONS):
            returned = (r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None)
            bindings += [({node.name}, value) for value in returned]
    valued: set[str] = set()
    changed = True
    while changed:  # to a fixed point: `a = x.is_cuda; b = a and ok`
        changed = False
        for targets, value in bindings:
            if targets - valued and _device_evidence(value, module.names, valued, shallow=True) is not None:
                valued |= targets
                changed = True
    return valued


def _device_evidence(expr: ast.expr, names: _Names, device_valued: set[str], *, shallow: bool = False) -> str | None:
    """The first part of ``expr`` that reads the device, vendor, platform or environment.

    ``shallow`` skips call arguments and ternary tests (used for assigned values, see above).
    """
    stack: list[ast.AST] = [expr]
    while stack:
        node = stack.pop()
        if _is_portable_comparison(node):
            continue
        found = _device_query(node, names, device_valued)
        if found is not None:
            return found
        children = list(ast.iter_child_nodes(node))
        if shallow and isinstance(node, ast.Call):
            children = [node.func]
        elif shallow and isinstance(node, ast.IfExp):
            children = [node.body, node.orelse]
        stack.extend(reversed(children))
    return None


def _device_query(node: ast.AST, names: _Names, device_valued: set[str]) -> str | None:
    if isinstance(node, (ast.Name, ast.Attribute)):
        dotted = names.resolve(node)
        if dotted is not None and _in_namespaces(dotted, DEVICE_QUERIES):
            return dotted
    if isinstance(node, ast.Attribute) and node.attr in DEVICE_ATTRIBUTES:
        return _short(node)
    if isinstance(node, ast.Name) and names.resolve(node) is None:
        if node.id in DEVICE_NAMES:
            return node.id
        if node.id in device_valued:
            return f"{node.id}, which holds or returns a device query"
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in VENDOR_STRINGS:
        return repr(node.value)
    return None


def _is_portable_comparison(node: ast.AST) -> bool:
    """`device is None` (an unset argument) and `a.device != b.device` (a same-device check).

    Neither names a vendor, so both work the same on every backend.
    """
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) and len(operands) == 2:
        if isinstance(operands[0], ast.Name) and isinstance(operands[1], ast.Constant) and operands[1].value is None:
            return True
    return all(isinstance(op, ast.Attribute) and op.attr == "device" for op in operands)


# --- torch-compute ---------------------------------------------------------------------------------


def _torch_compute_findings(module: _Module, entry: str) -> Iterator[Finding]:
    candidates = dict.fromkeys((entry, REFERENCE_ENTRY))
    roots = [name for name in candidates if name in module.definitions or name in module.assignments]
    if not roots:
        yield Finding(module.path, 1, 0, WARNING, "entry-missing", (
            f"no function named {entry!r} or {REFERENCE_ENTRY!r}: torch-compute was not checked"
        ))
    for scope, node in _entry_path(module, roots):
        for part in module.host_walk(node):
            verdict = _torch_verdict(part, module.names)
            if verdict is not None:
                what, (severity, rule, why) = verdict
                yield module.at(part, severity, rule, f"{what} in `{scope}` {why}")


def _entry_path(module: _Module, roots: list[str]) -> Iterator[tuple[str, ast.AST]]:
    """(name, node) for the entry and everything it reaches by name, transitively.

    A module-level function is walked whole; a class contributes its body except the methods the
    forward-only judge never calls; `hc_head = torch.compile(_impl)` contributes its value. Kernels
    are never entered.
    """
    queue, seen = list(roots), set()
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        parts: list[ast.AST] = list(module.assignments.get(name, ()))
        for definition in module.definitions.get(name, ()):
            if id(definition) in module.kernel_ids:
                continue
            if isinstance(definition, ast.ClassDef):
                parts += [s for s in definition.body if not (isinstance(s, _FUNCTIONS) and s.name in UNJUDGED_METHODS)]
                parts += definition.decorator_list + definition.bases
            else:
                parts.append(definition)
        for part in parts:
            yield name, part
            queue += _free_names(module, part)


def _free_names(module: _Module, part: ast.AST) -> list[str]:
    """Names a part reads but does not bind: a parameter `x` is not the module-level `x`."""
    nodes = list(module.host_walk(part))
    bound: set[str] = set()
    if isinstance(part, _FUNCTIONS):
        for node in nodes:
            if isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                bound.add(node.id)
        bound -= {name for node in nodes if isinstance(node, ast.Global) for name in node.names}
    return [n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in bound]


# (severity, rule, reason) for each kind of torch work on the entry path.
_COMPUTES = (ERROR, "torch-compute", "computes in torch: the computation must run in a Triton kernel")
_COMPILES = (ERROR, "torch-compute", "hands the op to a compiler: the judge wants a hand-written Triton kernel")
_COPIES = (WARNING, "torch-copy", "copies in torch: allowed, but an extra launch the kernel could absorb")
_CONVERTS = (WARNING, "torch-cast", "converts in torch: cheap, but the kernel can load the input dtype and convert in registers")
_UNLISTED = (WARNING, "torch-unlisted", "is on neither TORCH_ALLOWED nor TORCH_COMPUTE: check that it computes nothing")
_NUMPY_COMPUTES = (WARNING, "numpy-compute", "computes in numpy: fine on shapes, a fallback if it computes the op on host data")


def _torch_verdict(node: ast.AST, names: _Names) -> tuple[str, tuple[str, str, str]] | None:
    """(what, (severity, rule, reason)) for torch work in host code, or None."""
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
        return "`@` (matmul)", _COMPUTES
    if not isinstance(node, ast.Call):
        return None
    dotted = names.resolve(node.func)
    if dotted is not None:
        reason = _library_function_verdict(dotted)
        return None if reason is None else (dotted, reason)
    if isinstance(node.func, ast.Attribute):
        reason = _tensor_method_verdict(node.func.attr, node)
        return None if reason is None else (f"`.{node.func.attr}()`", reason)
    return None


def _library_function_verdict(dotted: str) -> tuple[str, str, str] | None:
    op = _op_name(dotted)
    if _in_namespaces(dotted, (NUMPY,)):
        return _NUMPY_COMPUTES if op in TORCH_COMPUTE else None
    if not _in_namespaces(dotted, ("torch",)):
        return None
    if dotted in TORCH_CODEGEN:
        return _COMPILES
    if _in_namespaces(dotted, TORCH_COMPUTE_NAMESPACES) or op in TORCH_COMPUTE:
        return _COMPUTES
    if op in TORCH_COPIES:
        return _COPIES
    if op in TORCH_CASTS:
        return _CONVERTS
    if op in TORCH_ALLOWED or _in_namespaces(dotted, TORCH_ALLOWED_NAMESPACES):
        return None
    return _UNLISTED


def _op_name(dotted: str) -> str:
    """The op a dotted name calls: torch.ops.aten.sigmoid.default -> sigmoid, torch.Tensor.add_ -> add."""
    parts = dotted.split(".")
    op = parts[3] if parts[:2] == ["torch", "ops"] and len(parts) >= 4 else parts[-1]
    return _out_of_place(op)


def _out_of_place(name: str) -> str:
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _tensor_method_verdict(method: str, call: ast.Call) -> tuple[str, str, str] | None:
    """For `x.method(...)` on a receiver of unknown type: only names that mean torch work."""
    if method in METHODS_SHARED_WITH_PYTHON:
        return None
    if method == "sort" and any(k.arg in ("key", "reverse") for k in call.keywords):
        return None  # list.sort(key=..., reverse=...); Tensor.sort takes dim/descending/stable
    op = _out_of_place(method)
    if op in TORCH_COMPUTE:
        return _COMPUTES
    if op in TORCH_COPIES:
        return _COPIES
    if method in TORCH_CASTS and (call.args or call.keywords or method != "type"):  # .type() only reads
        return _CONVERTS
    return None


# --- mutable-global --------------------------------------------------------------------------------


_SCAN_WHY = "the judge's security scan rejects dict/set globals"


def _mutable_global_findings(module: _Module) -> Iterator[Finding]:
    """dict/set globals and functools caches (error), list globals and `global` (warning)."""
    statements = list(_module_statements(module.tree.body))
    class_bodies = [s for cls in statements if isinstance(cls, ast.ClassDef) for s in cls.body]
    for stmt in statements + class_bodies:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            kind = _container_kind(stmt.value, module.names)
            label = ", ".join(_short(t) for t in _assigned_targets(stmt))
            if kind == "cache":
                yield module.at(stmt, ERROR, "mutable-global", f"`{label}` is a functools cache, a global dict: {_SCAN_WHY}")
            elif kind in ("dict", "set"):
                yield module.at(stmt, ERROR, "mutable-global", (
                    f"`{label}` is a global {kind}: {_SCAN_WHY}; use an ALL_CAPS tuple (of pairs) or frozenset"
                ))
            elif kind == "list":
                yield module.at(stmt, WARNING, "mutable-global", f"`{label}` is a global list, state shared by every call; use a tuple")
        elif isinstance(stmt, _FUNCTIONS):
            for decorator in stmt.decorator_list:
                cache = module.names.resolve(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if cache in CACHE_DECORATORS:
                    yield module.at(decorator, ERROR, "mutable-global", f"{cache} on `{stmt.name}` keeps a global dict: {_SCAN_WHY}")
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Global):
            yield module.at(node, WARNING, "mutable-global", (
                f"`global {', '.join(node.names)}` rebinds module state at run time; pass the value instead"
            ))


def _container_kind(value: ast.expr, names: _Names) -> str | None:
    if isinstance(value, (ast.Dict, ast.DictComp)):
        return "dict"
    if isinstance(value, (ast.Set, ast.SetComp)):
        return "set"
    if isinstance(value, (ast.List, ast.ListComp)):
        return "list"
    if not isinstance(value, ast.Call):
        return None
    factory = names.callee(value.func)
    if factory in DICT_FACTORIES:
        return "dict"
    if factory in SET_FACTORIES:
        return "set"
    if factory in LIST_FACTORIES:
        return "list"
    if factory in CACHE_DECORATORS:  # functools.cache(f)
        return "cache"
    if isinstance(value.func, ast.Call) and names.callee(value.func.func) in CACHE_DECORATORS:  # lru_cache(8)(f)
        return "cache"
    return None


# --- jit-global ------------------------------------------------------------------------------------


def _jit_global_findings(module: _Module) -> Iterator[Finding]:
    """A kernel body that reads a module global bound only to a plain Python value (a number,
    string, None, or a tuple or arithmetic of them). Compiled Triton raises NameError for it at
    the first launch -- only tl.constexpr(...) globals, modules, jit functions and triton.language
    values may be read -- while the CPU interpreter (Triton 3.9) reads it like Python, so CPU
    fuzzing passes a kernel that fails every GPU call. Found this way: a bundled correct variant
    (tests/mutants/sigmoid_gate_topk_renorm/correct_argmax_topk.py) passed on the CPU and raised
    NameError on an H200. Globals bound to anything else (calls, attributes, names) are not
    judged: tl.constexpr(42) and tl.float32 are legal."""
    for kernel in module.kernels.values():
        local = {a.arg for a in (*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs)}
        local |= {a.arg for a in (kernel.args.vararg, kernel.args.kwarg) if a is not None}
        body = [node for stmt in kernel.body for node in ast.walk(stmt)]
        local |= {n.id for n in body if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        local |= {n.name for n in body if isinstance(n, _DEFINITIONS)}
        reported: set[str] = set()
        for node in body:
            if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local
                    and node.id not in reported and node.id not in module.definitions
                    and module.assignments.get(node.id)
                    and all(_plain_value(v) for v in module.assignments[node.id])):
                reported.add(node.id)
                yield module.at(node, ERROR, "jit-global", (
                    f"`{node.id}` is a plain module global read inside @triton.jit `{kernel.name}`: compiled "
                    f"Triton raises NameError at the first launch (the CPU interpreter accepts it); bind it as "
                    f"`{node.id} = tl.constexpr(...)` or pass it as an argument"
                ))


def _plain_value(value: ast.expr) -> bool:
    """A literal Python value: constants, and tuples, unary and binary operations of them."""
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_plain_value(v) for v in value.elts)
    if isinstance(value, ast.UnaryOp):
        return _plain_value(value.operand)
    if isinstance(value, ast.BinOp):
        return _plain_value(value.left) and _plain_value(value.right)
    return False


# --- dynamic-code ----------------------------------------------------------------------------------


def _dynamic_code_findings(module: _Module) -> Iterator[Finding]:
    why = "the judge's security scan rejects dynamic code, subprocesses, native calls and file writes"
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in imported:
                if _in_namespaces(name, DYNAMIC_MODULES):
                    yield module.at(node, ERROR, "dynamic-code", f"imports {name}: {why}")
        elif isinstance(node, ast.Call):
            verdict = _dynamic_call_verdict(node, module.names)
            if verdict is not None:
                severity, what = verdict
                yield module.at(node, severity, "dynamic-code", f"{what}: {why}")


def _dynamic_call_verdict(call: ast.Call, names: _Names) -> tuple[str, str] | None:
    callee = names.callee(call.func)
    if callee is not None:
        if callee in DYNAMIC_BUILTINS:
            return ERROR, f"{callee}() runs code the scan cannot see"
        if _in_namespaces(callee, DYNAMIC_MODULES + DYNAMIC_CALLS) or callee.startswith(DYNAMIC_CALL_PREFIXES):
            return ERROR, f"{callee}()"
        if callee in OPEN_FUNCTIONS:
            return _open_verdict(callee, call.args[1] if len(call.args) > 1 else _keyword(call, "mode"))
        return None
    if isinstance(call.func, ast.Attribute):
        if call.func.attr in WRITE_METHODS:
            return ERROR, f".{call.func.attr}() writes a file"
        if call.func.attr == "open":  # pathlib.Path.open(mode)
            mode = call.args[0] if call.args else _keyword(call, "mode")
            if isinstance(mode, ast.Constant) and _is_write_mode(mode.value):
                return ERROR, f".open({mode.value!r}) opens a file for writing"
    return None


def _open_verdict(callee: str, mode: ast.expr | None) -> tuple[str, str] | None:
    if mode is None:
        return None  # read-only by default
    if not isinstance(mode, ast.Constant):
        return WARNING, f"{callee}() with a mode the scan cannot read ({_short(mode)})"
    if _is_write_mode(mode.value):
        return ERROR, f"{callee}(..., {mode.value!r}) opens a file for writing"
    return None


def _is_write_mode(mode: object) -> bool:
    """A mode string (not a file name that happens to contain an `a`) that writes."""
    if not (isinstance(mode, str) and 0 < len(mode) <= 4 and set(mode) <= OPEN_MODE_CHARS):
        return False
    return bool(set(mode) & WRITE_MODE_CHARS)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


# --- monkeypatch -----------------------------------------------------------------------------------


def _monkeypatch_findings(module: _Module) -> Iterator[Finding]:
    """Rebinding attributes of imported modules (`torch.topk = my_topk` changes the judge's own
    reference, which runs in the same process) and writing process-wide state."""
    why = "the judge's reference and harness run in this process and would see the change"
    names = module.names
    for node in ast.walk(module.tree):
        for target in _flat_targets(_assigned_targets(node)):
            patched = _patched_state(target, names)
            if patched is not None:
                yield module.at(target, ERROR, "monkeypatch", f"changes {patched}: {why}")
        if not isinstance(node, ast.Call):
            continue
        callee = names.callee(node.func)
        if callee in ("setattr", "delattr") and node.args and names.resolve(node.args[0]) is not None:
            yield module.at(node, ERROR, "monkeypatch", f"{callee}() on {names.resolve(node.args[0])}: {why}")
        elif callee in ("os.putenv", "os.unsetenv"):
            yield module.at(node, ERROR, "monkeypatch", f"{callee}(): {why}")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in STATE_MUTATORS:
            owner = names.resolve(node.func.value)
            if owner is not None and _in_namespaces(owner, PROCESS_STATE):
                yield module.at(node, ERROR, "monkeypatch", f"{owner}.{node.func.attr}(): {why}")


def _patched_state(target: ast.expr, names: _Names) -> str | None:
    if isinstance(target, ast.Attribute):
        return names.resolve(target)  # torch.topk = ..., torch.backends.cuda.matmul.allow_tf32 = ...
    if isinstance(target, ast.Subscript):
        owner = names.resolve(target.value)
        if owner is not None and _in_namespaces(owner, PROCESS_STATE):
            return f"{owner}[...]"
    return None


# --- portability (info) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _KernelFacts:
    grid_stride: bool  # loops over rows with a step of the program count
    tiles_2d: bool  # builds 2-D blocks with x[:, None] / x[None, :]


def _portability_findings(module: _Module) -> Iterator[Finding]:
    for kernel in module.kernels.values():
        yield from _kernel_op_findings(module, kernel)
    for scope, launch in _launches(module):
        yield from _launch_findings(module, scope, launch)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call) and module.names.resolve(node.func) == "triton.Config":
            yield from _launch_option_findings(module, node)


def _kernel_op_findings(module: _Module, kernel: ast.FunctionDef) -> Iterator[Finding]:
    vectors = _names_assigned_from(kernel, module.names, VECTOR_SOURCES)
    for call in (n for n in ast.walk(kernel) if isinstance(n, ast.Call)):
        dotted = module.names.resolve(call.func)
        if dotted is not None:
            op = dotted.rsplit(".", 1)[-1] if dotted.startswith("triton.language.") else None
            spelled = f"tl.{op}"
        elif isinstance(call.func, ast.Attribute):
            op, spelled = call.func.attr, f".{call.func.attr}()"
        else:
            op = spelled = None
        return_indices = _keyword(call, "return_indices")
        if return_indices is None and dotted is not None and len(call.args) > 2:
            return_indices = call.args[2]  # tl.max(x, axis, return_indices, ...)
        if op in ("max", "min") and isinstance(return_indices, ast.Constant) and return_indices.value:
            op, spelled = f"arg{op}", f"{spelled} with return_indices=True"
        precision_given = any(k.arg in ("input_precision", "allow_tf32") for k in call.keywords)
        if op in ("argmax", "argmin") and _breaks_ties_fast(call, dotted):
            yield module.at(call, WARNING, "tie-break-fast", (
                f"{spelled}, ties not broken left: on tied values the threads of one program can end "
                "with different indices, so a mask or store built from it is inconsistent (an H100 with "
                "Triton 3.6 picked the same masked-out lane in every round of an argmax top-k loop); the "
                "CPU interpreter always breaks ties left and cannot show it: use tie_break_left=True"
            ))
        if op in KUNLUNXIN_SORTING:
            yield module.at(call, INFO, "portability-sort", (
                f"{spelled}: kunlunxin has no tl.topk and sort/argmax are reported unreliable there; "
                "an iterative max with the smallest index among equals works on all eight"
            ), ("kunlunxin",))
        elif op in KUNLUNXIN_SCANS or (op is not None and op.startswith("atomic_")):
            yield module.at(call, INFO, "portability-scan", f"{spelled}: scans and atomics are reported rejected on kunlunxin", ("kunlunxin",))
        elif op == "erf" and dotted is not None:
            yield module.at(call, INFO, "portability-erf", f"{dotted}: tl.math.erf is reported to crash on kunlunxin", ("kunlunxin",))
        elif op == "dot" and dotted is not None and not precision_given:
            yield module.at(call, INFO, "portability-dot-tf32", (
                'tl.dot without input_precision: iluvatar silently runs fp32 inputs as tf32; pass input_precision="ieee" for fp32'
            ), ("iluvatar",))
        if _is_vector_int64(call, module.names, vectors):
            yield module.at(call, INFO, "portability-int64", (
                f"vector int64 ({_short(call)}): ascend has no vector int64 add/compare and enflame emulates int64; "
                "keep int32 offsets inside a row and one int64 row base"
            ), ("enflame", "ascend"))


def _breaks_ties_fast(call: ast.Call, dotted: str | None) -> bool:
    """tl.argmax(x, axis, False) / tie_break_left=False, or tl.max(x, axis, True, False) / return_indices_tie_break_left=False."""
    reduction = dotted.rsplit(".", 1)[-1] if dotted is not None else None
    position = {"argmax": 2, "argmin": 2, "max": 3, "min": 3}.get(reduction or "")
    flags = [_keyword(call, "tie_break_left"), _keyword(call, "return_indices_tie_break_left")]
    if position is not None and len(call.args) > position:
        flags.append(call.args[position])
    return any(isinstance(flag, ast.Constant) and flag.value is False for flag in flags)


def _is_vector_int64(call: ast.Call, names: _Names, vectors: set[str]) -> bool:
    """A conversion to int64 of a block, or an int64 block made directly.

    A scalar int64 row base (`tl.program_id(0).to(tl.int64) * stride`) is the habit reported
    working on all eight of the judge's backends, so it is not flagged.
    """
    arguments = [*call.args, *(k.value for k in call.keywords)]
    if not any(names.resolve(a) in INT64_DTYPES for a in arguments):
        return False
    dotted = names.resolve(call.func) or ""
    if dotted.startswith("triton.language.") and dotted.rsplit(".", 1)[-1] in VECTOR_SOURCES:
        return True  # tl.zeros([BLOCK], dtype=tl.int64)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "to" and dotted == "":
        subject: ast.AST = call.func.value  # x.to(tl.int64)
    elif dotted == "triton.language.cast" and call.args:
        subject = call.args[0]
    else:
        return False
    return _mentions(subject, names, VECTOR_SOURCES, vectors)


def _mentions(expr: ast.AST, names: _Names, tl_ops: frozenset[str], known: set[str]) -> bool:
    """Whether expr calls one of tl_ops (triton.language.*) or reads a name in known."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in known:
            return True
        if isinstance(node, ast.Call):
            dotted = names.resolve(node.func) or ""
            if dotted.startswith("triton.language.") and dotted.rsplit(".", 1)[-1] in tl_ops:
                return True
    return False


def _names_assigned_from(kernel: ast.AST, names: _Names, tl_ops: frozenset[str]) -> set[str]:
    """Names in a kernel whose value derives, through assignments, from a call to one of tl_ops."""
    bindings = []
    for node in ast.walk(kernel):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            bindings.append(({n for t in _assigned_targets(node) for n in _bound_names(t)}, node.value))
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for targets, value in bindings:
            if targets - found and _mentions(value, names, tl_ops, found):
                found |= targets
                changed = True
    return found


def _kernel_facts(kernel: ast.FunctionDef, names: _Names) -> _KernelFacts:
    program_ids = _names_assigned_from(kernel, names, frozenset({"program_id"}))
    program_counts = _names_assigned_from(kernel, names, frozenset({"num_programs"}))
    grid_stride = tiles_2d = False
    for node in ast.walk(kernel):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and len(node.iter.args) >= 3:
            start, step = node.iter.args[0], node.iter.args[2]
            # range(pid, n, tl.num_programs(0)), or range(pid, n, NUM_SMS) with the step passed in
            if _mentions(start, names, frozenset({"program_id"}), program_ids) and _int_constant(step) is None:
                grid_stride = True
        elif isinstance(node, ast.While):
            grid_stride |= any(
                isinstance(n, ast.AugAssign) and _mentions(n.value, names, frozenset({"num_programs"}), program_counts)
                for n in ast.walk(node)
            )
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            tiles_2d |= any(isinstance(e, ast.Constant) and e.value is None for e in node.slice.elts)
    return _KernelFacts(grid_stride, tiles_2d)


class _LaunchCollector(ast.NodeVisitor):
    """`kernel[grid](...)` calls in host code, each with its enclosing function (or the module)."""

    def __init__(self, module: _Module) -> None:
        self.module = module
        self.scopes: list[ast.AST] = [module.tree]
        self.launches: list[tuple[ast.AST, ast.Call]] = []

    def visit_FunctionDef(self, node: ast.AST) -> None:
        if id(node) in self.module.kernel_ids:
            return
        self.scopes.append(node)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in self.module.kernels:
            self.launches.append((self.scopes[-1], node))
        self.generic_visit(node)


def _launches(module: _Module) -> list[tuple[ast.AST, ast.Call]]:
    collector = _LaunchCollector(module)
    collector.visit(module.tree)
    return collector.launches


def _launch_findings(module: _Module, scope: ast.AST, launch: ast.Call) -> Iterator[Finding]:
    kernel_name = launch.func.value.id
    facts = _kernel_facts(module.kernels[kernel_name], module.names)
    grid = _grid_elements(launch.func.slice, scope, launch.lineno)
    if grid is not None:
        dimensions = 1 + sum(_int_constant(e) != 1 for e in grid[1:])  # (n, 1, 1) is 1-D
        if dimensions >= 2:
            yield module.at(launch, INFO, "portability-2d-grid", (
                f"{dimensions}-D launch grid for `{kernel_name}`: 2-D grids with more than 65535 programs are reported "
                "failing on kunlunxin; a 1-D grid with a loop is portable"
            ), ("kunlunxin",))
        elif facts.tiles_2d:
            yield module.at(launch, INFO, "portability-2d-tile", (
                f"1-D grid over `{kernel_name}`, which builds 2-D tiles: this combination is reported to assert on metax"
            ), ("metax",))
    programs = _constant_product(grid)
    if not facts.grid_stride and (programs is None or programs > ENFLAME_MAX_PROGRAMS):
        yield module.at(launch, INFO, "portability-grid-stride", (
            f"the grid of `{kernel_name}` follows the input size and the kernel has no grid-stride loop "
            "(range(tl.program_id(0), n, tl.num_programs(0))): enflame caps grids at 12 programs, "
            "ascend at 65535 in total"
        ), ("enflame", "ascend"))
    yield from _launch_option_findings(module, launch, scope)


def _launch_option_findings(module: _Module, call: ast.Call, scope: ast.AST | None = None) -> Iterator[Finding]:
    """num_warps / num_stages in a launch or a triton.Config: literals, or the largest literal
    assigned to the name passed (`num_warps = 8` under an `if`, as in Triton's softmax tutorial)."""
    num_warps, num_stages = (_largest_literal(_keyword(call, k), scope) for k in ("num_warps", "num_stages"))
    if num_warps is not None and num_warps > ENFLAME_MAX_NUM_WARPS:
        yield module.at(call, INFO, "portability-num-warps", (
            f"num_warps={num_warps} > {ENFLAME_MAX_NUM_WARPS} is reported to assert on some enflame parts"
        ), ("enflame",))
    if num_stages is not None and num_stages > ASCEND_MAX_NUM_STAGES:
        yield module.at(call, INFO, "portability-num-stages", (
            f"num_stages={num_stages} > {ASCEND_MAX_NUM_STAGES}: ascend allows at most 2 on range loops"
        ), ("ascend",))


def _largest_literal(value: ast.expr | None, scope: ast.AST | None) -> int | None:
    if isinstance(value, ast.Name) and scope is not None:
        nodes = _module_statements(scope.body) if isinstance(scope, ast.Module) else ast.walk(scope)
        candidates = [
            n.value for n in nodes
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)
        ]
    else:
        candidates = [value] if value is not None else []
    literals = [v for v in map(_int_constant, candidates) if v is not None]
    return max(literals, default=None)


def _grid_elements(grid: ast.expr, scope: ast.AST, line: int) -> list[ast.expr] | None:
    """The grid tuple's elements, following `grid = ...`, `lambda meta: (...)`, `def grid(meta)`."""
    for _ in range(4):  # a name, then a lambda or def, then the tuple
        if isinstance(grid, (ast.Tuple, ast.List)):
            return list(grid.elts)
        if isinstance(grid, ast.Lambda):
            grid = grid.body
        elif isinstance(grid, ast.Name):
            found = _local_value(scope, grid.id, line)
            if found is None:
                return None
            grid = found
        else:
            return None
    return None


def _local_value(scope: ast.AST, name: str, line: int) -> ast.expr | None:
    """The value last assigned to ``name`` in scope before ``line``, or what a `def name` returns."""
    nodes = _module_statements(scope.body) if isinstance(scope, ast.Module) else ast.walk(scope)
    best: ast.expr | None = None
    best_line = -1
    for node in nodes:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if best_line < node.lineno <= line:
                best, best_line = node.value, node.lineno
        elif isinstance(node, _FUNCTIONS) and node.name == name and node is not scope:
            returned = next((r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None), None)
            if returned is not None and best_line < node.lineno <= line:
                best, best_line = returned, node.lineno
    return best


def _constant_product(grid: list[ast.expr] | None) -> int | None:
    if grid is None:
        return None
    product = 1
    for element in grid:
        value = _int_constant(element)
        if value is None:
            return None
        product *= value
    return product
