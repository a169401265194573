"""The pre-submission gate's bookkeeping: tallies of every verdict, merged into one verdict table
per implementation and an equivalent JSON report (schema: oracles/gate_report.schema.json).

Workers (pytest-xdist) tally what their tests saw and attach the tally to the test report;
the controller merges tallies, crash reports, static findings and new fixtures per
implementation. Everything here is plain data: JSON-able dicts, so it crosses process bounds.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone

from oracles.verdict import FAIL, PASS, RISK, SKIP, UNTRUSTED, Verdict

STATUSES = (PASS, FAIL, RISK, SKIP, UNTRUSTED)
MAX_RISKS = 10
REPORT_FORMAT = 1

# Where a tally comes from, by test: drawn cases, the judge's fixed cases, the fixture corpus.
KINDS = ("fuzz", "judge", "fixture", "static")


@dataclass
class Tally:
    op: str
    implementation: str
    kind: str
    examples: int = 0
    checks: dict = field(default_factory=lambda: defaultdict(Counter))
    risks: list = field(default_factory=list)
    budget_exhausted: bool = False
    judge_exact: bool = False

    def add(self, verdict: Verdict) -> None:
        self.examples += 1
        for check in verdict.checks:
            status = FAIL if (self.judge_exact and check.status == RISK) else check.status
            self.checks[check.name][status] += 1
            if check.status == RISK and len(self.risks) < MAX_RISKS and check.message not in self.risks:
                self.risks.append(check.message)

    def to_json(self) -> dict:
        return {"op": self.op, "implementation": self.implementation, "kind": self.kind,
                "examples": self.examples, "checks": {k: dict(v) for k, v in self.checks.items()},
                "risks": self.risks, "budget_exhausted": self.budget_exhausted}


@dataclass
class ImplementationSummary:
    op: str
    name: str
    source: str = ""
    elapsed_s: float = 0.0
    tests_failed: int = 0
    examples: Counter = field(default_factory=Counter)
    checks: dict = field(default_factory=lambda: defaultdict(Counter))
    judge_official: Counter = field(default_factory=Counter)
    risks: list = field(default_factory=list)
    budget_exhausted: bool = False
    static_findings: list = field(default_factory=list)
    new_fixtures: list = field(default_factory=list)
    crashes: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def merge_tally(self, tally: dict, *, passed: bool) -> None:
        self.examples[tally["kind"]] += tally["examples"]
        for name, counts in tally["checks"].items():
            self.checks[name].update(counts)
        self.risks += [r for r in tally["risks"] if r not in self.risks][: MAX_RISKS - len(self.risks)]
        self.budget_exhausted |= tally["budget_exhausted"]
        if tally["kind"] == "judge":
            self.judge_official["passed" if passed else "failed"] += 1

    def all_notes(self) -> list:
        """The notes, and one more when some cases could not be judged here: a PASS that rests
        on untrusted cases must say so."""
        untrusted = max((c[UNTRUSTED] for c in self.checks.values()), default=0)
        if not untrusted:
            return list(self.notes)
        return list(self.notes) + [f"{untrusted} case(s) untrusted: the CPU interpreter could not judge them (a "
                                   f"feature it lacks, or bf16 it cannot compute exactly); run on a GPU before "
                                   f"trusting this verdict"]

    @property
    def verdict(self) -> str:
        failed = self.tests_failed or self.crashes or any(c[FAIL] for c in self.checks.values()) or \
            any(f["severity"] == "error" for f in self.static_findings)
        return "FAIL" if failed else "PASS"

    def to_json(self, budget_s) -> dict:
        return {
            "op": self.op, "implementation": self.name, "source": self.source, "verdict": self.verdict.lower(),
            "elapsed_s": round(self.elapsed_s, 2),
            "examples": {kind: self.examples.get(kind, 0) for kind in ("fuzz", "judge", "fixture")},
            "budget": {"seconds": budget_s, "exhausted": self.budget_exhausted},
            "checks": {name: {s: counts.get(s, 0) for s in STATUSES} for name, counts in sorted(self.checks.items())},
            "judge_official": {k: self.judge_official.get(k, 0) for k in ("passed", "failed", "skipped")},
            "judge_risks": self.risks,
            "static_findings": self.static_findings,
            "new_fixtures": self.new_fixtures,
            "crashes": self.crashes,
            "notes": self.all_notes(),
        }


def render_table(s: ImplementationSummary, budget_s) -> str:
    lines = [f"{s.op} / {s.name}: {s.verdict}  ({s.elapsed_s:.1f} s)"]
    lines.append(f"  {'check':<18}" + "".join(f"{st:>10}" for st in STATUSES))
    for name, counts in sorted(s.checks.items()):
        lines.append(f"  {name:<18}" + "".join(f"{counts.get(st, 0):>10}" for st in STATUSES))
    fuzz = s.examples.get("fuzz", 0)
    budget = (f" (budget {budget_s:g} s reached: stopped after {fuzz})" if s.budget_exhausted
              else f" (within budget {budget_s:g} s)" if budget_s else "")
    lines.append(f"  examples: {fuzz} drawn{budget}, {s.examples.get('judge', 0)} judge cases, "
                 f"{s.examples.get('fixture', 0)} fixtures replayed")
    j = s.judge_official
    lines.append(f"  judge on its official cases: {'FAIL' if j['failed'] else 'PASS'} "
                 f"({j['passed']} passed, {j['failed']} failed, {j['skipped']} skipped)")
    if s.risks:
        lines.append(f"  judge risks ({len(s.risks)}): correct, but the judge may still reject these inputs:")
        lines += [f"    - {r}" for r in s.risks]
    errors = sum(f["severity"] == "error" for f in s.static_findings)
    lines.append(f"  static findings: {errors} error(s), {len(s.static_findings) - errors} other")
    lines += [f"    {f['path']}:{f['line']}:{f['col']}: {f['severity']} [{f['rule']}] {f['message']}"
              + (f" (at risk: {', '.join(f['backends'])})" if f.get("backends") else "")
              for f in s.static_findings]
    for crash in s.crashes:
        lines.append(f"  CRASH: {crash}")
    if s.new_fixtures:
        lines.append("  new fixtures:")
        lines += [f"    {f['path']}\n      replay: {f['replay']}" for f in s.new_fixtures]
    lines += [f"  note: {n}" for n in s.all_notes()]
    return "\n".join(lines)


def report_json(summaries, *, device: str, profile: str, budget_s) -> dict:
    return {
        "tritonfuzz_gate_report": REPORT_FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "hypothesis_profile": profile,
        "verdict": "fail" if any(s.verdict == "FAIL" for s in summaries) else "pass",
        "implementations": [s.to_json(budget_s) for s in summaries],
    }


def dumps(report: dict) -> str:
    return json.dumps(report, indent=1, allow_nan=False) + "\n"
