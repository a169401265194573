"""Under `pytest -n auto` on a GPU host each xdist worker takes one GPU, round robin."""

import os

import pytest
import torch


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
