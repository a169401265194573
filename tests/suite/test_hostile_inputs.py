"""Hostile input never takes the suite or the machine down: a fixture, a zip or a kernel module
that is corrupt, huge, or misbehaves at import gives a one-line error naming the file and what
was expected; a kernel call that asks for too much memory, or leaves the process changed, fails
its case and the run goes on. The tests build the hostile files and kernels themselves."""

import base64
import dataclasses
import functools
import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import torch

from kernels.hc_head import hc_head as bundled_hc_head
from oracles.submission import loader
from oracles.submission.loader import (PY_MAX_BYTES, ZIP_MAX_MEMBER_BYTES, ZIP_MAX_MEMBERS, ZIP_MAX_TOTAL_BYTES, KernelLoadError,
                            load_kernel)
from oracles.harness.differential import RunOptions, run_case
from oracles.harness.memory import GIB, process_limit
from oracles.platform.device import suite_device
from oracles.verdict import FAIL, PASS
from strategies.case import MAX_CASE_BYTES, MAX_TENSOR_ELEMENTS, CaseFormatError, case_to_json
from strategies.fixtures import load_fixture
from strategies.hc_head import judge_cases

ROOT = Path(__file__).resolve().parents[2]
HC_HEAD = (ROOT / "kernels" / "hc_head.py").read_text()


# ---------------------------------------------------------------------------------------------
# Fixtures


@functools.cache
def options(**kwargs) -> RunOptions:
    """RunOptions on the suite's device (the case's tensors go there; the CPU limits still apply
    to what a kernel allocates on the CPU)."""
    return RunOptions(device=suite_device(), **kwargs)


def first_judge_case():
    return judge_cases("cpu")[0]  # judge_cases builds all of them, the bench sizes too: seconds


def fixture_file(tmp_path, mutate) -> Path:
    """A fixture of the judge's first hc_head case, with `mutate(document)` applied."""
    document = {"case": case_to_json(first_judge_case())}
    mutate(document)
    path = tmp_path / "hc_head" / "0123456789abcdef.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def x_field(document) -> dict:
    return document["case"]["inputs"]["x"]["tensor"]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, stride, offset", [
    ((5, 3, 4), (24, 8, 2), 0),   # stepped: a gap after every element (the GPU fixture that broke)
    ((5, 3, 4), (12, 4, 1), 7),   # contiguous rows after a storage offset
    ((4, 6), (1, 4), 3),          # permuted, with an offset
])
def test_a_strided_tensor_round_trips_through_its_fixture_on_every_device(device, shape, stride, offset):
    """Values, strides, offset and the gaps between them survive tensor_to_json and back, wherever
    the tensor lives: on a GPU `.cpu()` of such a view compacted it, so the bytes written no longer
    matched the strides beside them (H100, 2026-12-06). The gaps hold what the storage holds."""
    from strategies.case import storage_span, tensor_from_json, tensor_to_json
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    storage = torch.arange(extent, dtype=torch.float32, device=device)
    view = storage.as_strided(shape, stride, offset)
    back = tensor_from_json(tensor_to_json(view), where="x")
    assert back.stride() == view.stride() and back.storage_offset() == offset
    assert torch.equal(back, view.cpu()) and torch.equal(storage_span(back), storage.cpu())


def test_a_stride_0_view_claiming_billions_of_elements_is_refused_before_allocating(tmp_path):
    def huge_view(d):
        x = x_field(d)
        x.update(shape=[64, 4, 2 ** 22], stride=[0, 0, 0], storage_offset=0, storage_elements=1,
                 bytes_b64=base64.b64encode(b"\0\0").decode())
    path = fixture_file(tmp_path, huge_view)
    with pytest.raises(CaseFormatError, match=rf"{path}.*input 'x'.*over the {MAX_TENSOR_ELEMENTS} elements"):
        load_fixture(path)


