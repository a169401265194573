"""Verdicts on a few rows of a case too large for the float64 oracle (beyond 2^31 elements).

Both ops compute every token independently, so the kernel's output rows for tokens t1, t2, ...
must equal what the op gives on a small case made of those tokens alone. The big case is built
on the GPU, the kernel runs on all of it, and the verdict looks at the first and the last
tokens -- the ones whose addresses need more than 32 bits. A raise is judged like any other
(oracles/harness/differential.py refusal_check: the big case lies outside the judge domain, so a clean
refusal is `unsupported`, a device fault a failure). One raise is not judged: a CUDA
out-of-memory where this process's memory and its request fit the GPU, so that other processes
(a parallel run's workers) held what was missing; the case is skipped with torch's numbers.
"""

from __future__ import annotations

import re

import torch

from oracles.harness.differential import device_fault, device_fault_verdict, raised_message, refusal_check
from oracles.ops import get_op
from oracles.verdict import FAIL, SKIP, Check, Verdict
from strategies.case import BEYOND_INT32, Case

_SIZE = r"([0-9.]+) (bytes|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}


def sampled_row_case(op_name: str, fn, inputs: dict, rows: list[int], *,
                     judge_exact: bool = False) -> tuple[Case, Verdict]:
    """(the small case of `rows`, labelled with the big shape; the verdict on those rows)."""
    spec = get_op(op_name)
    big = next(v for k, v in inputs.items() if k in spec.row_inputs)
    shape = "x".join(map(str, big.shape))
    # Copied before the call: after a device fault every later read of the GPU raises (the
    # context is lost), and copying the rows then made the kernel's fault a suite error (an H200
    # gate of a public hc_head, 2026-12-02).
    case = rows_case(op_name, inputs, rows, frozenset({BEYOND_INT32}))
    try:
        raw = fn(**inputs)
        if big.device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # judged against the big case's shape: that is what the kernel refused
        if device_fault(e):
            return case, device_fault_verdict(f"[{shape}] input: {raised_message(e)}")
        verdict = Verdict()
        if other_processes_held_the_memory(e):
            verdict.add(Check("contract", SKIP, f"not judged: the [{shape}] input ran out of GPU memory that "
                                                f"other processes held ({raised_message(e)}); what this process "
                                                f"held and asked for fits the GPU's total, so the kernel would "
                                                f"run on a GPU of its own (replay the case alone to judge it)"))
            return case, verdict
        # judged as the large input it is: beyond 2^31 elements, outside the judge domain whatever its rows
        verdict.add(refusal_check(op_name, Case(op_name, inputs, frozenset({BEYOND_INT32})), e,
                                  f"[{shape}] input: {raised_message(e)}"))
        return case, verdict
    return verdict_on_rows(op_name, inputs, raw, rows, judge_exact=judge_exact)


def rows_case(op_name: str, inputs: dict, rows: list[int], features: frozenset) -> Case:
    """The case made of `rows` of a large input (on the CPU), labelled with the large shape."""
    spec = get_op(op_name)
    big = next(v for k, v in inputs.items() if k in spec.row_inputs)
    index = torch.tensor(rows, device=big.device)
    small_inputs = {k: (v.index_select(0, index).cpu() if k in spec.row_inputs else
                        v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    shape = "x".join(map(str, big.shape))
    return Case(op_name, small_inputs, features, f"rows {rows} of a [{shape}] input")


def verdict_on_rows(op_name: str, inputs: dict, raw, rows: list[int], *, judge_exact: bool = False,
                    features: frozenset = frozenset({BEYOND_INT32}), reference_raw=None) -> tuple[Case, Verdict]:
    """The op's verdict on `rows` of outputs `raw` the kernel already returned for `inputs`:
    (the small case of those rows, the verdict). `features` tags the small case (by default as
    rows of an input beyond 2^31 elements, outside the judge domain). The reference the verdict
    compares with is `reference_raw`'s rows when given (the reference as it ran on the whole
    input, on its device: torch.topk's tie order differs between CUDA and the CPU), else the
    reference run again on those rows on the CPU."""
    spec = get_op(op_name)
    case = rows_case(op_name, inputs, rows, features)
    verdict = Verdict()
    raw = raw if isinstance(raw, tuple) else (raw,)
    if len(raw) != len(spec.output_names):
        verdict.add(Check("contract", FAIL, f"returned {len(raw)} value(s), expected {len(spec.output_names)}"))
        return case, verdict
    def rows_of(values, device):
        values = values if isinstance(values, tuple) else (values,)
        return {name: out.index_select(0, torch.tensor(rows, device=out.device)).to(device)
                for name, out in zip(spec.output_names, values)}
    if reference_raw is not None:  # both on the device they ran on, as run_case judges them there
        outputs, reference = rows_of(raw, None), rows_of(reference_raw, None)
    else:
        outputs = rows_of(raw, "cpu")
        reference = dict(zip(spec.output_names, (lambda r: r if isinstance(r, tuple) else (r,))(
            spec.reference(**case.to("cpu")))))
    for check in spec.verdict_checks(case, outputs, reference, judge_exact=judge_exact):
        verdict.add(check)
    return case, verdict


def other_processes_held_the_memory(error: BaseException) -> bool:
    """A CUDA out-of-memory where this process's memory and the allocation it asked for fit the
    GPU's total: the GPU was short because other processes (a parallel test run's workers) held
    the rest. torch's message says all three; one that does not is not such a case."""
    if not isinstance(error, torch.OutOfMemoryError):
        return False
    text = " ".join(str(error).split())
    found = [re.search(pattern + _SIZE, text) for pattern in
             (r"Tried to allocate ", r"total capaci?ty of ", r"this process has ")]  # torch 2.1 wrote "capacty"
    if not all(found):
        return False
    asked, total, held = (float(m.group(1)) * _UNITS[m.group(2)] for m in found)
    return held + asked <= total
