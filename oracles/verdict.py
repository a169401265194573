"""Verdicts: separate, named checks whose messages stand alone.

A Verdict is a list of Checks. Each Check has a name (contract, specials, accuracy, judge,
indices, and the sanitizers' names), a status and a message that says where (index), the kernel,
oracle64 and reference values, and the allowed error. Statuses:

- pass: nothing wrong.
- fail: the kernel is wrong by this check: a silent wrong answer, a sanitizer violation, or an
  exception on an input inside the op's judge domain (what the competition can send).
- risk: correct up to float32 and the platform, yet it differs from the reference or oracle64 in
  a way that is explained, and the judge may still reject it. Each risk has a kind (RISK_KINDS):
  `tie` (a valid top-k ordered differently from torch.topk on this device; a failure under
  --judge-exact), `ill-conditioned` (kernel and reference differ by float32 rounding on an
  ill-conditioned row), `ftz` (a difference that flushing subnormal float32 intermediates
  explains, as GPUs' approximate rsqrt/sqrt/div/exp do), `degenerate` (rows where the float32
  reference's own computation overflows, underflows to 0/inf or divides 0 by 0, so it disagrees
  with oracle64) and `portability` (a compile problem on a chip the judge also uses).
- unsupported: the kernel raised cleanly on a valid input OUTSIDE the op's judge domain; its
  kind names the refusal (exception type and where it was raised), its details the ways the
  input lies outside the domain. Reported with a fixture; a failure only under --strict.
- skip: the check does not apply to this case (e.g. judge when the reference itself is NaN).
- untrusted: the result cannot be trusted on this platform (e.g. bf16 arithmetic under the CPU
  interpreter); never a failure, always reported.

Risks and unsupported findings never stop the search: only `fail` makes a property fail.

The shared comparison helpers below implement the policy that is the same for every op; the
op modules decide what the bound is and which elements are ambiguous.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields, replace
from typing import Mapping

import torch

from oracles.tolerances import judge_tolerance

MAX_LISTED = 5  # mismatches listed per check; the count of the rest is given

PASS, FAIL, RISK, SKIP, UNTRUSTED, UNSUPPORTED = "pass", "fail", "risk", "skip", "untrusted", "unsupported"
STATUSES = (PASS, FAIL, RISK, UNSUPPORTED, SKIP, UNTRUSTED)

TIE, ILL_CONDITIONED, FTZ, DEGENERATE, PORTABILITY = "tie", "ill-conditioned", "ftz", "degenerate", "portability"
RISK_KINDS = (TIE, ILL_CONDITIONED, FTZ, DEGENERATE, PORTABILITY)
RISK_MEANING = {
    TIE: "a valid top-k whose order among tied scores differs from torch.topk's on this device",
    ILL_CONDITIONED: "kernel and reference differ by float32 rounding on an ill-conditioned input",
    FTZ: "flushing subnormal float32 intermediates to zero (below FLT_MIN = 1.18e-38), as GPUs' approximate "
         "rsqrt/sqrt/div/exp do, explains the difference",
    DEGENERATE: "the float32 reference's own computation overflows, underflows to 0 or inf, or divides 0 by 0 "
                "on this row, so valid float32 orders of operations disagree with each other and with oracle64",
    PORTABILITY: "a problem on another chip the judge runs on",
}


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str = ""
    kind: str = ""  # a risk's kind (RISK_KINDS); an unsupported finding's refusal (exception type and site)
    details: tuple = ()  # an unsupported finding: how the input lies outside the judge domain ('name=value', ...)
    # A bounded check's error margin: the largest |kernel - oracle64| / allowed over the elements it
    # judges (finite, not explained as a risk); above 1 exactly where the check fails. Read, never
    # decided on: hypothesis.target() climbs it toward near-failures (conftest.py Fuzz.record).
    margin: float | None = None

    def __post_init__(self):
        if self.status == RISK and self.kind not in RISK_KINDS:
            raise ValueError(f"Check({self.name!r}): a risk needs a kind from {RISK_KINDS}, got {self.kind!r}")

    def __str__(self) -> str:
        kind = f" ({self.kind})" if self.kind and self.status in (RISK, UNSUPPORTED) else ""
        return f"[{self.name}] {self.status.upper()}{kind}" + (f": {self.message}" if self.message else "")


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The kernel faulted the GPU (illegal address, device-side assert...): this process's CUDA
    # context is gone, so nothing else may run on it (conftest.py Fuzz.record ends the worker).
    device_lost: bool = False

    def add(self, check: Check) -> None:
        self.checks.append(check)

    def failures(self, *, judge_exact: bool = False, strict: bool = False) -> list[Check]:
        """The checks that fail the case: `fail`; a tie-order risk under --judge-exact; an
        unsupported input under --strict."""
        return [c for c in self.checks if c.status == FAIL or (judge_exact and c.status == RISK and c.kind == TIE)
                or (strict and c.status == UNSUPPORTED)]

    def risks(self) -> list[Check]:
        return [c for c in self.checks if c.status == RISK]

    def unsupported(self) -> list[Check]:
        return [c for c in self.checks if c.status == UNSUPPORTED]

    def untrusted(self) -> list[Check]:
        return [c for c in self.checks if c.status == UNTRUSTED]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def accuracy_margin(self) -> float | None:
        """How close the case came to failing `accuracy` (Check.margin); None when not judged."""
        return max((c.margin for c in self.checks if c.name == "accuracy" and c.margin is not None), default=None)

    def render(self) -> str:
        lines = [str(c) for c in self.checks if c.status != PASS]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) if lines else "all checks passed"


def fmt(value) -> str:
    """A float printed with enough digits to tell float32 neighbours apart."""
    v = float(value)
    return f"{v:.9g}"


def index_str(flat_index: int, shape: tuple[int, ...]) -> str:
    idx = []
    for n in reversed(shape):
        idx.append(flat_index % n if n else 0)
        flat_index //= max(n, 1)
    return "[" + ", ".join(map(str, reversed(idx))) + "]"


def listed(indices: torch.Tensor, describe, total: int | None = None) -> str:
    """Describe up to MAX_LISTED flat indices; say how many more there are."""
    total = int(indices.numel()) if total is None else total
    shown = [describe(int(i)) for i in indices[:MAX_LISTED].tolist()]
    more = f"; ... and {total - len(shown)} more" if total > len(shown) else ""
    return "; ".join(shown) + more


def on_device(like: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """t detached on `like`'s device: the checks compare where the reference lives, and the
    oracles compute where the case's inputs live (on a GPU, a judge-sized hc_head case is 235M
    float64 values a tensor, seconds to copy and compare on the host; a drawn case may hold its
    small tensors on the host); a kernel output on another kind of device is moved (its contract
    check says so)."""
    return t.detach().to(like.device)


def contract_check(name: str, out, *, shape, dtype, device) -> Check | None:
    """Shape, dtype and device of one output; None when it is right."""
    if not isinstance(out, torch.Tensor):
        return Check("contract", FAIL, f"{name}: expected a torch.Tensor, got {type(out).__name__}")
    problems = []
    if tuple(out.shape) != tuple(shape):
        problems.append(f"shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.dtype != dtype:
        problems.append(f"dtype {out.dtype}, expected {dtype}")
    if out.device.type != torch.device(device).type:
        problems.append(f"device {out.device}, expected {device}")
    if problems:
        return Check("contract", FAIL, f"{name}: " + ", ".join(problems))
    return None


def _explained_kinds(bad: torch.Tensor, explained: Mapping[str, torch.Tensor] | None) -> tuple[torch.Tensor, dict]:
    """Split the flagged elements `bad` into the unexplained ones and, per risk kind, those its
    `explained` mask covers (the first kind that covers an element takes it)."""
    unexplained, by_kind = bad.clone(), {}
    for kind, mask in (explained or {}).items():
        covered = unexplained & mask.to(bad.device).expand_as(bad)
        if bool(covered.any()):
            by_kind[kind] = covered
            unexplained &= ~covered
    return unexplained, by_kind


def _verdict_of(check: str, unexplained_text: str | None, explained_texts: dict[str, str]) -> Check:
    """FAIL when anything is unexplained (the explained part is mentioned too); otherwise a RISK
    of the first kind that explains something; otherwise PASS."""
    also = "".join(f" | also, explained as {kind}: {text}" for kind, text in explained_texts.items())
    if unexplained_text is not None:
        return Check(check, FAIL, unexplained_text + also)
    if explained_texts:
        kind = next(iter(explained_texts))
        rest = "".join(f" | explained as {k}: {t}" for k, t in list(explained_texts.items())[1:])
        return Check(check, RISK, f"{explained_texts[kind]} ({kind}: {RISK_MEANING[kind]}){rest}", kind=kind)
    return Check(check, PASS)


def specials_check(name: str, kernel: torch.Tensor, reference: torch.Tensor, *,
                   ambiguous_inf: torch.Tensor | None = None,
                   explained: Mapping[str, torch.Tensor] | None = None) -> Check:
    """NaN where the reference has NaN and nowhere else; ±inf likewise (the reference defines
    special-value semantics). `ambiguous_inf` marks elements whose float32 result may round to
    ±inf or stay finite (an output at the overflow threshold): either is right there.
    `explained` maps a risk kind to the elements where a different special value is explained by
    it (e.g. `degenerate`: the float32 reference's own normalizer underflowed, so NaN and finite
    both follow from valid float32 orders of operations): a mismatch there is a risk, not a failure."""
    r = reference.detach().double()
    k = on_device(r, kernel).double()
    inf_skip = on_device(r, ambiguous_inf) if ambiguous_inf is not None else torch.zeros_like(k, dtype=torch.bool)
    nan_wrong = k.isnan() != r.isnan()
    inf_wrong = (k.isinf() | r.isinf()) & (k != r) & ~k.isnan() & ~r.isnan() & ~inf_skip

    def describe(i, k=k.flatten(), r=r.flatten()):
        return f"{name}{index_str(i, tuple(kernel.shape))}: kernel {fmt(k[i])}, reference {fmt(r[i])}"

    def text(masks) -> str | None:
        parts = []
        for label, mask in masks:
            bad = mask.flatten().nonzero().flatten()
            if bad.numel():
                parts.append(f"{label}: {bad.numel()} element(s) differ from the reference: " + listed(bad, describe))
        return " | ".join(parts) if parts else None

    nan_left, nan_kinds = _explained_kinds(nan_wrong, explained)
    inf_left, inf_kinds = _explained_kinds(inf_wrong, explained)
    kinds = {}
    for kind in dict.fromkeys([*nan_kinds, *inf_kinds]):
        kinds[kind] = text([("NaN placement", nan_kinds.get(kind, torch.zeros_like(nan_wrong))),
                            ("inf placement", inf_kinds.get(kind, torch.zeros_like(inf_wrong)))])
    return _verdict_of("specials", text([("NaN placement", nan_left), ("inf placement", inf_left)]), kinds)


def bounded_check(check: str, name: str, kernel: torch.Tensor, oracle: torch.Tensor, reference: torch.Tensor,
                  allowed: torch.Tensor, *, explained: Mapping[str, torch.Tensor] | None = None,
                  bound_doc: str = "") -> Check:
    """|kernel - oracle64| <= allowed, elementwise, where kernel, oracle and reference are finite.

    `explained` maps a risk kind to the elements where a value outside the bound is explained by
    it (the op computed that the kernel's value there is one a valid float32 evaluation under that
    condition gives): those are reported as a risk of that kind, the rest as a failure. The
    message lists the worst elements by err/allowed.
    """
    r = reference.detach().double()
    k, o, a = (on_device(r, t).double() for t in (kernel, oracle, allowed))
    finite = k.isfinite() & o.isfinite() & r.isfinite()
    err = (k - o).abs()
    bad = finite & ~(err <= a)
    if not bool(bad.any()):
        return Check(check, PASS, margin=error_margin(err, a, finite))

    def describe(i, k=k.flatten(), o=o.flatten(), r=r.flatten(), e=err.flatten(), a=a.flatten()):
        return (f"{name}{index_str(i, tuple(kernel.shape))}: kernel {fmt(k[i])}, oracle64 {fmt(o[i])}, "
                f"reference {fmt(r[i])}, |err| {e[i]:.3g} > allowed {a[i]:.3g} ({e[i] / a[i]:.3g}x)")

    doc = f" [allowed = {bound_doc}]" if bound_doc else ""

    def text(mask) -> str | None:
        if not bool(mask.any()):
            return None
        ratio = torch.where(mask, err / a.clamp_min(1e-300), torch.zeros_like(err)).flatten()
        worst = torch.argsort(ratio, descending=True)[: int(mask.sum())]
        return f"{int(mask.sum())} element(s) outside the bound{doc}: " + listed(worst, describe)

    left, kinds = _explained_kinds(bad, explained)
    verdict = _verdict_of(check, text(left), {kind: text(mask) for kind, mask in kinds.items()})
    return replace(verdict, margin=error_margin(err, a, finite & ~(bad & ~left)))


def error_margin(err: torch.Tensor, allowed: torch.Tensor, judged: torch.Tensor) -> float:
    """max err / allowed over the `judged` elements (0 when there are none), finite as
    hypothesis.target() needs: an error where nothing is allowed counts as the largest float."""
    ratio = torch.where(allowed > 0, err / allowed.clamp_min(1e-300),
                        torch.where(err > 0, torch.full_like(err, math.inf), torch.zeros_like(err)))
    worst = float(ratio[judged].max()) if bool(judged.any()) else 0.0
    return min(worst, sys.float_info.max)


def judge_on_rows(judge, outputs: dict, references: dict, left_out: torch.Tensor, why: str) -> Check:
    """The judge's check on the rows it can judge: `left_out` (bool [rows]) marks rows whose
    reference no judge accepts for any kernel (NaN under equal_nan off), which the judge never
    sends. `judge(outputs, references)` runs on copies where those rows hold 0 in both, so they
    compare equal and every other row keeps its index; the check says which rows it left out.
    SKIP when it leaves out every row. A case of many independent rows (a GPU case's bulk rows)
    keeps its judge check when a few of them hold NaN."""
    if not bool(left_out.any()):
        return judge(outputs, references)
    rows = left_out.nonzero().flatten()
    shown = rows[:MAX_LISTED].tolist()
    more = f" and {rows.numel() - MAX_LISTED} more" if rows.numel() > MAX_LISTED else ""
    if bool(left_out.all()):
        return Check("judge", SKIP, f"{why} (row(s) {shown}{more})")

    def zeroed(tensors: dict) -> dict:
        return {n: t.index_fill(0, rows.to(t.device), 0) for n, t in tensors.items()}
    check = judge(zeroed(outputs), zeroed(references))
    note = f"{rows.numel()} row(s) left out ({shown}{more}): {why}"
    return replace(check, message=f"{check.message} | {note}" if check.message else note)


def oracle_rows(oracle, rows: torch.Tensor):
    """An op's per-row oracle record (a dataclass whose tensor fields all lead with the row
    dimension; other fields are kept) on `rows` alone (bool [rows] or indices), so that a check
    can be asked of a few rows of a case."""
    picked = {}
    for f in fields(oracle):
        value = getattr(oracle, f.name)
        if isinstance(value, torch.Tensor):
            picked[f.name] = value[rows.to(value.device)]
    return replace(oracle, **picked)


def judge_check(outputs: dict[str, torch.Tensor], references: dict[str, torch.Tensor], *,
                rounding_allowed: dict[str, torch.Tensor] | None = None,
                explained: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
                tolerance_dtype: torch.dtype | None = None) -> Check:
    """What the competition says: assert_close after a float32 cast at the published tolerance
    (of `tolerance_dtype` when the official test fixes one, else of the reference's dtype),
    equal_nan off (any NaN fails), integer outputs exactly.

    Where the judge rejects, the rejection is a risk rather than a failure when every rejected
    element is explained:
    - `explained[kind][name]` (optional): elements where the op found that a valid float32
      evaluation under `kind` (ftz, degenerate) gives the kernel's value; the judge never sends
      such inputs;
    - `rounding_allowed[name]` (optional): per element, how far a correct float32 evaluation may
      sit from the reference — the kernel's accuracy bound plus the reference's own, both from the
      case's magnitudes. Within it, kernel and reference are both right up to float32 rounding and
      differ only because the input is ill-conditioned (cancellation): the judge's verdict is a
      coin flip of summation order (kind ill-conditioned). The judge's own inputs never get there.
    """
    problems, risks = [], []
    for name, ref in references.items():
        out = outputs[name]
        if ref.is_floating_point():
            atol, rtol = judge_tolerance(tolerance_dtype or ref.dtype)
            try:
                torch.testing.assert_close(on_device(ref, out).float(), ref.detach().float(),
                                           atol=atol, rtol=rtol, equal_nan=False)
            except AssertionError as e:
                text = f"{name} (atol {atol}, rtol {rtol}): " + " ".join(str(e).split())
                kind = _explaining_kind(name, out, ref, atol, rtol, rounding_allowed, explained)
                if kind is None:
                    problems.append(text)
                else:
                    risks.append((kind, text))
        elif not torch.equal(on_device(ref, out), ref.detach()):
            diff = (on_device(ref, out) != ref.detach()).flatten().nonzero().flatten()
            problems.append(f"{name}: {diff.numel()} element(s) differ (exact match required), first at "
                            f"{index_str(int(diff[0]), tuple(ref.shape))}")
    also = [f"{text} (explained as {kind})" for kind, text in risks]
    if problems:
        return Check("judge", FAIL, " | ".join(problems + also))
    if risks:
        kind = risks[0][0]
        why = ("kernel and reference differ only by float32 rounding on an ill-conditioned input (both within "
               "the accuracy bound of oracle64)" if kind == ILL_CONDITIONED else
               f"every rejected element is explained ({kind}: {RISK_MEANING[kind]})")
        return Check("judge", RISK, f"the judge would reject this input, but {why}: " + " | ".join(also), kind=kind)
    return Check("judge", PASS)


def _explaining_kind(name, out, ref, atol, rtol, rounding_allowed, explained) -> str | None:
    """The risk kind that explains every element the judge rejects (the first that explains any,
    op-specific kinds before ill-conditioning), or None when some rejected element is unexplained."""
    r = ref.detach().double()
    o = on_device(r, out).double()
    close = (o == r) | ((o - r).abs() <= atol + rtol * r.abs())  # NaN on either side: not close
    left = ~close
    first = None
    masks = [(kind, on_device(r, by_name[name]).expand_as(left)) for kind, by_name in (explained or {}).items()
             if name in by_name]
    if rounding_allowed is not None and name in rounding_allowed:
        a = on_device(r, rounding_allowed[name]).double()
        masks.append((ILL_CONDITIONED, o.isfinite() & r.isfinite() & ((o - r).abs() <= a)))
    for kind, mask in masks:
        if bool((left & mask).any()):
            first = first or kind
            left = left & ~mask
    return first if not bool(left.any()) else None