def test_a_corrupt_fixture_is_the_suites_error_in_its_replay_not_the_kernels(tmp_path):
    """Its replay raises SuiteError, which the gate reports as ERROR: a fixture whose bytes do not
    cover its view (as GPU runs wrote before the fix above) failed a public hc_head kernel's gate."""
    from oracles.gate.fuzz import SuiteError
    from tests.kernel.test_regressions import test_fixture_replays
    path = fixture_file(tmp_path, lambda d: x_field(d).update(storage_elements=1, bytes_b64="AAA="))
    with pytest.raises(SuiteError, match=rf"corrupt fixture, not the kernel's failure: {path}"):
        test_fixture_replays(path, implementation=None, fuzz=None)


def test_a_case_whose_tensors_together_pass_the_case_limit_is_refused_before_allocating(tmp_path):
    """Each tensor under its own limit, the case over its own: judging it would take ~20x its bytes."""
    elements = MAX_CASE_BYTES // 4 + 1  # float32, one stored element, a stride-0 view
    assert elements <= MAX_TENSOR_ELEMENTS

    def big_case(d):
        x = x_field(d)
        x.update(dtype="float32", shape=[elements], stride=[0], storage_offset=0, storage_elements=1,
                 bytes_b64=base64.b64encode(b"\0" * 4).decode())
    path = fixture_file(tmp_path, big_case)
    with pytest.raises(CaseFormatError, match=rf"{path}.*by input 'x'; a case may hold at most {MAX_CASE_BYTES}"):
        load_fixture(path)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: x_field(d).pop("bytes_b64"), "bytes_b64"),
    (lambda d: x_field(d).update(bytes_b64=base64.b64encode(b"\0" * 6).decode()), "bytes_b64"),
    (lambda d: x_field(d).update(shape="oops"), "malformed"),
    (lambda d: d["case"]["inputs"].update(x={"tensor": 7}), "'tensor' must be an object"),
])
def test_a_corrupt_fixture_names_the_file_and_the_field(tmp_path, mutate, field):
    path = fixture_file(tmp_path, mutate)
    with pytest.raises(CaseFormatError) as error:
        load_fixture(path)
    assert str(path) in str(error.value) and field in str(error.value) and "input 'x'" in str(error.value)


def test_deeply_nested_json_is_a_format_error_not_a_recursion_error(tmp_path):
    path = tmp_path / "hc_head" / "deep.json"
    path.parent.mkdir()
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CaseFormatError, match="nested too deeply"):
        load_fixture(path)


# ---------------------------------------------------------------------------------------------
# Zips


