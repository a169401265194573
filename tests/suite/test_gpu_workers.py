"""How the suite runs itself: under `pytest -n auto` on a GPU host each xdist worker takes one GPU,
round robin, and its share of the cores; a self-test stuck past suite_run.STACKS_AFTER_S prints its
stacks; xdist's first hand-out gives each worker at most one long test."""

import ctypes
import os
import time
import types

import pytest
import torch

from oracles.gate import suite_run


@pytest.mark.gpu
def test_worker_is_pinned_to_its_gpu():
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not torch.cuda.is_available() or worker is None:
        pytest.skip("needs a GPU and pytest-xdist workers (pytest -n N)")
    expected = int(worker.removeprefix("gw")) % torch.cuda.device_count()
    assert torch.cuda.current_device() == expected, (
        f"{worker} runs on cuda:{torch.cuda.current_device()}, expected cuda:{expected} of {torch.cuda.device_count()}")
    # The default device is what unqualified allocations (and the kernels' outputs) use.
    assert torch.empty(1, device="cuda").device.index == expected
    print(f"{worker} -> cuda:{expected} ({torch.cuda.get_device_name(expected)})")


def test_an_xdist_worker_takes_its_share_of_the_cores_for_torch_threads():
    """share_cores_among_xdist_workers: under -n W on C cores each worker's torch runs C // W
    threads (a thread per core per worker oversubscribed a 16-core GPU host 16 times)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        pytest.skip("runs under pytest -n 2 or more without OMP_NUM_THREADS")
    assert torch.get_num_threads() == max(1, (os.cpu_count() or 1) // workers), torch.get_num_threads()


def test_a_block_still_running_past_its_time_prints_its_stacks_and_one_that_ends_does_not(capfd):
    with suite_run.stacks_if_stuck(0.2):
        time.sleep(0.6)
    err = capfd.readouterr().err
    assert "Still running after 0.2 s" in err and "test_a_block_still_running_past_its_time" in err, err[-2000:]
    with suite_run.stacks_if_stuck(0.2):
        pass
    time.sleep(0.4)  # past the time: the dump was cancelled when the block ended
    assert "Still running" not in capfd.readouterr().err


def test_a_block_holding_the_gil_in_c_still_prints_its_stacks_through_faulthandler(capfd):
    """A thread stuck in C code with the GIL (libc sleep through PyDLL keeps it) starves the Python
    watchdog; faulthandler, armed grace_s later, speaks instead, and names the stuck Python frame."""
    libc_holding_the_gil = ctypes.PyDLL(None)
    with suite_run.stacks_if_stuck(0.2, grace_s=0.3):
        libc_holding_the_gil.usleep(1_500_000)
    time.sleep(0.2)  # the watchdog got the GIL back only now, and prints its own view late
    err = capfd.readouterr().err
    assert "Timeout (0:00:00.500000)!" in err and "test_a_block_holding_the_gil_in_c" in err, err[-2000:]


def test_a_watchdog_that_printed_disarms_faulthandler(capfd):
    with suite_run.stacks_if_stuck(0.1, grace_s=0.4):  # faulthandler's turn at 0.5 s, inside the block
        time.sleep(1.0)
    err = capfd.readouterr().err
    assert "Still running after 0.1 s" in err and "Timeout (" not in err, err[-2000:]


def test_long_tests_are_paired_with_short_ones_in_the_first_hand_out():
    long = [types.SimpleNamespace(nodeid=f"tests/suite/test_gate.py::long{n}") for n in range(3)]
    short = [types.SimpleNamespace(nodeid=f"tests/suite/test_oracles.py::short{n}") for n in range(4)]
    names = lambda items: [i.nodeid.split("::")[1] for i in items]  # noqa: E731
    ordered = suite_run.long_first(short[:2] + long + short[2:])
    assert names(ordered) == ["long0", "long1", "long2", "short0", "short1", "short2", "short3"]
    # xdist first hands each worker two consecutive tests: with 2 workers one long test apiece,
    # then the rest in their order, long first
    assert names(suite_run.long_tests_apart(ordered, workers=2)) == \
        ["long0", "short0", "long1", "short1", "long2", "short2", "short3"]
    assert names(suite_run.long_tests_apart(ordered, workers=16)) == \
        ["long0", "short0", "long1", "short1", "long2", "short2", "short3"]


def test_a_long_test_function_goes_first_with_its_parameters_and_not_its_file():
    sharded = "tests/suite/test_mps.py::test_a_sharded_gate_under_mps_names_only_cases_that_fault_alone"
    assert sharded in suite_run.LONG_FIRST and "tests/suite/test_mps.py" not in suite_run.LONG_FIRST
    items = [types.SimpleNamespace(nodeid=n) for n in (
        "tests/suite/test_mps.py::test_a_replay_that_cannot_run_says_why",
        "tests/suite/test_gate.py::test_severities_in_one_gate_run",
        f"{sharded}[1]", sharded)]
    assert [i.nodeid for i in suite_run.long_first(items)] == \
        [f"{sharded}[1]", sharded, "tests/suite/test_gate.py::test_severities_in_one_gate_run",
         "tests/suite/test_mps.py::test_a_replay_that_cannot_run_says_why"]
