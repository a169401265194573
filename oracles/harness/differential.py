"""One case through the kernel under test, the task reference and the float64 oracle: a Verdict.

    case --> kernel(case)     on the chosen device, inside the sanitizers (oracles/harness/sanitizers.py)
         --> reference(case)  the judge's PyTorch code, same device
         --> oracle64(case)   the same math in float64 (hc_head on the case's device, the routers on the CPU)
         --> op.verdict(...)  named checks (oracles/<op>.py)

The kernel is called as the judge calls it: keyword arguments. Its inputs are fresh copies in
the case's layout, inside guard bands, so that a kernel that writes into an input, or past one,
is caught (and cannot corrupt the reference's view). Only the kernel call runs inside the
sanitizers' interception; the reference and the oracle run outside it.

Checks, in the order they appear in a verdict: launch, red-zone, poison, inputs-unchanged,
process-state (the sanitizers; the last two also run with sanitize=False), then the op's own
checks (contract, specials, accuracy, judge, ...), then determinism when asked for.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

import torch

from oracles.platform.gpu_compile import GPU_COMPILE, gpu_compile_check
from oracles.harness.memory import DEFAULT_MEMORY_LIMIT_GIB, AllocationLimitError, call_limit_bytes, describe_memory_error
from oracles.ops import get_op
from oracles.harness.sanitizers import (SANITIZER_CHECKS, determinism_check, inputs_unchanged_check, launch_check,
                                memcheck_check, poison_check, process_state_check, red_zone_check, run_kernel)
from oracles.verdict import FAIL, PASS, UNSUPPORTED, UNTRUSTED, Check, Verdict
from strategies.case import Case


@dataclass(frozen=True)
class RunOptions:
    device: str = "cpu"
    judge_exact: bool = False  # tie order must equal torch.topk's on this device
    strict: bool = False       # an unsupported input (clean refusal outside the judge domain) fails
    sanitize: bool = True      # red zones, poison, launch check around the kernel call
    determinism: bool = False  # run the case twice and demand the same bits (doubles the cost)
    portability: bool = False  # gpu-compile also for the AMD-class target (another compile per spec)
    # bytes the kernel's own CPU allocations may total in one call (oracles/harness/memory.py; None: no limit)
    alloc_limit: int | None = call_limit_bytes(DEFAULT_MEMORY_LIMIT_GIB)


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def interpreter_gap(error: BaseException) -> bool:
    """The kernel raised because the CPU interpreter lacks a feature a GPU has: Triton's
    interpreter wraps it as InterpreterError from a NotImplementedError (inline PTX via
    tl.inline_asm_elementwise, ...) or from an AttributeError naming its InterpreterBuilder (a
    builder method the GPU's builder has: Triton 3.6's interpreter has no get_bf16, so a bf16
    tensor combined with a Python float constant cannot run there); or the wrapper asked the
    platform for a GPU it does not have (_NO_GPU_TO_ASK)."""
    if not interpreter_active():
        return False
    return any((isinstance(e, NotImplementedError) and "interpreter" in str(e))
               or (isinstance(e, AttributeError) and "'InterpreterBuilder' object has no attribute" in str(e))
               or any(marker in str(e) for marker in _NO_GPU_TO_ASK)
               for e in error_chain(error))


# The CPU platform has no GPU to ask: a wrapper that sizes its grid from the device
# (torch.cuda.get_device_properties(...).multi_processor_count, Triton's
# driver.active.utils.get_device_properties, as Triton's own tutorials do) raises these here and
# not on the GPU it was written for. Such a call was a `contract` failure inside the judge's
# domain on every CPU case (2026-12-06): the platform's gap, not the kernel's.
_NO_GPU_TO_ASK = ("Torch not compiled with CUDA enabled", "No CUDA GPUs are available",
                  "Found no NVIDIA driver", "0 active drivers")


def error_chain(error: BaseException | None):
    """The error, then its causes and contexts, each once."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def raised_by_interpreter(error: BaseException) -> bool:
    """The error came out of Triton's interpreter running a kernel body (its InterpreterError),
    and is not a device-side assert of the kernel's own."""
    if not interpreter_active():
        return False
    chain = list(error_chain(error))
    return (any(type(e).__name__ == "InterpreterError" for e in chain)
            and not any(isinstance(e, AssertionError) for e in chain))


def call_kernel(fn, inputs: dict) -> tuple:
    """The judge's call: keyword arguments; a single tensor result becomes a 1-tuple."""
    out = fn(**inputs)
    return out if isinstance(out, tuple) else (out,)


