"""Verdicts: separate, named checks whose messages stand alone.

A Verdict is a list of Checks. Each Check has a name (contract, specials, accuracy, judge,
indices, and the sanitizers' names), a status and a message that says where (index), the kernel,
oracle64 and reference values, and the allowed error. Statuses:

- pass: nothing wrong.
- fail: the kernel is wrong by this check.
- risk: correct, but the judge may still reject it (e.g. a top-k tie ordered differently from
  torch.topk on the judge's device). Fails only under --judge-exact.
- skip: the check does not apply to this case (e.g. judge when the reference itself is NaN).
- untrusted: the result cannot be trusted on this platform (e.g. bf16 arithmetic under the CPU
  interpreter); never a failure, always reported.

The shared comparison helpers below implement the policy that is the same for every op; the
op modules decide what the bound is and which elements are ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from oracles.tolerances import judge_tolerance

MAX_LISTED = 5  # mismatches listed per check; the count of the rest is given

PASS, FAIL, RISK, SKIP, UNTRUSTED = "pass", "fail", "risk", "skip", "untrusted"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str = ""

    def __str__(self) -> str:
        return f"[{self.name}] {self.status.upper()}" + (f": {self.message}" if self.message else "")


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, check: Check) -> None:
        self.checks.append(check)

    def failures(self, *, judge_exact: bool = False) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL or (judge_exact and c.status == RISK)]

    def risks(self) -> list[Check]:
        return [c for c in self.checks if c.status == RISK]

    def untrusted(self) -> list[Check]:
        return [c for c in self.checks if c.status == UNTRUSTED]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

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


def specials_check(name: str, kernel: torch.Tensor, reference: torch.Tensor,
                   *, ambiguous_inf: torch.Tensor | None = None, ambiguous_all: torch.Tensor | None = None) -> Check:
    """NaN where the reference has NaN and nowhere else; ±inf likewise (the reference defines
    special-value semantics). `ambiguous_inf` marks elements whose float32 evaluation may or may
    not overflow depending on summation order (finite or ±inf both accepted there);
    `ambiguous_all` marks elements where even NaN depends on evaluation order."""
    k, r = kernel.detach().cpu().double(), reference.detach().cpu().double()
    skip = torch.zeros_like(k, dtype=torch.bool)
    if ambiguous_all is not None:
        skip |= ambiguous_all.cpu()
    nan_wrong = (k.isnan() != r.isnan()) & ~skip
    inf_skip = skip | (ambiguous_inf.cpu() if ambiguous_inf is not None else skip)
    inf_wrong = ((k.isinf() | r.isinf()) & (k != r) & ~k.isnan() & ~r.isnan()) & ~inf_skip
    problems = []
    for label, mask in (("NaN placement", nan_wrong), ("inf placement", inf_wrong)):
        bad = mask.flatten().nonzero().flatten()
        if bad.numel():
            def describe(i, k=k.flatten(), r=r.flatten()):
                return f"{name}{index_str(i, tuple(kernel.shape))}: kernel {fmt(k[i])}, reference {fmt(r[i])}"
            problems.append(f"{label}: {bad.numel()} element(s) differ from the reference: " + listed(bad, describe))
    return Check("specials", FAIL, " | ".join(problems)) if problems else Check("specials", PASS)


def bounded_check(check: str, name: str, kernel: torch.Tensor, oracle: torch.Tensor, reference: torch.Tensor,
                  allowed: torch.Tensor, *, accept: torch.Tensor | None = None, bound_doc: str = "") -> Check:
    """|kernel - oracle64| <= allowed, elementwise, where kernel, oracle and reference are finite.

    `accept` marks elements that passed by an alternative rule (e.g. matching the float32
    reference where the reference diverges from the oracle); they are not reported.
    The message lists the worst elements by err/allowed.
    """
    k = kernel.detach().cpu().double()
    o = oracle.detach().cpu().double()
    r = reference.detach().cpu().double()
    a = allowed.detach().cpu().double()
    finite = k.isfinite() & o.isfinite() & r.isfinite()
    err = (k - o).abs()
    bad = finite & ~(err <= a)
    if accept is not None:
        bad &= ~accept.cpu()
    if not bool(bad.any()):
        return Check(check, PASS)
    ratio = torch.where(bad, err / a.clamp_min(1e-300), torch.zeros_like(err)).flatten()
    order = torch.argsort(ratio, descending=True)
    worst = order[: int(bad.sum())]

    def describe(i, k=k.flatten(), o=o.flatten(), r=r.flatten(), e=err.flatten(), a=a.flatten()):
        return (f"{name}{index_str(i, tuple(kernel.shape))}: kernel {fmt(k[i])}, oracle64 {fmt(o[i])}, "
                f"reference {fmt(r[i])}, |err| {e[i]:.3g} > allowed {a[i]:.3g} ({e[i] / a[i]:.3g}x)")

    doc = f" [allowed = {bound_doc}]" if bound_doc else ""
    return Check(check, FAIL, f"{int(bad.sum())} element(s) outside the bound{doc}: " + listed(worst, describe))


def judge_check(outputs: dict[str, torch.Tensor], references: dict[str, torch.Tensor],
                *, rounding_allowed: dict[str, torch.Tensor] | None = None) -> Check:
    """What the competition says: assert_close after a float32 cast at the published tolerance,
    equal_nan off (any NaN fails), integer outputs exactly.

    `rounding_allowed[name]` (optional): per element, how far a correct float32 evaluation may
    sit from the reference — the kernel's accuracy bound plus the reference's own, both from
    the case's magnitudes. Where every element the judge rejects lies within it, the kernel and
    the reference are both right up to float32 rounding and differ only because this input is
    ill-conditioned (cancellation): the judge's verdict is then a coin flip of summation order,
    reported as a risk rather than a failure. The judge's own inputs (randn) never get there.
    """
    problems, risks = [], []
    for name, ref in references.items():
        out = outputs[name]
        if ref.is_floating_point():
            atol, rtol = judge_tolerance(ref.dtype)
            try:
                torch.testing.assert_close(out.detach().float().cpu(), ref.detach().float().cpu(),
                                           atol=atol, rtol=rtol, equal_nan=False)
            except AssertionError as e:
                text = f"{name} (atol {atol}, rtol {rtol}): " + " ".join(str(e).split())
                explained = rounding_allowed is not None and name in rounding_allowed and \
                    _within_rounding(out, ref, rounding_allowed[name], atol, rtol)
                (risks if explained else problems).append(text)
        elif not torch.equal(out.detach().cpu(), ref.detach().cpu()):
            diff = (out.detach().cpu() != ref.detach().cpu()).flatten().nonzero().flatten()
            problems.append(f"{name}: {diff.numel()} element(s) differ (exact match required), first at "
                            f"{index_str(int(diff[0]), tuple(ref.shape))}")
    if problems:
        return Check("judge", FAIL, " | ".join(problems + risks))
    if risks:
        return Check("judge", RISK, "the judge would reject this input, but kernel and reference differ only "
                                    "by float32 rounding on an ill-conditioned input (both within the accuracy "
                                    "bound of oracle64): " + " | ".join(risks))
    return Check("judge", PASS)


def _within_rounding(out, ref, allowed, atol, rtol) -> bool:
    o, r, a = out.detach().cpu().double(), ref.detach().cpu().double(), allowed.detach().cpu().double()
    rejected = ~((o - r).abs() <= atol + rtol * r.abs())
    if not bool(o[rejected].isfinite().all() and r[rejected].isfinite().all()):
        return False
    return bool(((o - r).abs() <= a)[rejected].all())
