"""The case a worker is running right now, on disk, so that a crash or a hang still gets a verdict.

Under pytest-xdist each worker writes its current case to <dir>/<worker>.json before calling the
kernel and removes it after. If the kernel kills the process (a segfault, heap corruption from
an out-of-bounds store under the interpreter) the controller finds the file and turns it into a
"crashed on case ..." verdict and a regression fixture. A watchdog marks a call that runs past
--case-timeout as a hang, writes the same file and ends the worker, which xdist replaces.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from oracles.platform.mps import under_mps
from strategies.case import case_from_json, case_to_json
from strategies.fixtures import is_default_root

ENV_DIR = "_TRITONFUZZ_INFLIGHT_DIR"  # set by the controller, inherited by the workers
MAX_RECORDED_BYTES = 8 * 1024 * 1024  # larger cases are recorded by their summary only
HANG_EXIT_CODE = 70
DEVICE_FAULT_EXIT_CODE = 71


def inflight_dir(*, fresh: bool = False) -> Path:
    """This run's temporary folder. The controller makes a fresh one (`fresh`: a pytest started
    from inside a test must not share, or remove, its parent's) before it starts workers; workers
    inherit it through the environment."""
    if fresh or ENV_DIR not in os.environ:
        os.environ[ENV_DIR] = tempfile.mkdtemp(prefix="tritonfuzz-inflight-")
    return Path(os.environ[ENV_DIR])


def _case_bytes(case) -> int:
    return sum(t.numel() * t.element_size() for t in case.tensors().values())


def _record(case, implementation, kernel_option, reason: str = "crashed") -> dict:
    return {"op": implementation.op, "implementation": implementation.name, "kernel_option": kernel_option,
            "summary": case.summary(), "reason": reason,
            "case": case_to_json(case) if _case_bytes(case) <= MAX_RECORDED_BYTES else None}


def in_worker() -> bool:
    return os.environ.get("PYTEST_XDIST_WORKER") is not None


@contextmanager
def in_flight(case, implementation, kernel_option, *, timeout_s: float):
    """Yields the case's record (None outside a worker), serialized before the kernel runs: after
    a device fault the case's GPU tensors can no longer be read."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:  # no worker process to lose: nothing to record
        yield None
        return
    path = inflight_dir() / f"{worker}.json"
    record = _record(case, implementation, kernel_option)
    path.write_text(json.dumps(record))
    timer = threading.Timer(timeout_s, _hang, args=(path, record, timeout_s))
    timer.daemon = True
    timer.start()
    try:
        yield record
    finally:
        timer.cancel()
        path.unlink(missing_ok=True)


def _hang(path: Path, record: dict, timeout_s: float) -> None:
    path.write_text(json.dumps({**record, "reason": f"timed out after {timeout_s:g} s"}))
    os._exit(HANG_EXIT_CODE)  # the kernel holds the interpreter or the GPU; only the process can go


def end_worker_after_device_fault(case, implementation, kernel_option, message: str, in_flight_record=None,
                                  earlier=()) -> None:
    """The kernel faulted the GPU: every later CUDA call of this worker would fail, so the worker
    records the case as its in-flight crash and exits; the controller turns the record into a
    verdict and a fixture (crashed_case_verdict) and xdist starts a fresh worker for the rest.
    `in_flight_record`: the case's record from in_flight, serialized before the call (after a
    fault a GPU case's tensors can no longer be read); `earlier`: the records of this worker's
    earlier kernel calls, most recent first, which go with it for a replay under MPS."""
    first_line = message.strip().splitlines()[0] if message.strip() else "device fault"
    reason = f"device fault ({first_line[:300]})"
    record = in_flight_record or _record(case, implementation, kernel_option)
    _exit_with({**record, "reason": reason}, earlier)


def end_worker_after_lost_context(implementation, kernel_option, message: str, recent=()) -> None:
    """Under MPS: this worker's CUDA context was lost outside a kernel call (the fault of an
    earlier call of its own, or of another shard's: MPS hands a fault to every client, a call or
    two late). Every later CUDA call would fail, and MPS takes no new client until this one exits:
    the worker records its last kernel calls (`recent`, their records, most recent first) and
    exits like a faulting one."""
    first_line = message.strip().splitlines()[0] if message.strip() else "context lost"
    reason = f"device fault (the CUDA context was lost outside a kernel call: {first_line[:300]})"
    if recent:
        _exit_with({**recent[0], "reason": reason}, recent[1:])
    _exit_with({"op": implementation.op, "implementation": implementation.name, "kernel_option": kernel_option,
                "summary": None, "case": None, "reason": reason}, ())


def _exit_with(record: dict, earlier) -> None:
    record["earlier"] = [r["case"] for r in earlier if r.get("case") is not None]
    (inflight_dir() / f"{os.environ['PYTEST_XDIST_WORKER']}.json").write_text(json.dumps(record))
    os._exit(DEVICE_FAULT_EXIT_CODE)


def crashed_case_verdict(config, report) -> dict | None:
    """On the controller: the in-flight record of the worker that died, as a verdict + fixture.
    Under MPS a device fault's case is first replayed alone (mps_attribution)."""
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if worker is None:
        return None
    path = inflight_dir() / f"{worker}.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    path.unlink()
    where = f"on case: {record['summary']}" if record["summary"] else "outside a kernel call (no case in flight)"
    message = f"{record['reason']} {where}"
    out = {"op": record["op"], "implementation": record["implementation"], "message": message}
    case = record["case"]
    if record["reason"].startswith("device fault") and under_mps():
        case, note = mps_attribution(record)
        out["message"] += f" -- {note}"
    if case is not None:
        from oracles.harness.failures import record_crash_fixture
        root = Path(config.getoption("regressions_dir"))
        check = "device-fault" if record["reason"].startswith("device fault") else record["reason"].split()[0]
        fixture, replay = record_crash_fixture(
            case_from_json(case), root, op=record["op"], implementation=record["implementation"],
            kernel_option=record["kernel_option"], check=check, message=message,
            custom_root=not is_default_root(root))
        out["message"] += f"\nfixture: {fixture}\nreplay: {replay}"
    return out


def mps_attribution(record: dict) -> tuple[dict | None, str]:
    """(the case to name as the fault's, as JSON, or None; why): the record's cases (the one in
    flight, then the worker's earlier kernel calls) replayed alone, without MPS. The first that
    faults is named; when all run clean, the worker was another shard's victim and nothing is
    named; when the replay cannot tell, the case in flight keeps its fixture."""
    from oracles.harness.alone import candidates, faults_alone
    prefix = "the GPU was shared by the gate's shards through MPS, which hands one client's fault to every client"
    if not candidates(record):
        if record["summary"] is None:
            return None, f"{prefix}: this worker had run no kernel yet (another shard's case faulted)"
        return None, (f"{prefix}; the case was too large to record (over {MAX_RECORDED_BYTES >> 20} MiB), so it "
                      f"could not be replayed alone to tell whether it is the faulting one")
    status, index, why = faults_alone(record)
    tried = len(candidates(record))
    if status == "unknown":
        return record["case"], f"{prefix}; replaying its {tried} recent case(s) alone could not tell ({why})"
    if status == "clean":
        return None, (f"{prefix}; replayed alone, without MPS, this worker's {tried} recent case(s) ran clean: "
                      f"another shard's case faulted (no fixture from this worker)")
    case = candidates(record)[index]
    which = "the case in flight" if index == 0 and record["case"] is not None else \
        f"its kernel call {index} before the last"
    return case, (f"{prefix}; replayed alone, without MPS, {which} faults again: it is the faulting case "
                  f"({case_from_json(case).summary()})")
