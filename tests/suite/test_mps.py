"""A sharded GPU gate under CUDA MPS (oracles/platform/mps.py): the private daemon's start and
stop, the workers' environment, and who is named after a device fault, which MPS hands to every
shard on the GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import execnet
import pytest
import torch

from oracles.harness import alone, inflight
from oracles.harness.differential import context_lost
from oracles.ops import get_op
from oracles.platform import mps
from oracles.submission.loader import bundled_implementations
from strategies.case import case_from_json, case_to_json

ROOT = Path(__file__).resolve().parents[2]
FAULT = "CUDA error: an illegal memory access was encountered"


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    """An nvidia-cuda-mps-control on PATH that logs its arguments, pipe folder and input; no
    daemon is reachable from this process (an empty pipe folder)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "control.log"
    bin_dir.mkdir()
    script = bin_dir / mps.CONTROL
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        input=""
        [ "$#" -eq 0 ] && input=$(cat)
        echo "args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY input=$input" >> {log}
        exit ${{FAKE_MPS_EXIT:-0}}
    """))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(mps.PIPE_ENV, str(tmp_path / "no-daemon"))
    # the machine-wide lock and the daemon's folder go to this test's own temporary folder: tests
    # running at once in other xdist workers (and real gates) keep theirs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return log


def test_the_private_daemon_starts_in_its_own_folder_is_alone_and_is_told_to_quit(fake_control):
    daemon, why = mps.start_private_mps()
    assert daemon is not None and why == "", why
    pipe = daemon.env[mps.PIPE_ENV]
    assert Path(pipe).is_dir() and fake_control.read_text().splitlines() == [f"args=-d pipe={pipe} input="]
    second, why = mps.start_private_mps()  # the machine-wide lock: one private daemon at a time
    assert second is None and "another tritonfuzz gate" in why
    mps.stop_private_mps(daemon)
    assert fake_control.read_text().splitlines()[-1] == f"args= pipe={pipe} input=quit"
    assert not daemon.folder.exists()
    again, why = mps.start_private_mps()  # the lock went with it
    assert again is not None, why
    mps.stop_private_mps(again)


def test_a_daemon_that_does_not_start_is_a_reason_and_nothing_is_left(fake_control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_EXIT", "1")
    daemon, why = mps.start_private_mps()
    assert daemon is None and why.startswith(f"{mps.CONTROL} -d failed")
    monkeypatch.delenv("FAKE_MPS_EXIT")
    daemon, why = mps.start_private_mps()  # its lock and folder were released
    assert daemon is not None, why
    mps.stop_private_mps(daemon)


def test_no_control_binary_or_a_running_daemon_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert mps.start_private_mps() == (None, f"{mps.CONTROL} is not on PATH")
    running = tmp_path / "pipe"
    running.mkdir()
    (running / "control").touch()
    monkeypatch.setenv(mps.PIPE_ENV, str(running))
    assert mps.running_daemon() == str(running)


def test_only_the_workers_join_the_daemon():
    """The workers' xdist specs carry the daemon's folders (execnet sets them before the worker
    starts); the controller's own environment is left as it is."""
    env = {mps.PIPE_ENV: "/tmp/x/pipe", mps.LOG_ENV: "/tmp/x/log"}
    specs = mps.with_worker_env(["popen", "popen"], env)
    assert [execnet.XSpec(s).env for s in specs] == [env, env]
    assert all(execnet.XSpec(s).popen for s in specs)
    replay_env = mps.without_mps_env(Path("/tmp/tritonfuzz-test-no-mps"))
    assert replay_env[mps.PIPE_ENV] == "/tmp/tritonfuzz-test-no-mps" and mps.MARKER_ENV not in replay_env


def test_a_lost_context_is_seen_inside_exception_groups():
    assert context_lost(RuntimeError(FAULT))
    assert context_lost(ExceptionGroup("two errors", [ValueError("x"), RuntimeError(FAULT)]))
    try:
        try:
            raise RuntimeError(FAULT)
        except RuntimeError as e:
            raise ValueError("while drawing") from e
    except ValueError as wrapped:
        assert context_lost(wrapped)
    assert not context_lost(ValueError("expected a float32 tensor"))
    assert not context_lost(RuntimeError("CUDA out of memory"))  # survivable: not a lost context


def _record(case=True) -> dict:
    small = get_op("moe_fused_gate").judge_cases("cpu")[0]
    name = bundled_implementations("moe_fused_gate")[0].name
    return {"op": "moe_fused_gate", "implementation": name, "kernel_option": None,
            "summary": small.summary() if case else None, "case": case_to_json(small) if case else None,
            "reason": f"device fault ({FAULT})"}


class _Gateway:
    id = "gw3"


class _Node:
    gateway = _Gateway()


class _Report:
    node = _Node()


