"""The gate's verdict, on the controller: merges tallies, fixtures, static findings and crashes per
implementation; prints the verdict tables (gate runs, or when --gate-report is given) and writes
the JSON report; sets the exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from oracles.gate import accounting
from oracles.gate.fuzz import GPU_SHARING, KERNELS, ROOT, strict
from oracles.gate.report import ImplementationSummary, dumps, overall_verdict, render_table, report_json
from oracles.harness.inflight import crashed_case_verdict, inflight_dir
from oracles.platform.device import gpu_available, suite_device


class GateSummary:
    """On the controller: merges tallies, fixtures, static findings and crashes per implementation;
    prints the verdict tables (gate runs, or when --gate-report is given) and writes the JSON."""

    def __init__(self, config):
        self.config = config
        self.summaries: dict[tuple[str, str], ImplementationSummary] = {}
        self.fixtures: list[dict] = []

    def summary(self, op: str, name: str) -> ImplementationSummary:
        key = (op, name)
        if key not in self.summaries:
            self.summaries[key] = ImplementationSummary(op, name, strict=strict(self.config))
        return self.summaries[key]

    def pytest_runtest_logreport(self, report):
        impl = implementation_key(report)
        if impl is not None:
            s = self.summary(*impl)
            s.elapsed_s += report.duration
            s.note_span(getattr(report, "start", None), getattr(report, "stop", None))
            suite_only = report.failed and any(n == "tritonfuzz_suite_error" for n, _ in report.user_properties) \
                and not any(n == "tritonfuzz_fixture" for n, _ in report.user_properties)
            if report.failed and not suite_only and report.when != "setup":  # a setup error: the suite's, below
                s.tests_failed += 1
            s.record_test(report.nodeid, report.when, report.outcome,
                          accounting.not_run_reason(report) if report.skipped or report.failed else "")
            if report.skipped and report_role(report) == "judge":
                s.judge_official["skipped"] += 1
        if report.when not in ("call", "???"):  # item properties repeat on every phase's report
            return
        for name, value in report.user_properties:
            if name == "tritonfuzz_tally":
                self.summary(value["op"], value["implementation"]).merge_tally(value, passed=report.passed)
            elif name == "tritonfuzz_fixture":
                entry = {"path": value["path"], "replay": value["replay"], "bug": value.get("bug", ""),
                         "nonfinite_inputs": list(value.get("nonfinite_inputs", ())),
                         "finite_twin": value.get("finite_twin", "")}
                fixtures = self.summary(value["op"], value["implementation"]).new_fixtures
                if entry["path"] not in {f["path"] for f in fixtures}:  # one case can come from several tests
                    fixtures.append(entry)
                    self.fixtures.append(value)
            elif name == "tritonfuzz_static":
                self.summary(value["op"], value["implementation"]).static_findings += value["findings"]
            elif name == "tritonfuzz_crash":
                self.summary(value["op"], value["implementation"]).crashes.append(value["message"])
            elif name == "tritonfuzz_suite_error":
                self.summary(value["op"], value["implementation"]).suite_errors.append(value["message"])

    def pytest_sessionfinish(self, session):
        """--memcheck replays; exit code 1 when it finds an invalid access, 3 when the suite itself
        failed and the kernels gave no failure of their own; in a gate, 5 (pytest's "no tests ran")
        when an implementation's tests did not all run and pytest would have said 0."""
        self.memcheck_replays()
        summaries = self.summaries.values()
        if any(s.memcheck and s.memcheck["status"] == "fail" for s in summaries) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if any(s.suite_errors for s in summaries) and not any(s.verdict == "FAIL" for s in summaries):
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        if self.config.stash[KERNELS] and not self.config.option.collectonly:  # collecting runs nothing
            verdict = overall_verdict(self.reported())
            if verdict == "ERROR":
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            elif verdict in ("NOT RUN", "INCOMPLETE") and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED

    def reported(self) -> list[ImplementationSummary]:
        """The implementations the verdict is about (those under test, in a gate), each with every
        test collected for it: those that never reported never started."""
        under_test = {(op, i.name) for op, loaded in self.config.stash[KERNELS].items()
                      for lk in loaded for i in lk.implementations}
        for key in under_test:
            self.summary(*key)
        tests, deselected = accounting.read(inflight_dir())
        for nodeid, key in tests.items():
            if key in self.summaries:
                self.summaries[key].collected.add(nodeid)
        for key, n in deselected.items():
            if key in self.summaries:
                self.summaries[key].deselected = n
        return [s for key, s in self.summaries.items() if not under_test or key in under_test]

    def memcheck_replays(self):
        config = self.config
        if not config.getoption("memcheck") or not config.stash[KERNELS]:
            return
        from oracles.platform.compute_sanitizer import memcheck_replay
        for op, loaded in config.stash[KERNELS].items():
            for lk in loaded:
                if not gpu_available():
                    result = {"status": "not run", "errors": 0, "command": "",
                              "messages": ["--memcheck needs a GPU (the CPU tier checks every access itself)"]}
                else:
                    result = memcheck_replay(f"{op}={lk.source}", config.getoption("regressions_dir"), ROOT,
                                             timeout_s=900)
                for impl in lk.implementations:
                    self.summary(op, impl.name).memcheck = result

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        """A worker died (segfault, heap corruption, or our hang watchdog) while running a kernel:
        turn its in-flight case into a verdict and a fixture; xdist replaces the worker."""
        message = crashed_case_verdict(self.config, report)
        if not message:  # no case in flight: still the crash of this test, charged to its implementation
            key = accounting.read(inflight_dir())[0].get(crashitem)
            if key is not None:
                message = {"op": key[0], "implementation": key[1], "message": (
                    f"crashed while running {crashitem}, outside a kernel call (no case in flight: the kernel's "
                    f"earlier calls may have corrupted the process, or tritonfuzz itself crashed)")}
        if message:
            report.longrepr = f"{report.longrepr}\n{message['message']}"
            report.user_properties.append(("tritonfuzz_crash", message))

    def pytest_terminal_summary(self, terminalreporter):
        config = self.config
        if config.option.collectonly:
            return
        gate = bool(config.stash[KERNELS]) or config.getoption("gate_report")
        for op, loaded in config.stash[KERNELS].items():
            for lk in loaded:
                for impl in lk.implementations:
                    s = self.summary(op, impl.name)
                    s.source, s.notes = lk.source, list(lk.notes)
        if self.fixtures and not gate:
            terminalreporter.section("tritonfuzz: new regression fixtures")
            for f in self.fixtures:
                terminalreporter.write_line(f"{f['path']}\n  replay: {f['replay']}")
        if not gate:
            return
        budget = config.getoption("gate_budget")
        summaries = self.reported()
        terminalreporter.section("tritonfuzz verdict")
        if config.stash.get(GPU_SHARING, ""):
            terminalreporter.write_line(f"shards: {config.stash[GPU_SHARING]}")
        for s in summaries:
            terminalreporter.write_line(render_table(s, budget))
            terminalreporter.write_line("")
        path = config.getoption("gate_report")
        if path:
            report = report_json(summaries, device=suite_device(), profile=settings._current_profile, budget_s=budget)
            Path(path).write_text(dumps(report))
            terminalreporter.write_line(f"gate report written to {path}")


def implementation_key(report):
    """(op, implementation name) of a test report (the plugin puts it in the user properties)."""
    for name, value in report.user_properties:
        if name in ("tritonfuzz_impl", "tritonfuzz_crash"):
            return value["op"], value["implementation"]
    return None


def report_role(report) -> str | None:
    """The tally a test's verdicts go to (its `tally` marker: judge, fixture; else fuzz)."""
    for name, value in report.user_properties:
        if name == "tritonfuzz_impl":
            return value.get("role")
    return None
