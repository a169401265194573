"""The static rules (oracles/submission/static_rules.py) on every implementation under test: the bundled
kernels must stay clean, and an outside kernel's errors fail the gate with file and line."""

import pytest

from oracles.submission.static_rules import format_findings, has_errors, scan_file


def pytest_generate_tests(metafunc):
    if "implementation" not in metafunc.fixturenames:
        return
    from oracles.gate.plugin import implementations_under_test, ops_under_test
    params = [pytest.param(impl, id=f"{op}-{impl.name}", marks=getattr(pytest.mark, op))
              for op in ops_under_test(metafunc.config) for impl in implementations_under_test(metafunc.config, op) if impl.path]
    metafunc.parametrize("implementation", params)


def test_static_rules(implementation, record_property):
    findings = scan_file(implementation.path, entry=implementation.op)
    record_property("tritonfuzz_static", {
        "op": implementation.op, "implementation": implementation.name,
        "findings": [{"path": implementation.name, "line": f.line, "col": f.col, "severity": f.severity,
                      "rule": f.rule, "message": f.message, "backends": list(f.backends)} for f in findings]})
    assert not has_errors(findings), f"{implementation.name}: the judge would reject this file:\n" + format_findings(findings)
