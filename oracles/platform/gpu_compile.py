"""Compile for a GPU what ran in the CPU interpreter: the `gpu-compile` check.

Under TRITON_INTERPRET=1 a kernel runs as Python, so code that Triton's compiler rejects passes
every CPU case and fails every GPU call: a plain module global read inside a kernel (NameError;
the suite's own correct variant correct_argmax_topk.py did this and failed on an H200), a plain
Python function called from one ("Unsupported function referenced"), an operation the code
generator refuses. Triton compiles to a cubin without a GPU (its wheel carries ptxas), so each
interpreted launch is recorded as a `LaunchSpec` -- the kernel's file and name, its argument
types, constexpr values and num_warps / num_stages, as Triton's launcher would specialize them --
and every new spec is compiled by a worker process that imports the kernel's file without the
interpreter, for sm_90 and, under the gate profile (RunOptions.portability), gfx942 (TARGETS):

- sm_90 (H100/H200, the GPU this project measures on): a compile error, more shared memory than
  a block can get (227 KB) or more than 1024 threads fails the check;
- gfx942 (MI300: 64-thread warps, 64 KB of LDS; the judge's AMD and Hygon chips behave like
  ROCm): the same problems there are a `risk` -- reported, not a failure, since those chips'
  own toolchains are not this one.

Results are cached per spec (and Triton caches compiles on disk), so a property test pays for
each specialization once (~0.1-1.5 s), and shrinking pays nothing. Measured on the 2-core CPU
(`python -m oracles.tools.bench --quick --fuzz-seconds 20`), examples/s of hc_head and
sigmoid_gate_topk_renorm: 26.5 and 36.1 without the check; with sm_90 alone 13.2 and 14.1 from
an empty Triton cache, 22.5 and 30.2 from a warm one; with gfx942 too, 9.3 and 9.6 cold.

A spec that cannot be built (a kernel defined inside a function, an argument of a type Triton
would not accept either) or a file the worker cannot import on its own is reported as `skip`,
never as a failure: the check fails only when Triton's compiler rejects what the kernel launched.
On a GPU every launch compiles for real, so the check does not run there.

    python -m oracles.platform.gpu_compile --worker      # the worker: JSON specs in, JSON results out, a line each
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import select
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any



@dataclass(frozen=True)
class Target:
    label: str
    backend: str
    arch: Any
    warp_size: int
    shared_bytes: int  # the most shared memory (LDS) one block can get
    severity: str  # what a problem here is: "fail" or "risk"
    chips: str


TARGETS = (
    Target("sm_90", "cuda", 90, 32, 232_448, "fail", "an H100/H200"),
    Target("gfx942", "hip", "gfx942", 64, 65_536, "risk", "AMD/Hygon-class chips (64-thread warps, 64 KB LDS)"),
)
MAX_THREADS = 1024  # a block's threads on both
COMPILE_TIMEOUT_S = 300  # one specialization; past it the worker is restarted and the spec skipped
GPU_COMPILE = "gpu-compile"  # the check's name
ROOT = Path(__file__).resolve().parents[2]

_POINTER_TYPES = {  # torch dtype name -> Triton pointer type
    "float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64",
    "int64": "*i64", "int32": "*i32", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i1",
    "float8_e4m3fn": "*fp8e4nv", "float8_e5m2": "*fp8e5",
}


@dataclass(frozen=True)
class LaunchSpec:
    """One specialization of a kernel, as a launch on a GPU would compile it."""
    path: str
    name: str
    signature: tuple[tuple[str, str], ...]  # (parameter, Triton type or "constexpr")
    constexprs: tuple[tuple[str, Any], ...]  # (parameter, JSON value; dtypes as {"dtype": name})
    options: tuple[tuple[str, int], ...]  # num_warps, num_stages when the launch gave them

    def __hash__(self) -> int:
        # constexpr values may be JSON objects (a tl.dtype is {"dtype": name}): hash their text
        return hash((self.path, self.name, self.signature, json.dumps(self.constexprs, sort_keys=True), self.options))

    def label(self) -> str:
        constants = ", ".join(f"{k}={_show(v)}" for k, v in self.constexprs)
        return f"{self.name}[{constants}]" if constants else self.name


@dataclass(frozen=True)
class CompileResult:
    status: str  # "ok", "fail" (the compiler rejected it, or it cannot launch), "skip" (not checked)
    message: str = ""
    target: str = ""  # a Target.label; "" when no target was tried


def _show(value: Any) -> str:
    return value["dtype"] if isinstance(value, dict) and "dtype" in value else repr(value)


# ---------------------------------------------------------------------------------------------
# Recording launches (in the interpreted process)


def launch_spec(fn, arg_names, constexpr_names, args: tuple, kwargs: dict) -> LaunchSpec | str:
    """The spec of one interpreted launch (GridExecutor's fn, arg_names and constexprs, and the
    arguments it was called with), or why none can be built."""
    import inspect

    import torch
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if not path or not os.path.isfile(path):
        return f"{getattr(fn, '__name__', 'kernel')}: no source file to import"
    if "<locals>" in getattr(fn, "__qualname__", ""):
        return f"{fn.__name__}: defined inside a function, so the worker cannot import it by name"
    bound = dict(zip(arg_names, args))
    bound.update({k: v for k, v in kwargs.items() if k in arg_names})
    for name, parameter in inspect.signature(fn).parameters.items():
        if name not in bound and parameter.default is not inspect.Parameter.empty:
            bound[name] = parameter.default
    signature, constexprs = [], []
    for name in arg_names:
        if name not in bound:
            return f"{fn.__name__}: argument {name} was not passed"
        value = bound[name]
        if name in constexpr_names or value is None:
            encoded = _constexpr_json(value)
            if encoded is _UNSUPPORTED:
                return f"{fn.__name__}: constexpr {name} = {value!r}, a {type(value).__name__}, cannot be sent to the worker"
            signature.append((name, "constexpr"))
            constexprs.append((name, encoded))
        elif isinstance(value, torch.Tensor):
            kind = _POINTER_TYPES.get(str(value.dtype).removeprefix("torch."))
            if kind is None:
                return f"{fn.__name__}: argument {name} has dtype {value.dtype}"
            signature.append((name, kind))
        elif isinstance(value, bool):
            signature.append((name, "i1"))
        elif isinstance(value, int):
            # Triton's launcher also specializes an int equal to 1 to a constant; compiling the
            # general form instead covers every value and keeps one spec where a launcher would
            # compile two (T = 1, unit strides): a spec costs 0.1-1.5 s to compile.
            signature.append((name, "i32" if -2**31 <= value < 2**31 else ("i64" if value < 2**63 else "u64")))
        elif isinstance(value, float):
            signature.append((name, "fp32"))
        else:
            return f"{fn.__name__}: argument {name} is a {type(value).__name__}"
    options = tuple((k, int(kwargs[k])) for k in ("num_warps", "num_stages") if isinstance(kwargs.get(k), int))
    return LaunchSpec(os.path.abspath(path), fn.__name__, tuple(signature), tuple(constexprs), options)


_UNSUPPORTED = object()


def _constexpr_json(value: Any):
    """A constexpr value as JSON: plain values as they are, a tl.dtype as {"dtype": name}."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "name", None)
    if type(value).__name__ in ("dtype", "pointer_type") and isinstance(name, str):
        return {"dtype": name}
    return _UNSUPPORTED


