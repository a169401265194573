"""The pre-submission gate end to end, as a user runs it: `pytest --kernel OP=PATH` in a fresh
process. A correct kernel passes with a schema-valid JSON report; a zip with a broken vendor
file fails and names that file; a kernel that segfaults gets a verdict instead of taking the
run down."""

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "oracles" / "gate_report.schema.json").read_text())
HC_HEAD = ROOT / "kernels" / "hc_head.py"
BROKEN = ROOT / "tests" / "mutants" / "hc_head" / "unwritten_tail.py"  # poison: tail never written


def gate(tmp_path, *kernel_args, budget=8):
    """Run the gate in a fresh pytest process; return (exit code, report, output)."""
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "pytest", *[f"--kernel={k}" for k in kernel_args],
            "--hypothesis-profile", "ci", "--gate-budget", str(budget), "--gate-report", str(report),
            "--regressions-dir", str(tmp_path / "regressions"), "--minimize-budget", "5",
            "-p", "no:cacheprovider", "-q", "tests/test_hc_head.py", "tests/test_regressions.py",
            "tests/test_static_scan.py"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    data = json.loads(report.read_text()) if report.exists() else None
    return done.returncode, data, done.stdout + done.stderr


def test_correct_kernel_passes_with_schema_valid_report(tmp_path):
    kernel = tmp_path / "my_hc_head.py"
    shutil.copy(HC_HEAD, kernel)
    code, report, out = gate(tmp_path, f"hc_head={kernel}")
    assert code == 0, out[-3000:]
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"] == "pass"
    (impl,) = report["implementations"]
    assert impl["implementation"] == "my_hc_head.py" and impl["examples"]["fuzz"] > 0
    assert "tritonfuzz verdict" in out and "hc_head / my_hc_head.py: PASS" in out


def test_zip_with_broken_vendor_file_fails_and_names_it(tmp_path):
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(HC_HEAD, "hc_head.py")
        z.write(BROKEN, "hc_head_metax.py")
        z.writestr("notes.txt", "not a kernel")
    code, report, out = gate(tmp_path, f"hc_head={archive}")
    assert code != 0
    jsonschema.validate(report, SCHEMA)
    verdicts = {i["implementation"]: i["verdict"] for i in report["implementations"]}
    assert verdicts == {"submission.zip:hc_head.py": "pass", "submission.zip:hc_head_metax.py": "fail"}, out[-3000:]
    assert any("notes.txt" in n for i in report["implementations"] for n in i["notes"])
    assert "hc_head / submission.zip:hc_head_metax.py: FAIL" in out


SEGFAULT = textwrap.dedent('''
    import ctypes
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


    def hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
        y = torch.empty(x.shape[0], x.shape[2], dtype=x.dtype, device=x.device)
        _copy[(1,)](x, y, 1, BLOCK=16)
        ctypes.string_at(0)  # stands in for a wild out-of-bounds store that kills the process
        return y
''')


@pytest.mark.skipif(sys.platform == "win32", reason="relies on a segfault")
def test_segfaulting_kernel_gets_a_verdict(tmp_path):
    kernel = tmp_path / "crashy.py"
    kernel.write_text(SEGFAULT)
    code, report, out = gate(tmp_path, f"hc_head={kernel}", budget=5)
    assert code != 0
    jsonschema.validate(report, SCHEMA)
    (impl,) = report["implementations"]
    assert impl["verdict"] == "fail"
    assert impl["crashes"] and impl["crashes"][0].startswith("crashed on case"), out[-3000:]
    assert "fixture:" in impl["crashes"][0]


def test_a_pass_resting_on_untrusted_cases_says_so():
    """Cases the CPU interpreter could not judge do not fail the gate, but its table and report
    must not present the PASS as if they had been checked."""
    from collections import Counter

    from oracles.gate import ImplementationSummary, render_table
    summary = ImplementationSummary("hc_head", "k.py")
    summary.checks["contract"] = Counter({"pass": 3, "untrusted": 2})
    assert summary.verdict == "PASS"
    assert "2 case(s) untrusted" in render_table(summary, 60)
    assert any("2 case(s) untrusted" in n for n in summary.to_json(60)["notes"])
    summary.checks["contract"] = Counter({"pass": 5})
    assert "untrusted:" not in render_table(summary, 60) and not summary.to_json(60)["notes"]
