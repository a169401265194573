"""Does a case fault the GPU when it runs alone? One in-flight record's case, replayed in a fresh
process that does not join MPS.

Under MPS a fault reaches every client on the GPU, so the record a worker leaves after a device
fault may be another shard's victim, and under MPS a fault may surface a call or two late
(oracles/platform/mps.py). The controller replays each such record's cases here before it names
one: `python -m oracles.harness.alone RECORD.json` exits FAULTED, after printing the index of the
first case that faults alone, or 0 when every one runs clean.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FAULTED = 71  # oracles/harness/inflight.py's DEVICE_FAULT_EXIT_CODE
REPLAY_TIMEOUT_S = 600.0
_ROOT = Path(__file__).resolve().parents[2]


def candidates(record: dict) -> list[dict]:
    """The cases a record offers, most recent first: the one in flight, then the worker's earlier
    kernel calls (a fault under MPS may surface a call or two after the one that made it)."""
    return [c for c in (record.get("case"), *record.get("earlier", ())) if c is not None]


def replay_alone(record: dict) -> int:
    """Run the record's candidate cases, in order, through its implementation on this process's
    GPU, until one faults: print its index and return FAULTED; 0 when every one runs clean."""
    from oracles.platform.device import decide_platform
    decide_platform()
    import torch

    from oracles.harness.differential import RunOptions, device_fault, run_case
    from oracles.submission.loader import bundled_implementations, load_kernel
    from strategies.case import case_from_json

    op, name, source = record["op"], record["implementation"], record.get("kernel_option")
    with tempfile.TemporaryDirectory(prefix="tritonfuzz-alone-") as workdir:
        implementations = load_kernel(op, Path(source), workdir=Path(workdir)).implementations if source \
            else bundled_implementations(op)
        impl = next((i for i in implementations if i.name == name), None)
        if impl is None:
            raise LookupError(f"implementation {name!r} of {op} not in {source or 'the bundled kernels'}: "
                              f"{', '.join(i.name for i in implementations)}")
        if not torch.cuda.is_available():
            raise RuntimeError("no GPU to replay the case on")
        for index, case in enumerate(candidates(record)):
            try:
                faulted = run_case(op, impl.fn, case_from_json(case), RunOptions(device="cuda")).device_lost
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 -- a fault that surfaces only now is still this case's
                if not device_fault(e):
                    raise
                faulted = True
            if faulted:
                print(f"FAULTED {index}")
                return FAULTED
    return 0


def faults_alone(record: dict, *, timeout_s: float = REPLAY_TIMEOUT_S) -> tuple[str, int | None, str]:
    """("faults", index of the first candidate that faults the GPU alone, ""), ("clean", None, "")
    when every candidate runs clean alone, ("unknown", None, why) when the replay could not tell
    (it raised, or ran past timeout_s)."""
    from oracles.platform.mps import without_mps_env
    with tempfile.TemporaryDirectory(prefix="tritonfuzz-alone-") as folder:
        path = Path(folder) / "record.json"
        path.write_text(json.dumps(record))
        env = without_mps_env(Path(folder) / "no-mps")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
        try:  # the run's own folder: a --kernel path in the record is relative to it
            done = subprocess.run([sys.executable, "-m", "oracles.harness.alone", str(path)], env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return "unknown", None, f"the replay ran past {timeout_s:g} s"
    faulted = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAULTED ")]
    if done.returncode == FAULTED and faulted:
        return "faults", int(faulted[-1]), ""
    if done.returncode == 0:
        return "clean", None, ""
    last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
    return "unknown", None, f"the replay failed: {last[0][:300]}"


if __name__ == "__main__":
    sys.exit(replay_alone(json.loads(Path(sys.argv[1]).read_text())))
