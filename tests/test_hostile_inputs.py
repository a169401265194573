"""Hostile input never takes the suite or the machine down: a fixture, a zip or a kernel module
that is corrupt, huge, or misbehaves at import gives a one-line error naming the file and what
was expected. The tests build the hostile files themselves."""

import base64
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from kernels.loader import (ZIP_MAX_MEMBER_BYTES, ZIP_MAX_MEMBERS, ZIP_MAX_TOTAL_BYTES, KernelLoadError,
                            load_kernel)
from strategies.case import MAX_TENSOR_ELEMENTS, CaseFormatError, case_to_json
from strategies.fixtures import load_fixture
from strategies.hc_head import judge_cases

ROOT = Path(__file__).resolve().parent.parent
HC_HEAD = (ROOT / "kernels" / "hc_head.py").read_text()


# ---------------------------------------------------------------------------------------------
# Fixtures


def fixture_file(tmp_path, mutate) -> Path:
    """A fixture of the judge's first hc_head case, with `mutate(document)` applied."""
    document = {"case": case_to_json(judge_cases("cpu")[0])}
    mutate(document)
    path = tmp_path / "hc_head" / "0123456789abcdef.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def x_field(document) -> dict:
    return document["case"]["inputs"]["x"]["tensor"]


def test_a_stride_0_view_claiming_billions_of_elements_is_refused_before_allocating(tmp_path):
    def huge_view(d):
        x = x_field(d)
        x.update(shape=[64, 4, 2 ** 22], stride=[0, 0, 0], storage_offset=0, storage_elements=1,
                 bytes_b64=base64.b64encode(b"\0\0").decode())
    path = fixture_file(tmp_path, huge_view)
    with pytest.raises(CaseFormatError, match=rf"{path}.*input 'x'.*over the {MAX_TENSOR_ELEMENTS} elements"):
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


def test_the_gate_reports_it_in_one_line_with_exit_code_4_and_leaves_no_temporary_folder(tmp_path):
    kernel = tmp_path / "exits.py"
    kernel.write_text("import sys\nsys.exit(7)\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", f"--kernel=hc_head={kernel}", "-p", "no:cacheprovider",
                           "-q", "tests/test_hc_head.py"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 4, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "called sys.exit(7)" in done.stderr
    assert not [p for p in scratch.iterdir() if p.name.startswith("tritonfuzz-")], list(scratch.iterdir())
