"""The pre-submission gate's bookkeeping: tallies of every verdict, merged into one verdict table
per implementation and an equivalent JSON report (schema: oracles/gate/report.schema.json).

Workers (pytest-xdist) tally what their tests saw and attach the tally to the test report;
the controller merges tallies, crash reports, static findings and new fixtures per
implementation. Everything here is plain data: JSON-able dicts, so it crosses process bounds.

Every test of an implementation is accounted for: it ran (passed, failed or crashed), or it did
not, and then the table and the report say why -- skipped (with pytest's reason), an error in
its setup, deselected (-k, -m, --deselect), or never started (the run stopped first). An
implementation none of whose tests ran is NOT RUN, one whose tests were cut short by the run
stopping is INCOMPLETE: never PASS.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone

from oracles.verdict import FAIL, RISK, RISK_KINDS, RISK_MEANING, STATUSES, TIE, UNSUPPORTED, UNTRUSTED, Verdict

MAX_RISKS_PER_KIND = 3   # example messages kept per risk kind (all are counted)
MAX_MESSAGE = 600        # characters of a risk or refusal message kept in the report
REPORT_FORMAT = 3

# Where a tally comes from, by test: drawn cases, the judge's fixed cases, the fixture corpus.
KINDS = ("fuzz", "judge", "fixture", "static")

# Why a test of an implementation did not run (besides pytest's skip reasons and setup errors).
DESELECTED = "deselected (-k, -m or --deselect)"
NEVER_STARTED = "never started (the run stopped first: -x, --maxfail, an interrupt, or a crashed worker not replaced)"
RAN = "ran"
VERDICTS = ("PASS", "FAIL", "ERROR", "NOT RUN", "INCOMPLETE")


@dataclass
class Tally:
    op: str
    implementation: str
    kind: str
    test: str = ""                                          # the test's id without its shard (fuzz.unsharded)
    examples: int = 0
    rows: int = 0                                           # rows (tokens) of the cases, summed
    checks: dict = field(default_factory=lambda: defaultdict(Counter))
    risk_counts: Counter = field(default_factory=Counter)   # cases with a risk of each kind
    risks: list = field(default_factory=list)               # {kind, check, message}, a few per kind
    unsupported: dict = field(default_factory=dict)         # refusal -> add_refusal's entry
    budget_exhausted: bool = False
    abandoned: int = 0                                      # cases left unjudged: still compiling at the budget's end
    seconds: float = 0.0                                    # from the first case's start to the last one's end
    judge_exact: bool = False
    strict: bool = False

    def add(self, verdict: Verdict, case_summary: str = "", rows: int = 0) -> None:
        self.examples += 1
        self.rows += rows
        for check in verdict.checks:
            status = check.status
            if (self.judge_exact and status == RISK and check.kind == TIE) or (self.strict and status == UNSUPPORTED):
                status = FAIL
            self.checks[check.name][status] += 1
        for kind in dict.fromkeys(c.kind for c in verdict.risks()):
            self.risk_counts[kind] += 1
        for check in verdict.risks():
            if sum(r["kind"] == check.kind for r in self.risks) < MAX_RISKS_PER_KIND:
                self.risks.append({"kind": check.kind, "check": check.name, "message": check.message[:MAX_MESSAGE],
                                   "case": case_summary[:MAX_MESSAGE]})
        for check in verdict.unsupported():
            add_refusal(self.unsupported, {"refusal": check.kind, "violations": violations(check.details),
                                           "message": check.message[:MAX_MESSAGE], "case": case_summary[:MAX_MESSAGE],
                                           "count": 1, "fixture": None, "replay": None})

    def is_new_unsupported(self, refusal: str) -> bool:
        entry = self.unsupported.get(refusal)
        return entry is not None and entry["count"] == 1

    def to_json(self) -> dict:
        return {"op": self.op, "implementation": self.implementation, "kind": self.kind,
                "examples": self.examples, "rows": self.rows, "checks": {k: dict(v) for k, v in self.checks.items()},
                "risk_counts": dict(self.risk_counts), "risks": self.risks,
                "unsupported": list(self.unsupported.values()), "budget_exhausted": self.budget_exhausted,
                "abandoned": self.abandoned, "seconds": round(self.seconds, 3), "test": self.test}


@dataclass
class ImplementationSummary:
    op: str
    name: str
    source: str = ""
    elapsed_s: float = 0.0  # its tests' durations, summed (worker time)
    spans: list = field(default_factory=list)  # (start, stop) of each of its tests' phases, epoch seconds
    seconds_by_test: dict = field(default_factory=dict)  # (kind, unsharded test id) -> seconds its cases took
    tests_failed: int = 0
    examples: Counter = field(default_factory=Counter)
    rows: Counter = field(default_factory=Counter)
    checks: dict = field(default_factory=lambda: defaultdict(Counter))
    judge_official: Counter = field(default_factory=Counter)
    risk_counts: Counter = field(default_factory=Counter)
    risks: list = field(default_factory=list)
    unsupported: dict = field(default_factory=dict)
    strict: bool = False
    budget_exhausted: bool = False
    abandoned: int = 0  # drawn cases left unjudged: a Triton compile still running when the budget ran out
    seconds: Counter = field(default_factory=Counter)  # kind -> seconds its cases took, start to end
    static_findings: list = field(default_factory=list)
    new_fixtures: list = field(default_factory=list)
    crashes: list = field(default_factory=list)
    suite_errors: list = field(default_factory=list)  # tritonfuzz's own errors: never a verdict on the kernel
    notes: list = field(default_factory=list)
    memcheck: dict | None = None  # --memcheck: the compute-sanitizer replay (oracles/platform/compute_sanitizer.py)
    tests: dict = field(default_factory=dict)       # test id -> RAN, or why it did not run (record_test)
    collected: set = field(default_factory=set)     # test ids collected for it (oracles/gate/accounting.py; empty: unknown)
    deselected: int = 0

    def note_span(self, start: float | None, stop: float | None) -> None:
        if start is not None and stop is not None and stop >= start:
            self.spans.append((start, stop))

    @property
    def wall_s(self) -> float:
        """The time while any of its tests ran: the union of their spans. With several workers
        (-n, --gate-shards) its tests overlap and their summed durations overstate the wait (529 s
        summed against a 113 s run, H200, 2026-12-02); in one worker the tests of other
        implementations run between its own and do not count. The sum when the reports carry no
        times."""
        if not self.spans:
            return self.elapsed_s
        total, end = 0.0, None
        for start, stop in sorted(self.spans):
            if end is None or start > end:
                total, end = total + (stop - start), stop
            elif stop > end:
                total, end = total + (stop - end), stop
        return total

    def record_test(self, nodeid: str, when: str, outcome: str, reason: str = "") -> None:
        """One report of one of its tests: `when` setup / call / teardown / ??? (a crashed worker's);
        `outcome` passed / failed / skipped; `reason` a skip's reason or an error's first line."""
        if when == "???" or (when == "call" and outcome != "skipped"):
            self.tests[nodeid] = RAN
        elif outcome == "skipped" and when in ("setup", "call"):
            self.tests[nodeid] = f"skipped: {reason}"
        elif outcome == "failed" and when == "setup":
            self.tests[nodeid] = f"error in setup: {reason}"

    @property
    def tests_ran(self) -> int:
        return sum(v == RAN for v in self.tests.values())

    def not_run(self) -> Counter:
        """Why tests did not run, with how many: skip reasons, setup errors, deselection, and the
        collected tests that never started."""
        reasons = Counter(v for v in self.tests.values() if v != RAN)
        if self.deselected:
            reasons[DESELECTED] += self.deselected
        never = len(self.collected - set(self.tests))
        if never:
            reasons[NEVER_STARTED] += never
        return reasons

    def _ran_anything(self) -> bool:
        """A test ran, or cases were judged (a summary built from tallies alone)."""
        return bool(self.tests_ran or any(sum(c.values()) for c in self.checks.values()))

    def merge_tally(self, tally: dict, *, passed: bool) -> None:
        self.examples[tally["kind"]] += tally["examples"]
        self.rows[tally["kind"]] += tally.get("rows", 0)
        for name, counts in tally["checks"].items():
            self.checks[name].update(counts)
        self.risk_counts.update(tally["risk_counts"])
        for risk in tally["risks"]:
            if sum(r["kind"] == risk["kind"] for r in self.risks) < MAX_RISKS_PER_KIND:
                self.risks.append(risk)
        for entry in tally["unsupported"]:
            add_refusal(self.unsupported, entry)
        self.budget_exhausted |= tally["budget_exhausted"]
        self.abandoned += tally.get("abandoned", 0)
        # Summed over tests; over the shards of one property (they draw at once, each for the
        # whole budget, under one unsharded test id) the longest one's.
        kind = tally["kind"]
        key = (kind, tally.get("test") or len(self.seconds_by_test))  # no id: a test of its own
        self.seconds_by_test[key] = max(self.seconds_by_test.get(key, 0.0), tally.get("seconds", 0.0))
        self.seconds[kind] = sum(v for (k, _), v in self.seconds_by_test.items() if k == kind)
        if tally["kind"] == "judge":
            untrusted = any(counts.get(UNTRUSTED) for counts in tally["checks"].values())
            self.judge_official["failed" if not passed else "untrusted" if untrusted else "passed"] += 1

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
        """FAIL on any failure; else ERROR when the suite failed (its own error, a test's setup);
        else NOT RUN when no test ran, INCOMPLETE when the run stopped before some; else PASS."""
        failed = self.tests_failed or self.crashes or any(c[FAIL] for c in self.checks.values()) or \
            any(f["severity"] == "error" for f in self.static_findings) or (self.strict and self.unsupported) or \
            (self.memcheck is not None and self.memcheck["status"] == "fail")
        if failed:
            return "FAIL"
        if self.suite_errors or any(v.startswith("error in setup") for v in self.tests.values()):
            return "ERROR"
        if not self._ran_anything():
            return "NOT RUN"
        if self.collected - set(self.tests):
            return "INCOMPLETE"
        return "PASS"

    def tests_json(self) -> dict:
        return {"collected": len(self.collected | set(self.tests)) + self.deselected, "ran": self.tests_ran,
                "not_run": [{"reason": r, "count": n} for r, n in self.not_run().most_common()]}

    def to_json(self, budget_s) -> dict:
        return {
            "op": self.op, "implementation": self.name, "source": self.source, "verdict": self.verdict.lower(),
            "elapsed_s": round(self.wall_s, 2),
            "examples": {kind: self.examples.get(kind, 0) for kind in ("fuzz", "judge", "fixture")},
            "rows": {kind: self.rows.get(kind, 0) for kind in ("fuzz", "judge", "fixture")},
            "budget": {"seconds": budget_s, "exhausted": self.budget_exhausted,
                       "drawn_s": round(self.seconds.get("fuzz", 0.0), 2), "abandoned": self.abandoned},
            "checks": {name: {s: counts.get(s, 0) for s in STATUSES} for name, counts in sorted(self.checks.items())},
            "judge_official": {k: self.judge_official.get(k, 0) for k in ("passed", "failed", "skipped", "untrusted")},
            "risk_counts": {kind: self.risk_counts[kind] for kind in RISK_KINDS if self.risk_counts[kind]},
            "risks": self.risks,
            "unsupported": [{**e, "input_class": input_class(e["violations"])}
                            for e in sorted(self.unsupported.values(), key=lambda e: -e["count"])],
            "static_findings": self.static_findings,
            "new_fixtures": self.new_fixtures,
            "crashes": self.crashes,
            "suite_errors": self.suite_errors,
            "memcheck": self.memcheck,
            "tests": self.tests_json(),
            "notes": self.all_notes(),
        }


def _budget_note(s: ImplementationSummary, budget_s) -> str:
    """How the drawn phase ended against --gate-budget. On a GPU a launch stops waiting for its
    Triton compile at the budget's end (oracles/platform/compile_deadline.py) and that case is left
    unjudged; the rest of a case in flight (the kernel, the oracle, the checks) finishes, so the
    phase can still end a little past the budget: the table says so rather than hide it."""
    if not budget_s:
        return ""
    if not s.budget_exhausted:
        return f" (within budget {budget_s:g} s)"
    over = s.seconds.get("fuzz", 0.0) - budget_s
    past = f"; the last case in flight ended {over:.0f} s past it" if over >= 1 else ""
    left = (f"; {s.abandoned} case(s) still compiling at the budget's end left unjudged (the compile goes on "
            f"in the background)") if s.abandoned else ""
    return f" (budget {budget_s:g} s reached: stopped after {s.examples.get('fuzz', 0)}{past}{left})"


def render_table(s: ImplementationSummary, budget_s) -> str:
    lines = [f"{s.op} / {s.name}: {s.verdict}  ({s.wall_s:.1f} s)"]
    lines.append(f"  {'check':<18}" + "".join(f"{st:>12}" for st in STATUSES))
    for name, counts in sorted(s.checks.items()):
        lines.append(f"  {name:<18}" + "".join(f"{counts.get(st, 0):>12}" for st in STATUSES))
    fuzz = s.examples.get("fuzz", 0)
    lines.append(f"  examples: {fuzz} drawn ({s.rows.get('fuzz', 0)} rows) in {s.seconds.get('fuzz', 0.0):.0f} s"
                 f"{_budget_note(s, budget_s)}, {s.examples.get('judge', 0)} judge cases, "
                 f"{s.examples.get('fixture', 0)} fixtures replayed")
    tests = s.tests_json()
    not_run = tests["not_run"]
    lines.append(f"  tests: {tests['ran']} of {tests['collected']} ran"
                 + (f"; {sum(e['count'] for e in not_run)} did not run:" if not_run else ""))
    lines += [f"    {e['count']} {_short(e['reason'], 200)}" for e in not_run]
    j = s.judge_official
    ran = j["passed"] + j["failed"]
    judged = "FAIL" if j["failed"] else "PASS" if ran else "NOT RUN"
    untrusted = f", {j['untrusted']} untrusted (not judged on this platform)" if j["untrusted"] else ""
    lines.append(f"  judge on its official cases: {judged} "
                 f"({j['passed']} passed, {j['failed']} failed, {j['skipped']} skipped{untrusted})")
    if s.risk_counts:
        counts = ", ".join(f"{kind} {s.risk_counts[kind]}" for kind in RISK_KINDS if s.risk_counts[kind])
        lines.append(f"  risks (cases, by kind; reported, not failures): {counts}")
        for kind in RISK_KINDS:
            examples = [r for r in s.risks if r["kind"] == kind]
            if examples:
                lines.append(f"    {kind}: {RISK_MEANING[kind]}; e.g.")
                lines += [f"      - [{r['check']}] {_short(r['message'])}" for r in examples[:2]]
    if s.unsupported:
        verdict = "each fails the gate under --strict" if s.strict else "reported, not failures (--strict fails them)"
        lines.append(f"  unsupported inputs ({len(s.unsupported)} refusal(s) of valid inputs outside the judge's "
                     f"domain; {verdict}):")
        for e in sorted(s.unsupported.values(), key=lambda e: -e["count"]):
            lines.append(f"    - {e['refusal']} on {input_class(e['violations'])} ({e['count']} case(s)): "
                         f"{_short(e['message'].split('; this input is outside')[0])}")
            if e["fixture"]:
                lines.append(f"      fixture: {e['fixture']}\n      replay: {e['replay']}")
    errors = sum(f["severity"] == "error" for f in s.static_findings)
    lines.append(f"  static findings: {errors} error(s), {len(s.static_findings) - errors} other")
    lines += [f"    {f['path']}:{f['line']}:{f['col']}: {f['severity']} [{f['rule']}] {f['message']}"
              + (f" (at risk: {', '.join(f['backends'])})" if f.get("backends") else "")
              for f in s.static_findings]
    if s.memcheck is not None:
        m = s.memcheck
        lines.append(f"  memcheck (compute-sanitizer, judge cases and fixtures): {m['status'].upper()}"
                     + (f" ({m['errors']} error(s))" if m["status"] == "fail" else ""))
        lines += [f"    {_short(message)}" for message in m["messages"][:5]]
        if m["command"] and m["status"] != "pass":
            lines.append(f"    rerun: {m['command']}")
    for crash in s.crashes:
        lines.append(f"  CRASH: {crash}")
    for error in s.suite_errors:
        lines.append(f"  TRITONFUZZ ERROR (the suite's, not the kernel's; exit code 3): {_short(error, 400)}")
    if s.new_fixtures:
        lines.append(f"  new fixtures ({len(s.new_fixtures)}; one per distinct bug and test):")
        for f in s.new_fixtures:
            lines.append((f"    {f['bug']}: " if f.get("bug") else "    ") + f["path"])
            if f.get("nonfinite_inputs"):
                lines.append(f"      {judge_never_sends(f['nonfinite_inputs'], f.get('finite_twin', ''))}")
            lines.append(f"      replay: {f['replay']}")
    lines += [f"  note: {n}" for n in s.all_notes()]
    return "\n".join(lines)


def judge_never_sends(nonfinite_inputs, finite_twin: str = "") -> str:
    """The note under a fixture whose case holds NaN or inf. No judge run meets such a case (the
    judge's inputs are always finite); `finite_twin` (Failure.finite_twin) says whether the case
    with those values set to 0 fails too, which makes the bug one a judge run can meet."""
    held = f"its inputs hold NaN or inf ({', '.join(nonfinite_inputs)})"
    if finite_twin == "fails":
        return f"{held}, and with them set to 0 it still fails: the bug shows on finite inputs too"
    return f"{held}: no judge run meets this case (the judge's inputs are always finite)"


def violations(details) -> dict:
    """('x.dtype=float16', 'T=0', ...) -> {'x.dtype': ['float16'], 'T': ['0']}."""
    out = {}
    for item in details:
        key, _, value = item.partition("=")
        out.setdefault(key, [])
        if value not in out[key]:
            out[key].append(value)
    return out


def add_refusal(entries: dict, entry: dict) -> None:
    """Merge one refusal entry (a tally's, or one case's) into `entries` by its refusal site. The
    input class is what every case of that refusal has in common: the domain violations present
    in all of them (a key kept only if every case has it), each with the values seen."""
    mine = entries.get(entry["refusal"])
    if mine is None:
        entries[entry["refusal"]] = {**entry, "violations": {k: list(v) for k, v in entry["violations"].items()}}
        return
    mine["count"] += entry["count"]
    common = {}
    for key, values in mine["violations"].items():
        if key in entry["violations"]:
            common[key] = values + [v for v in entry["violations"][key] if v not in values]
    mine["violations"] = common
    if mine["fixture"] is None and entry["fixture"]:
        mine["fixture"], mine["replay"] = entry["fixture"], entry["replay"]


def input_class(violation_map: dict) -> str:
    """{'x.dtype': ['float16', 'float32']} -> 'x.dtype in {float16, float32}'."""
    if not violation_map:
        return "inputs outside the judge domain (no one common way)"
    parts = []
    for key, values in violation_map.items():
        parts.append(f"{key}={values[0]}" if len(values) == 1 and values[0] else
                     f"{key} in {{{', '.join(sorted(values))}}}" if values[0] else key)
    return ", ".join(parts)


def _short(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def report_json(summaries, *, device: str, profile: str, budget_s) -> dict:
    return {
        "tritonfuzz_gate_report": REPORT_FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "hypothesis_profile": profile,
        "verdict": overall_verdict(summaries).lower(),
        "implementations": [s.to_json(budget_s) for s in summaries],
    }


def overall_verdict(summaries) -> str:
    """The run's verdict: the first of FAIL, ERROR, NOT RUN, INCOMPLETE that any implementation
    has, else PASS (no implementation at all: NOT RUN)."""
    verdicts = {s.verdict for s in summaries}
    for verdict in ("FAIL", "ERROR", "NOT RUN", "INCOMPLETE"):
        if verdict in verdicts:
            return verdict
    return "PASS" if verdicts else "NOT RUN"


def dumps(report: dict) -> str:
    return json.dumps(report, indent=1, allow_nan=False) + "\n"