def raised_message(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    if isinstance(e, AllocationLimitError):  # raised by the sanitizers' interception: it names the kernel's line
        where = ""
    text = " ".join(str(e).split())
    text = text if len(text) <= 500 else text[:500] + " ..."
    return f"raised {type(e).__name__}: {text}{where}{describe_memory_error(e)} (on a valid case)"


# Faults after which the CUDA context is unusable: every later CUDA call in the process fails.
_CONTEXT_FAULT_MARKERS = ("illegal memory access", "misaligned address", "device-side assert",
                          "unspecified launch failure", "an illegal instruction", "illegal address",
                          "hardware exception", "warp out-of-range", "invalid program counter")
# Errors that are faults of the device or the process, never a kernel's deliberate refusal: those
# above, and errors the process survives (an out-of-memory, torch's CPU allocator past the
# process's memory limit).
_FAULT_MARKERS = _CONTEXT_FAULT_MARKERS + ("CUDA error", "HIP error", "out of memory", "can't allocate memory")
DEVICE_FAULT = "device-fault"


def device_fault(error: BaseException | None) -> bool:
    """The GPU faulted while running the kernel: the process's CUDA context is lost."""
    return any(any(marker in str(e) for marker in _CONTEXT_FAULT_MARKERS) for e in error_chain(error))


def context_lost(error: BaseException | None) -> bool:
    """device_fault anywhere in an error, its causes, or the members of an exception group (as
    Hypothesis reports several errors of one test)."""
    return device_fault(error) or any(context_lost(member) for e in error_chain(error)
                                      for member in getattr(e, "exceptions", ()) or ())


def device_fault_verdict(problem: str) -> Verdict:
    """The verdict on a case that faulted the GPU: a failure whatever the input (a refusal never
    faults), and nothing more is checked -- every later CUDA call of this process would fail."""
    verdict = Verdict(device_lost=True)
    verdict.add(Check(DEVICE_FAULT, FAIL, f"{problem} -- the GPU faulted (out-of-bounds access, device assert or "
                                          f"launch failure); this process's CUDA context is lost"))
    return verdict


def clean_refusal(error: BaseException) -> bool:
    """A Python exception the wrapper raised on its own terms (assert, ValueError,
    NotImplementedError, a Triton compile error for an unsupported shape...), not a device fault,
    an out-of-memory or an interpreter crash."""
    if isinstance(error, (MemoryError, RecursionError)) or type(error).__name__ == "AcceleratorError":
        return False
    text = str(error)
    return not any(marker in text for marker in _FAULT_MARKERS)


def refusal_check(op_name: str, case: Case, error: BaseException | None, problem: str) -> Check:
    """The kernel raised (or returned the wrong number of outputs). Inside the op's judge domain
    that is a failure: the judge sends such inputs. Outside it, a clean refusal is `unsupported`
    (the input class as its kind); a device fault or a wrong return stays a failure."""
    outside = get_op(op_name).judge_domain_violations(case)
    if error is None or not outside:
        where = "" if error is None else " inside the judge's domain (the competition sends such inputs)"
        return Check("contract", FAIL, problem + where)
    if not clean_refusal(error):
        return Check("contract", FAIL, f"{problem} -- a fault, not a clean refusal")
    return Check("contract", UNSUPPORTED, f"{problem}; this input is outside the judge's domain "
                                          f"({', '.join(outside)}): a clean refusal, reported, not a failure",
                 kind=refusal_site(error), details=tuple(outside))


def compile_refusal(op_name: str, case: Case, check: Check) -> Check:
    """A specialization that does not compile for sm_90 fails every GPU call with a
    CompilationError: inside the judge domain a failure, outside it a clean refusal like any
    other (`unsupported`, e.g. tl.arange over a hc_mult that is not a power of two)."""
    if check.status != FAIL:
        return check
    outside = get_op(op_name).judge_domain_violations(case)
    if not outside:
        return check
    return Check(check.name, UNSUPPORTED, f"{check.message}; this input is outside the judge's domain "
                                          f"({', '.join(outside)}): a compile error there is a clean refusal",
                 kind="CompilationError on sm_90", details=tuple(outside))


def refusal_site(error: BaseException) -> str:
    """What refused: the exception type and the innermost frame in the kernel's own file (the
    same assert refuses every input of its class)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not _harness_frame(f.filename)]
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{where}"


_SUITE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _harness_frame(filename: str) -> bool:
    """A frame of an installed library or of the suite itself (not of the kernel's own file)."""
    path = os.path.abspath(filename)
    return ("site-packages" in path or "dist-packages" in path or path.startswith(os.path.join(_SUITE, "oracles"))
            or path.startswith(os.path.join(_SUITE, "strategies")) or path == os.path.join(_SUITE, "conftest.py"))


def run_case(op_name: str, fn, case: Case, options: RunOptions) -> Verdict:
    spec = get_op(op_name)
    verdict = Verdict()
    # Judged where it runs: the kernel's guarded inputs, the reference's copies and the oracle
    # all come from one copy on the device (a fixture keeps the caller's case).
    case = case.on(options.device)
    run = run_kernel(fn, case, options.device, sanitize=options.sanitize, alloc_limit=options.alloc_limit)
    names = spec.output_names
    if device_fault(run.error):
        return device_fault_verdict(raised_message(run.error))
    if run.error is not None or len(run.outputs) != len(names):
        # No outputs to judge; what the call did to memory before it ended is still reported.
        problem = raised_message(run.error) if run.error is not None else (
            f"returned {len(run.outputs)} value(s), expected {len(names)}: ({', '.join(names)})")
        compiled = None
        if run.error is not None and options.sanitize and run.launch_specs and raised_by_interpreter(run.error):
            # Raised while the interpreter ran a kernel body: the interpreter's gap (a loop index
            # that is a Python int, a mask of Python bools...) or a real compile error. The
            # compiler tells them apart: what compiles for sm_90 is not the kernel's failure.
            compiled = gpu_compile_check(run.launch_specs, portability=False)
        if run.error is not None and (interpreter_gap(run.error) or (compiled is not None and compiled.status == PASS)):
            verdict.add(Check("contract", UNTRUSTED, f"{problem} -- the CPU platform cannot run this kernel (the "
                                                     f"interpreter lacks a feature, or there is no GPU to ask), "
                                                     f"which is not the kernel's failure: run on a GPU to judge it"))
            if options.sanitize and run.launch_specs:  # whether a GPU can compile it, this run can still say
                verdict.add(gpu_compile_check(run.launch_specs, portability=options.portability))
        else:
            verdict.add(refusal_check(op_name, case, run.error, problem))
            if compiled is not None and compiled.status == FAIL:  # the compiler's reason, severity as above
                verdict.add(compile_refusal(op_name, case, compiled))
        for check in (red_zone_check(run, {}), memcheck_check(run), inputs_unchanged_check(run, case),
                      process_state_check(run)):
            if check.status == FAIL:
                verdict.add(check)
        return verdict
    outputs = dict(zip(names, run.outputs))
    reference = dict(zip(names, call_kernel(spec.reference, case.to(options.device))))
    if options.sanitize:
        verdict.add(launch_check(run, outputs))
        if run.launch_specs:  # interpreted launches: would a GPU compile them? (oracles/platform/gpu_compile.py)
            verdict.add(compile_refusal(op_name, case, gpu_compile_check(run.launch_specs,
                                                                         portability=options.portability)))
        verdict.add(red_zone_check(run, outputs, reference))
        if interpreter_active():
            verdict.add(memcheck_check(run))
        verdict.add(poison_check(run, outputs, reference))
    verdict.add(inputs_unchanged_check(run, case))
    verdict.add(process_state_check(run))
    for check in spec.verdict_checks(case, outputs, reference, judge_exact=options.judge_exact):
        verdict.add(check)
    if options.determinism:
        again = run_kernel(fn, case, options.device, sanitize=options.sanitize, alloc_limit=options.alloc_limit)
        if device_fault(again.error):
            return device_fault_verdict(f"on its second run: {raised_message(again.error)}")
        second = again.error if again.error is not None else dict(zip(names, again.outputs))
        verdict.add(determinism_check(outputs, second))
    return mark_untrusted(case, verdict, options)


def mark_untrusted(case: Case, verdict: Verdict, options: RunOptions) -> Verdict:
    """bf16 arithmetic inside a kernel is computed wrongly by Triton's CPU interpreter unless
    oracles/platform/interpreter.py could correct it: then a failure on a bf16 case is not the kernel's."""
    if options.device != "cpu" or not interpreter_active():
        return verdict
    if not any(t.dtype == torch.bfloat16 for t in case.tensors().values()):
        return verdict
    from oracles.platform.interpreter import bf16_arithmetic_is_exact
    if bf16_arithmetic_is_exact():
        return verdict
    advice = ("bf16 case under the CPU interpreter, whose bf16 arithmetic is not exact here: "
              "run on a GPU to trust this result")
    # The sanitizers' findings (memory, launches, bits between two runs) and the compiler's do
    # not depend on arithmetic: they stay failures.
    verdict.checks = [Check(c.name, UNTRUSTED, f"{c.message} ({advice})")
                      if c.status == FAIL and c.name not in (*SANITIZER_CHECKS, GPU_COMPILE) else c
                      for c in verdict.checks]
    return verdict