class _Config:
    def __init__(self, root):
        self.root = root

    def getoption(self, name):
        assert name == "regressions_dir"
        return str(self.root)


@pytest.mark.parametrize("alone_result, named", [(("faults", 0, ""), 0), (("faults", 1, ""), 1),
                                                 (("clean", None, ""), None),
                                                 (("unknown", None, "the replay ran past 600 s"), 0)])
def test_under_mps_a_fault_names_only_a_case_that_faults_alone(tmp_path, monkeypatch, alone_result, named):
    """Under MPS a device fault reaches every shard, a call or two late: the record's cases (the
    one in flight, then the worker's earlier kernel calls) are replayed alone and the first that
    faults gets the fixture; when all run clean the worker was another shard's victim and gets
    none; when the replay cannot tell, the case in flight keeps its fixture. Without MPS nothing
    is replayed."""
    monkeypatch.setenv(inflight.ENV_DIR, str(tmp_path / "inflight"))
    (tmp_path / "inflight").mkdir()
    replays = []
    monkeypatch.setattr(alone, "faults_alone", lambda record: replays.append(record) or alone_result)
    in_flight_case, earlier_case = _cases()
    record = {**_record(), "case": case_to_json(in_flight_case), "summary": in_flight_case.summary(),
              "earlier": [case_to_json(earlier_case)]}
    for marker in ("private", ""):
        monkeypatch.setenv(mps.MARKER_ENV, marker)
        (tmp_path / "inflight" / "gw3.json").write_text(json.dumps(record))
        root = tmp_path / f"regressions-{marker or 'none'}"
        out = inflight.crashed_case_verdict(_Config(root), _Report())
        fixtures = [case_from_json(json.loads(p.read_text())["case"]).summary() for p in root.rglob("*.json")]
        if marker:
            assert len(replays) == 1 and alone.candidates(replays[0]) == [record["case"], *record["earlier"]]
            assert "through MPS" in out["message"], out["message"]
            expected = [] if named is None else [(in_flight_case, earlier_case)[named].summary()]
            assert fixtures == expected, out["message"]
            assert ("ran clean" in out["message"]) == (named is None)
        else:
            assert len(replays) == 1 and fixtures == [in_flight_case.summary()] and "MPS" not in out["message"]


def _cases():
    cases = get_op("moe_fused_gate").judge_cases("cpu")
    return cases[0], cases[3]