def write_zip(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_a_member_that_unpacks_past_its_limit_is_refused_while_streaming(tmp_path):
    """A few KB of zip whose member unpacks to megabytes (a zip bomb): the bytes are counted as
    they come, nothing past the limit is kept or written."""
    bomb = HC_HEAD.encode() + b"#" * (ZIP_MAX_MEMBER_BYTES + 1)
    archive = write_zip(tmp_path / "bomb.zip", {"hc_head.py": bomb})
    assert archive.stat().st_size < 100_000
    with pytest.raises(KernelLoadError, match="hc_head.py is over .* bytes unpacked"):
        load_kernel("hc_head", archive, workdir=tmp_path / "work")
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").rglob("*.py"))


def test_members_that_unpack_past_the_total_are_refused(tmp_path):
    big = HC_HEAD.encode() + b"#" * (ZIP_MAX_MEMBER_BYTES - len(HC_HEAD) - 10)
    vendors = ["iluvatar", "metax", "enflame", "hygon", "kunlunxin"]
    members = {"hc_head.py": big, **{f"hc_head_{v}.py": big for v in vendors}}
    assert len(members) * len(big) > ZIP_MAX_TOTAL_BYTES
    with pytest.raises(KernelLoadError, match="past the .* bytes all members may unpack to"):
        load_kernel("hc_head", write_zip(tmp_path / "many.zip", members))


def test_too_many_entries_are_refused(tmp_path):
    members = {"hc_head.py": HC_HEAD.encode(), **{f"notes/{i}.txt": b"" for i in range(ZIP_MAX_MEMBERS)}}
    with pytest.raises(KernelLoadError, match="entries"):
        load_kernel("hc_head", write_zip(tmp_path / "crowd.zip", members))


def test_a_corrupt_deflate_stream_names_the_member(tmp_path):
    archive = write_zip(tmp_path / "corrupt.zip", {"hc_head.py": HC_HEAD.encode() * 4})
    raw = bytearray(archive.read_bytes())
    start = raw.index(b"hc_head.py") + len("hc_head.py")  # the local header's name, then the data
    for i in range(start + 40, start + 200):
        raw[i] ^= 0x5A
    archive.write_bytes(bytes(raw))
    with pytest.raises(KernelLoadError, match="member hc_head.py cannot be unpacked"):
        load_kernel("hc_head", archive)


def _patch_member_header(archive: Path, name: str, *, flags: int | None = None, method: int | None = None) -> None:
    """Rewrite a member's general-purpose flags or compression method in both of its headers."""
    raw = bytearray(archive.read_bytes())
    for signature, flags_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        at = raw.index(signature)
        if flags is not None:
            raw[at + flags_at: at + flags_at + 2] = flags.to_bytes(2, "little")
        if method is not None:
            raw[at + method_at: at + method_at + 2] = method.to_bytes(2, "little")
    archive.write_bytes(bytes(raw))


@pytest.mark.parametrize("patch, why", [
    (dict(flags=0x1), "encrypted"),      # password protected: the judge cannot read it either
    (dict(method=98), "compression"),    # PPMd: a method zipfile cannot unpack
], ids=["encrypted", "unknown-compression"])
def test_a_member_that_cannot_be_read_is_a_usage_error(tmp_path, patch, why):
    archive = write_zip(tmp_path / "locked.zip", {"hc_head.py": HC_HEAD.encode()}, compression=zipfile.ZIP_STORED)
    _patch_member_header(archive, "hc_head.py", **patch)
    with pytest.raises(KernelLoadError, match=rf"member hc_head.py cannot be unpacked: .*{why}"):
        load_kernel("hc_head", archive)


def test_a_zip_is_unpacked_once_per_run(tmp_path):
    archive = write_zip(tmp_path / "sub.zip", {"hc_head.py": HC_HEAD.encode()})
    work = tmp_path / "work"
    first = load_kernel("hc_head", archive, workdir=work).implementations[0]
    second = load_kernel("hc_head", archive, workdir=work).implementations[0]
    assert first.path == second.path and first.path.is_relative_to(work)
    assert len(list(work.rglob("*.py"))) == 1


# ---------------------------------------------------------------------------------------------
# Kernel modules and paths


def test_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(KernelLoadError, match="is a directory"):
        load_kernel("hc_head", tmp_path)


def test_a_module_that_exits_at_import_is_a_usage_error(tmp_path):
    kernel = tmp_path / "exits.py"
    kernel.write_text("import sys\nsys.exit(7)\n")
    with pytest.raises(KernelLoadError, match=r"called sys.exit\(7\)"):
        load_kernel("hc_head", kernel)


ENTRY = "\n\ndef hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):\n    pass\n"


@pytest.mark.parametrize("body, expected", [
    ("import os\nos.chdir('/')\n", r"tried to change the working directory \(to '/'\), refused"),
    ("import os\ntry:\n    os.chdir('/')\nexcept Exception:\n    pass\n",  # caught: refused all the same
     r"tried to change the working directory \(to '/'\), refused"),
    ("import ctypes\nctypes.CDLL(None).chdir(b'/')\n",  # past the patch: found and undone
     r"changed the working directory to '/' \(restored to "),
    ("import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n",
     r"tried to start a thread \('.*', running 'sleep'\), refused"),
    ("import _thread, time\n_thread.start_new_thread(time.sleep, (3600,))\n",
     r"tried to start a thread \(running 'sleep'\), refused"),
    ("from concurrent.futures import ThreadPoolExecutor\nPOOL = ThreadPoolExecutor(1)\nPOOL.submit(print)\n",
     r"tried to start a thread \('ThreadPoolExecutor.*'\), refused"),
    ("import os\nos._exit(0)\n", r"tried to end the process \(os._exit\(0\)\), refused"),
], ids=["chdir", "chdir-caught", "chdir-ctypes", "thread", "low-level-thread", "thread-pool", "os-exit-0"])
def test_a_module_that_changes_the_process_at_import_is_a_usage_error(tmp_path, body, expected):
    """A thread would keep the run from exiting, a new directory would move every relative path
    of the run, os._exit(0) would end the gate with a passing exit code: each is refused at import,
    and the process is left as it was."""
    kernel = tmp_path / "side_effects.py"
    kernel.write_text(body + ENTRY)
    cwd, threads = os.getcwd(), set(threading.enumerate())
    patched = (os.chdir, os._exit, threading.Thread.start)
    with pytest.raises(KernelLoadError, match=rf"^--kernel hc_head=side_effects.py: at import the module {expected}"):
        load_kernel("hc_head", kernel)
    assert os.getcwd() == cwd
    assert set(threading.enumerate()) <= threads
    assert (os.chdir, os._exit, threading.Thread.start) == patched  # only while the module is imported


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_module_path_that_is_not_a_regular_file_is_a_usage_error(tmp_path):
    fifo = tmp_path / "pipe.py"  # reading it would block forever
    os.mkfifo(fifo)
    with pytest.raises(KernelLoadError, match="pipe.py: not a regular file"):
        load_kernel("hc_head", fifo)


def test_a_non_utf8_module_is_a_usage_error_even_with_a_coding_line(tmp_path):
    kernel = tmp_path / "latin1.py"
    kernel.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9" + ENTRY.encode())  # Python imports it; the judge cannot
    with pytest.raises(KernelLoadError, match=r"latin1.py: not UTF-8 text \(byte 0xe9 at offset 31\)"):
        load_kernel("hc_head", kernel)


def test_an_oversized_or_unreadable_module_is_a_usage_error(tmp_path, monkeypatch):
    big = tmp_path / "big.py"
    big.write_bytes(ENTRY.encode() + b"#" * PY_MAX_BYTES)
    size = PY_MAX_BYTES + len(ENTRY)
    with pytest.raises(KernelLoadError, match=rf"big.py: {size} bytes; a kernel module may have at most"):
        load_kernel("hc_head", big)
    locked = tmp_path / "locked.py"
    locked.write_text(ENTRY)

    def denied(self):  # chmod 000 does not stop root, who runs CI here
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(KernelLoadError, match="locked.py: cannot be read: Permission denied"):
        load_kernel("hc_head", locked)


def test_the_gate_reports_it_in_one_line_with_exit_code_4_and_leaves_no_temporary_folder(tmp_path):
    kernel = tmp_path / "exits.py"
    kernel.write_text("import sys\nsys.exit(7)\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", f"--kernel=hc_head={kernel}", "-p", "no:cacheprovider",
                           "-q", "tests/kernel/test_ops.py"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 4, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "called sys.exit(7)" in done.stderr
    assert not [p for p in scratch.iterdir() if p.name.startswith("tritonfuzz-")], list(scratch.iterdir())


SEGFAULT_AT_IMPORT = "import ctypes\nctypes.string_at(0)\n"


def test_a_module_that_kills_its_process_at_import_is_a_usage_error(tmp_path):
    """A segfault at import would end the run with no word: the module is imported in a child
    first, and the crash named (the member, in a zip). Here (an xdist worker: threads) the child
    is a fresh interpreter; test_the_forked_probe_... covers the fork a CPU gate uses."""
    kernel = tmp_path / "segv.py"
    kernel.write_text(SEGFAULT_AT_IMPORT)
    with pytest.raises(KernelLoadError, match=r"importing segv.py killed its process \(SIGSEGV\)"):
        load_kernel("hc_head", kernel, probe_timeout_s=60)
    generic = (ROOT / "kernels" / "hc_head.py").read_text()
    archive = write_zip(tmp_path / "sub.zip", {"hc_head.py": generic, "hc_head_metax.py": SEGFAULT_AT_IMPORT})
    with pytest.raises(KernelLoadError, match=r"importing sub.zip:hc_head_metax.py killed its process \(SIGSEGV\)"):
        load_kernel("hc_head", archive, workdir=tmp_path / "work", probe_timeout_s=60)


def test_a_module_that_hangs_at_import_is_a_usage_error(tmp_path):
    kernel = tmp_path / "hangs.py"
    kernel.write_text("print('1')\nimport time\ntime.sleep(600)\n")
    with pytest.raises(KernelLoadError, match=r"importing hangs.py did not finish in 3 s"):
        load_kernel("hc_head", kernel, probe_timeout_s=3)


FORKED_PROBE = """
import faulthandler, os, sys
os.environ["TRITON_INTERPRET"] = "1"
faulthandler.enable(open(os.dup(2), "w"))  # as pytest enables it: a dup of stderr, which the fork inherits
from oracles.submission import loader
from oracles.submission.loader import KernelLoadError, load_kernel
assert loader._may_fork(), (loader._os_threads(), loader._THREADS_AT_IMPORT)
for path, timeout_s in ((sys.argv[1], 60), (sys.argv[2], 3)):
    try:
        load_kernel("hc_head", path, probe_timeout_s=timeout_s)
    except KernelLoadError as e:
        print(e)
"""


def test_the_forked_probe_names_a_crash_and_a_hang_at_import(tmp_path):
    """The probe a CPU gate's controller runs: a fork of a process with torch imported and no
    thread started since, warning-free (Python >= 3.12 warns on forks beside a thread)."""
    segv, hangs = tmp_path / "segv.py", tmp_path / "hangs.py"
    segv.write_text(SEGFAULT_AT_IMPORT)
    hangs.write_text("print('1')\nimport time\ntime.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}  # the CPU tier, on a GPU machine too
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", FORKED_PROBE, str(segv),
                           str(hangs)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"--kernel hc_head={segv}: importing segv.py killed its process (SIGSEGV); a kernel module's import must start no thread, "
        f"change no directory and end no process",
        f"--kernel hc_head={hangs}: importing hangs.py did not finish in 3 s (a hang at import?)"], done.stdout + done.stderr
    assert not done.stderr, done.stderr  # no crash dump of the fork's, no warning


def test_the_probe_forks_only_a_cpu_process_with_no_thread_started_since_torch(monkeypatch):
    """A fork inherits torch and triton imported (no second import of them a gate); it must inherit no
    CUDA driver state and no lock another thread holds, so a GPU run or a thread started since
    torch's import (an OpenMP pool, a Python thread) means a fresh interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(loader, "_os_threads", lambda: loader._THREADS_AT_IMPORT)
    assert loader._may_fork() is (loader._THREADS_AT_IMPORT > 0 and not torch.cuda.is_initialized())
    monkeypatch.setattr(loader, "_os_threads", lambda: loader._THREADS_AT_IMPORT + 1)
    assert not loader._may_fork()
    monkeypatch.setattr(loader, "_os_threads", lambda: loader._THREADS_AT_IMPORT)
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not loader._may_fork()
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not loader._may_fork()


def test_the_gate_reports_a_crash_at_import_in_one_line(tmp_path):
    kernel = tmp_path / "segv.py"
    kernel.write_text(SEGFAULT_AT_IMPORT)
    done = subprocess.run([sys.executable, "-m", "pytest", f"--kernel=hc_head={kernel}", "-p", "no:cacheprovider",
                           "-q", "tests/kernel/test_ops.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "killed its process (SIGSEGV)" in done.stderr and "INTERNALERROR" not in done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # not the probe's own crash dump too


def test_a_wrong_selection_expression_in_a_gate_is_a_usage_error_not_an_internal_error(tmp_path):
    """A gate runs in xdist workers, and only workers parse -k: the controller checks it first."""
    done = subprocess.run([sys.executable, "-m", "pytest", f"--kernel=hc_head={ROOT / 'kernels' / 'hc_head.py'}",
                           "-p", "no:cacheprovider", "-q", "tests/kernel/test_static_scan.py", "-k", "judge and T=1-"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "Wrong expression passed to '-k': judge and T=1-" in done.stderr


# ---------------------------------------------------------------------------------------------
# Kernel calls: memory and the process


def _call(fn, x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    return fn(x=x, hc_fn=hc_fn, hc_scale=hc_scale, hc_base=hc_base, norm_eps=norm_eps, hc_eps=hc_eps)


def asks_for_64_gib(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    scratch = torch.empty(8 * 2 ** 30, dtype=torch.float64)  # 64 GiB: more than the machine has
    return _call(bundled_hc_head, x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


def allocates_in_a_loop(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    kept = [torch.zeros(64 * 1024, dtype=torch.bfloat16) for _ in range(64)]  # CPU: 128 KiB each, 8 MiB in all
    return _call(bundled_hc_head, x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


def test_an_allocation_past_the_per_call_limit_fails_its_case_and_the_run_goes_on():
    """Refused before anything is allocated: the verdict names the call, its size, the limit and
    the kernel's line; the next call (the bundled kernel, same case) runs as usual."""
    import resource
    case = first_judge_case()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    verdict = run_case("hc_head", asks_for_64_gib, case, options())
    contract = verdict.check("contract")
    assert contract.status == FAIL, verdict.render()
    message = contract.message
    assert "AllocationLimitError: torch.empty([8589934592], torch.float64) at test_hostile_inputs.py:" in message
    assert "68719476736 bytes (64.0 GiB)" in message and "per-call limit of 1073741824 bytes" in message
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 256 * 1024  # KiB: nothing was allocated
    assert run_case("hc_head", bundled_hc_head, case, options()).check("contract").status == PASS


def test_the_per_call_limit_counts_every_allocation_of_the_call():
    case = first_judge_case()
    verdict = run_case("hc_head", allocates_in_a_loop, case, options(alloc_limit=4 * 2 ** 20))
    message = verdict.check("contract").message
    assert verdict.check("contract").status == FAIL and "torch.zeros([65536], torch.bfloat16)" in message
    assert ("asks for 131072 bytes on the CPU during the kernel call, 4194304 bytes (4.0 MiB) already allocated in "
            "this call: past the per-call limit of 4194304 bytes (4.0 MiB)") in message  # the 33rd of 64
    assert run_case("hc_head", allocates_in_a_loop, case, options(alloc_limit=None)).check("contract").status == PASS


def bytearray_past_the_process_limit(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    buffer = bytearray(2 * process_limit())  # not a torch allocator: only the process limit sees it
    return _call(bundled_hc_head, x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


def torch_op_past_the_process_limit(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    wide = x.new_zeros(1).expand(process_limit()).contiguous()  # an op's result, not an allocator's
    return _call(bundled_hc_head, x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


@pytest.mark.skipif(process_limit() is None or process_limit() > 64 * GIB,
                    reason="needs the process memory limit (--memory-limit, CPU tier)")
@pytest.mark.parametrize("kernel", [bytearray_past_the_process_limit, torch_op_past_the_process_limit])
def test_memory_past_the_process_limit_is_a_fault_of_the_call_not_a_refusal(kernel):
    """What the per-call limit cannot see (Python objects, a torch op's result) meets the process
    limit: the call fails at once with a memory error, a fault (never an `unsupported` refusal,
    even outside the judge domain), and the message says which limit was in force."""
    inside = first_judge_case()
    outside = dataclasses.replace(inside, inputs={**inside.inputs, "x": inside.inputs["x"].float()})  # x.dtype=float32
    for case in (inside, outside):
        verdict = run_case("hc_head", kernel, case, options())
        contract = verdict.check("contract")
        assert contract.status == FAIL, verdict.render()
        assert "RLIMIT_DATA, set by --memory-limit" in contract.message


def leaves_a_thread_and_a_new_directory(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps):
    stop = threading.Event()
    threading.Thread(target=stop.wait, name="kernel-helper", daemon=True).start()
    leaves_a_thread_and_a_new_directory.stop = stop
    os.chdir("/")
    return _call(bundled_hc_head, x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps)


def test_a_call_that_changes_the_process_fails_process_state_and_is_undone():
    case = first_judge_case()
    cwd = os.getcwd()
    try:
        verdict = run_case("hc_head", leaves_a_thread_and_a_new_directory, case, options())
    finally:
        leaves_a_thread_and_a_new_directory.stop.set()
    check = verdict.check("process-state")
    assert os.getcwd() == cwd
    assert check.status == FAIL and "changed the working directory to '/'" in check.message, verdict.render()
    assert "left 1 thread(s) of its own running after it returned: 'kernel-helper' (daemon)" in check.message
