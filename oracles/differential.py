"""One case through the kernel under test, the task reference and the float64 oracle: a Verdict.

    case --> kernel(case)     on the chosen device (inputs in their drawn layout)
         --> reference(case)  the judge's PyTorch code, same device
         --> oracle64(case)   the same math in float64, on the CPU
         --> op.verdict(...)  named checks (oracles/<op>.py)

The kernel is called as the judge calls it: keyword arguments. Its inputs are fresh copies, so
that a kernel that writes into an input is caught (and cannot corrupt the reference's view).
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

import torch

from oracles.registry import get_op
from oracles.verdict import FAIL, PASS, UNTRUSTED, Check, Verdict
from strategies.case import Case, storage_span


@dataclass(frozen=True)
class RunOptions:
    device: str = "cpu"
    judge_exact: bool = False  # tie order must equal torch.topk's on this device


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def call_kernel(fn, inputs: dict) -> tuple:
    """The judge's call: keyword arguments; a single tensor result becomes a 1-tuple."""
    out = fn(**inputs)
    return out if isinstance(out, tuple) else (out,)


def input_snapshot(inputs: dict) -> dict[str, bytes]:
    """Raw bytes of each input's whole storage span (gaps of strided layouts included)."""
    return {k: storage_span(v.detach()).cpu().contiguous().view(torch.uint8).numpy().tobytes()
            for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.numel()}


def mutated_inputs(inputs: dict, before: dict[str, bytes]) -> list[str]:
    after = input_snapshot(inputs)
    return [name for name in before if after.get(name) != before[name]]


def run_case(op_name: str, fn, case: Case, options: RunOptions) -> Verdict:
    op = get_op(op_name)
    oracle = op.oracle
    verdict = Verdict()
    kernel_inputs = case.to(options.device)
    before = input_snapshot(kernel_inputs)
    try:
        raw = call_kernel(fn, kernel_inputs)
    except Exception as e:  # the kernel's own error on a valid case is a verdict, not a crash
        frames = traceback.extract_tb(e.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        verdict.add(Check("contract", FAIL, f"raised {type(e).__name__}: {e}{where} (on a valid case)"))
        return verdict
    if options.device != "cpu":
        torch.cuda.synchronize()
    names = oracle.OUTPUT_NAMES
    if len(raw) != len(names):
        verdict.add(Check("contract", FAIL, f"returned {len(raw)} value(s), expected {len(names)}: ({', '.join(names)})"))
        return verdict
    outputs = dict(zip(names, raw))
    changed = mutated_inputs(kernel_inputs, before)
    if changed:
        verdict.add(Check("inputs-unchanged", FAIL, f"the kernel wrote into its input(s): {', '.join(changed)}"))
    reference = dict(zip(names, call_kernel(oracle.reference, case.to(options.device))))
    for check in oracle.verdict_checks(case, outputs, reference, judge_exact=options.judge_exact):
        verdict.add(check)
    if not changed and verdict.check("inputs-unchanged") is None:
        verdict.add(Check("inputs-unchanged", PASS))
    return mark_untrusted(case, verdict, options)


def mark_untrusted(case: Case, verdict: Verdict, options: RunOptions) -> Verdict:
    """bf16 arithmetic inside a kernel is computed wrongly by Triton's CPU interpreter unless
    kernels/interpreter.py could correct it: then a failure on a bf16 case is not the kernel's."""
    if options.device != "cpu" or not interpreter_active():
        return verdict
    if not any(t.dtype == torch.bfloat16 for t in case.tensors().values()):
        return verdict
    from kernels.interpreter import bf16_arithmetic_is_exact
    if bf16_arithmetic_is_exact():
        return verdict
    advice = ("bf16 case under the CPU interpreter, whose bf16 arithmetic is not exact here: "
              "run on a GPU to trust this result")
    verdict.checks = [Check(c.name, UNTRUSTED, f"{c.message} ({advice})") if c.status == FAIL else c
                      for c in verdict.checks]
    return verdict