def test_under_mps_a_worker_that_lost_its_context_without_a_case_is_named_a_victim(tmp_path, monkeypatch):
    monkeypatch.setenv(inflight.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(mps.MARKER_ENV, "private")
    (tmp_path / "gw3.json").write_text(json.dumps(_record(case=False)))
    out = inflight.crashed_case_verdict(_Config(tmp_path / "regressions"), _Report())
    assert "outside a kernel call" in out["message"] and "had run no kernel yet" in out["message"]
    assert not (tmp_path / "regressions").exists()


def test_under_mps_a_case_too_large_to_record_is_not_called_a_victim(tmp_path, monkeypatch):
    monkeypatch.setenv(inflight.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(mps.MARKER_ENV, "private")
    record = {**_record(), "case": None}
    (tmp_path / "gw3.json").write_text(json.dumps(record))
    out = inflight.crashed_case_verdict(_Config(tmp_path / "regressions"), _Report())
    assert f"on case: {record['summary']}" in out["message"] and "too large to record" in out["message"]
    assert "another shard" not in out["message"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the replay's failure path: a CPU machine has no GPU to replay on")
def test_a_replay_that_cannot_run_says_why():
    status, index, why = alone.faults_alone(_record(), timeout_s=300)
    assert (status, index, why) == ("unknown", None, "the replay failed: RuntimeError: no GPU to replay the case on")


LOSES_CONTEXT = textwrap.dedent('''
    import importlib.util

    import torch

    _spec = importlib.util.spec_from_file_location("_bundled_moe", {bundled!r})
    _bundled = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_bundled)
    LOST = "CUDA error: an illegal memory access was encountered"


    class _LostContext(torch.Tensor):
        """An output whose every use fails as a lost CUDA context does: outside the kernel call."""
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise RuntimeError(LOST)


    def moe_fused_gate(scores, bias, topk, **options):
        weights, indices = _bundled.moe_fused_gate(scores, bias, topk, **options)
        if scores.shape[0] == 37:  # the fault inside the kernel call
            raise RuntimeError(LOST)
        if scores.shape[0] == 83:  # the context lost after the call returned, as MPS may report it
            return weights.as_subclass(_LostContext), indices
        return weights, indices
''')


@pytest.mark.skipif(torch.cuda.is_available(), reason="the MPS plumbing with simulated faults: the CPU tier runs it")
def test_under_mps_a_lost_context_anywhere_ends_the_worker_with_its_recent_cases(tmp_path):
    """With the MPS marker set (as a sharded GPU gate sets it), a fault inside a kernel call and a
    context lost after one both end their worker with the in-flight case's record, serialized
    before the call; the controller replays each alone (here it cannot tell: no GPU), keeps the
    case's fixture and says so; the other judge cases run in fresh workers, and nothing is the
    suite's error."""
    kernel = tmp_path / "loses_context.py"
    kernel.write_text(LOSES_CONTEXT.format(bundled=str(ROOT / "kernels" / "moe_fused_gate.py")))
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pytest", f"--kernel=moe_fused_gate={kernel}", "-n", "2",
                           "--gate-report", str(report), f"--regressions-dir={tmp_path / 'regressions'}",
                           "-p", "no:cacheprovider", "-q", "tests/kernel/test_ops.py", "-k", "judge_cases and not 512"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, mps.MARKER_ENV: "shared"})
    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out, out[-3000:]
    (impl,) = json.loads(report.read_text())["implementations"]
    crashes = "\n".join(impl["crashes"])
    assert done.returncode == 1 and impl["verdict"] == "fail" and not impl["suite_errors"], out[-3000:]
    assert len(impl["crashes"]) == 2 and crashes.count("replaying its") == 2, crashes
    assert "the CUDA context was lost outside a kernel call" in crashes and "scores=[83x64]" in crashes, crashes
    assert "scores=[37x256]" in crashes, crashes
    fixtures = sorted(case_from_json(json.loads(p.read_text())["case"]).inputs["scores"].shape[0]
                      for p in (tmp_path / "regressions").rglob("*.json"))
    assert fixtures == [37, 83], crashes
    assert impl["judge_official"]["passed"] >= 3, impl["judge_official"]


FAULTS_ON_BULK = textwrap.dedent('''
    import importlib.util

    import torch
    import triton
    import triton.language as tl

    _spec = importlib.util.spec_from_file_location("_bundled_moe", {bundled!r})
    _bundled = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_bundled)


    @triton.jit
    def _wild_store(p, offset):
        tl.store(p + offset, 1.0)


    def moe_fused_gate(scores, bias, topk, **options):
        if scores.shape[1] == 255:  # the GPU pool's row of 255 experts (under 8 MiB: recorded): a store 4 TiB past a tensor
            _wild_store[(1,)](torch.empty(1, device=scores.device), 1 << 40)
        return _bundled.moe_fused_gate(scores, bias, topk, **options)
''')


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and CUDA MPS")
def test_a_sharded_gate_under_mps_names_only_cases_that_fault_alone(tmp_path):
    """Four shards share the GPU through the gate's private MPS daemon; the kernel faults on every
    case of 255 experts. A fault may reach every shard: the gate fails, and every fixture it writes
    holds a case that faults (255 experts). Of 40 runs of 37 GPU-sized draws (a shard's share of
    a 148-example gate), 30 held a case of 255 experts; 21 one of 85, the structure this test
    faulted on before, which a 148-example gate missed on an H100 (2026-12-07): four shards all
    missing, about 0.4% against 5%."""
    if shutil.which(mps.CONTROL) is None:
        pytest.skip(f"{mps.CONTROL} is not installed here")
    kernel = tmp_path / "faults_on_bulk.py"
    kernel.write_text(FAULTS_ON_BULK.format(bundled=str(ROOT / "kernels" / "moe_fused_gate.py")))
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pytest", f"--kernel=moe_fused_gate={kernel}", "--gate-shards", "4",
                           "--gate-budget", "20", "--minimize-budget", "5", "--gate-report", str(report),
                           f"--regressions-dir={tmp_path / 'regressions'}", "-p", "no:cacheprovider", "-q",
                           "-k", "test_kernel_agrees"], cwd=ROOT, capture_output=True, text=True, timeout=500)
    out = done.stdout + done.stderr
    verdict = out[out.find("tritonfuzz verdict"):][:3000] if "tritonfuzz verdict" in out else out[-3000:]
    assert "shards: the shards share the GPU through a private MPS daemon" in out, verdict or out[-3000:]
    assert "INTERNALERROR" not in out, out[-3000:]
    (impl,) = json.loads(report.read_text())["implementations"]
    crashes = "\n".join(impl["crashes"])
    assert done.returncode == 1 and impl["verdict"] == "fail" and impl["crashes"], verdict
    assert "faults again: it is the faulting case" in crashes, crashes
    fixtures = [json.loads(p.read_text()) for p in (tmp_path / "regressions").rglob("*.json")]
    assert fixtures, verdict
    for f in fixtures:
        assert case_from_json(f["case"]).inputs["scores"].shape[1] == 255, f"{f.get('message', '')[:500]}\n{crashes}"
