"""--memcheck's reading of compute-sanitizer: what counts as an invalid access, what as a run
that did not happen. The replay itself needs a GPU (checked there, see the README)."""

from oracles.platform.compute_sanitizer import ERROR_EXIT_CODE, parse

CLEAN = """========= COMPUTE-SANITIZER
....                                                                     [100%]
========================= 4 passed, 1 skipped in 12.31s =========================
========= ERROR SUMMARY: 0 errors
"""

OUT_OF_BOUNDS = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at _hc_head_kernel+0x4f0 in /tmp/k.py:41
=========     by thread (96,0,0) in block (0,0,0)
=========     Address 0x7f0c2a000100 is out of bounds
========= Invalid __global__ read of size 2 bytes
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
================= 1 failed, 3 passed, 1 error in 40.00s =================
========= ERROR SUMMARY: 7 errors
"""


def test_a_clean_replay_passes():
    assert parse(CLEAN, 0) == {"status": "pass", "errors": 0, "messages": []}


def test_invalid_accesses_fail_with_each_distinct_message_once():
    result = parse(OUT_OF_BOUNDS, ERROR_EXIT_CODE)
    assert result["status"] == "fail" and result["errors"] == 7
    assert result["messages"][0] == "Invalid __global__ read of size 2 bytes" and len(result["messages"]) == 2
    assert not any("failed" in m for m in result["messages"])  # pytest's own summary rule is not an error


def test_a_kernel_failure_without_memory_errors_is_not_a_memcheck_failure():
    """The replayed tests may fail for the kernel's other bugs: memcheck judges accesses only."""
    assert parse(CLEAN.replace("4 passed", "1 failed, 3 passed"), 1)["status"] == "pass"


def test_a_replay_that_did_not_finish_or_could_not_start_is_not_run():
    assert parse("========= Invalid __global__ write of size 4 bytes\n", None)["status"] == "not run"
    refused = parse("========= Error: Device not supported\n", 255)
    assert refused["status"] == "not run" and "exit code 255" in refused["messages"][0]