# ---------------------------------------------------------------------------------------------
# Compiling (the worker process, without the interpreter)


def _compile(spec: dict, modules: dict) -> list[dict]:
    """One result a target, or one skip when the kernel cannot be imported."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    path = spec["path"]
    try:
        if path not in modules:
            folder = os.path.dirname(path)  # a kernel file may import its siblings
            if folder not in sys.path:
                sys.path.insert(0, folder)
            module_spec = importlib.util.spec_from_file_location(f"_tritonfuzz_compile_{len(modules)}", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            modules[path] = module
        kernel = getattr(modules[path], spec["name"])
    except Exception as e:  # noqa: BLE001 -- a file that needs its package: not this check's to judge
        return [{"status": "skip", "message": f"could not import {Path(path).name} on its own: {type(e).__name__}: {e}"}]
    while not isinstance(kernel, triton.runtime.jit.JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn  # through @triton.autotune / @triton.heuristics
    if not isinstance(kernel, triton.runtime.jit.JITFunction):
        return [{"status": "skip", "message": f"{spec['name']} is not a @triton.jit function when imported"}]
    constexprs = {name: (getattr(tl, value["dtype"]) if isinstance(value, dict) else value)
                  for name, value in spec["constexprs"]}
    options = dict(spec["options"])
    results = []
    for target in (t for t in TARGETS if t.label in spec["targets"]):
        try:
            source = ASTSource(fn=kernel, signature=dict(spec["signature"]), constexprs=constexprs)
            compiled = triton.compile(source, target=GPUTarget(target.backend, target.arch, target.warp_size),
                                      options=options)
        except Exception as e:  # noqa: BLE001 -- the compiler's verdict is the result
            results.append({"status": "fail", "message": f"{type(e).__name__}: {e}", "target": target.label})
            continue
        threads = int(getattr(compiled.metadata, "num_warps", options.get("num_warps", 4))) * target.warp_size
        shared = int(getattr(compiled.metadata, "shared", 0) or 0)
        if shared > target.shared_bytes:
            results.append({"status": "fail", "target": target.label, "message": (
                f"needs {shared} bytes of shared memory, a block gets at most {target.shared_bytes} on "
                f"{target.chips}: the launch fails (out of resources)")})
        elif threads > MAX_THREADS:
            results.append({"status": "fail", "target": target.label, "message": (
                f"{threads} threads a block ({threads // target.warp_size} warps of {target.warp_size}), "
                f"more than {MAX_THREADS} on {target.chips}")})
        else:
            results.append({"status": "ok", "message": "", "target": target.label})
    return results


def _worker() -> int:
    import warnings
    warnings.filterwarnings("ignore")
    modules: dict = {}
    for line in sys.stdin:
        spec = json.loads(line)
        print(json.dumps(_compile(spec, modules)), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# The client (in the interpreted process): one worker a process, results cached per spec


class _Client:
    def __init__(self):
        self.cache: dict[tuple[LaunchSpec, tuple[str, ...]], tuple[CompileResult, ...]] = {}
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return subprocess.Popen([sys.executable, "-m", "oracles.platform.gpu_compile", "--worker"], cwd=ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()

    def compile(self, spec: LaunchSpec, targets: tuple[str, ...]) -> tuple[CompileResult, ...]:
        key = (spec, targets)
        with self.lock:
            if key in self.cache:
                return self.cache[key]
            request = json.dumps(dict(asdict(spec), targets=targets)) + "\n"
            for attempt in (1, 2):  # a worker that died since the last call is replaced once
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = self._start()
                try:
                    self.proc.stdin.write(request)
                    self.proc.stdin.flush()
                    break
                except OSError:
                    self.close()
                    if attempt == 2:
                        raise
            ready, _, _ = select.select([self.proc.stdout], [], [], COMPILE_TIMEOUT_S)
            line = self.proc.stdout.readline() if ready else None
            if line is None:  # a compile that does not end: not judged, and a fresh worker next time
                self.proc.kill()
                self.proc = None
                result = (CompileResult("skip", f"{spec.name}: compiling took over {COMPILE_TIMEOUT_S} s"),)
            elif not line:  # the worker died: a crash inside Triton's compiler (or out of memory), not a verdict
                self.proc = None
                result = (CompileResult("skip", f"{spec.name}: the compiler process died while compiling it (a crash "
                                                f"inside Triton's compiler here, not a judgement of the kernel; seen on "
                                                f"kernels an H200 compiles and runs)"),)
            else:
                result = tuple(CompileResult(**r) for r in json.loads(line))
            self.cache[key] = result
            return result


_CLIENT = _Client()
atexit.register(_CLIENT.close)


def compile_for_gpu(spec: LaunchSpec, targets: tuple[str, ...] = tuple(t.label for t in TARGETS)
                    ) -> tuple[CompileResult, ...]:
    """Compile one spec for the targets named (cached): a result a target, or one skip. The
    worker starts on the first call."""
    return _CLIENT.compile(spec, tuple(targets))


def gpu_compile_check(specs: list, *, portability: bool = True):
    """The `gpu-compile` check of one case: every specialization its interpreted launches used
    compiles and can launch on each target -- fail for sm_90, risk for gfx942 (only with
    `portability`). `specs` holds LaunchSpecs and, for launches no spec could be built for, the
    reason."""
    from oracles.verdict import FAIL, PASS, PORTABILITY, RISK, SKIP, Check
    targets = TARGETS if portability else TARGETS[:1]
    unique = list(dict.fromkeys(specs))
    built = [s for s in unique if isinstance(s, LaunchSpec)]
    problems = {target.label: [] for target in targets}
    skipped = [s for s in unique if isinstance(s, str)]
    checked = 0
    for spec in built:
        results = compile_for_gpu(spec, tuple(t.label for t in targets))
        checked += any(r.status != "skip" for r in results)
        for result in results:
            if result.status == "fail":
                message = result.message if len(result.message) <= 1500 else result.message[:1500] + " [...]"
                problems[result.target].append(f"{spec.label()}: {message}")
            elif result.status == "skip":
                skipped.append(result.message)
    note = f"; not checked: {'; '.join(dict.fromkeys(skipped))}" if skipped else ""
    for target in targets:
        if problems[target.label]:
            status = FAIL if target.severity == "fail" else RISK
            return Check(GPU_COMPILE, status, kind=PORTABILITY if status == RISK else "", message=(
                f"{len(problems[target.label])} of the {len(built)} kernel specialization(s) this case launched "
                f"cannot run on {target.chips} ({target.label}; the CPU interpreter ran them as Python): "
                + "; ".join(problems[target.label]) + note))
    if not checked:
        return Check(GPU_COMPILE, SKIP, "nothing compiled: " + ("; ".join(dict.fromkeys(skipped)) or "no interpreted launch"))
    labels = " and ".join(t.label for t in targets)
    return Check(GPU_COMPILE, PASS, f"{checked} specialization(s) compile and fit {labels}{note}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(_worker())
    print(__doc__)
    sys.exit(2)
