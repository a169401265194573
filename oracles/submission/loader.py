"""Implementations under test: the bundled kernels, and outside ones given as `--kernel OP=PATH`.

PATH is a .py module defining the op's function (or `reference`, the name the competition
imports), or a competition .zip read the way the judge reads it: `<op>.py` plus optional
`<op>_<vendor>.py` members; every Python member becomes its own implementation, because vendor
files are where unexercised bugs hide. Every problem is a KernelLoadError whose message names
the argument and what was expected.
"""

from __future__ import annotations

import _thread
import faulthandler
import hashlib
import importlib.util
import inspect
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from oracles.ops import OPS, get_op

VENDORS = ("iluvatar", "metax", "enflame", "hygon", "kunlunxin", "ascend", "amd", "nvidia")
ZIP_MAX_BYTES = 10 * 1024 * 1024          # the judge's limit on a submission
ZIP_MAX_MEMBERS = 256                     # entries of any kind
ZIP_MAX_MEMBER_BYTES = 4 * 1024 * 1024    # unpacked, per member the judge reads (a kernel is source text)
ZIP_MAX_TOTAL_BYTES = 16 * 1024 * 1024    # unpacked, all members the judge reads together
PY_MAX_BYTES = ZIP_MAX_MEMBER_BYTES       # a .py given directly: the limit of a member


class KernelLoadError(ValueError):
    """An outside kernel that cannot be tested; the message says what to fix."""


@dataclass(frozen=True)
class Implementation:
    op: str
    name: str  # shown in test ids and reports: "bundled", "fused", "my.py", "sub.zip:hc_head_amd.py"
    fn: Callable = field(compare=False)
    path: Path | None = None  # the source file, for the static scan and the fixture's kernel hash
    sha256: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass
class LoadedKernel:
    op: str
    source: str  # the PATH as given
    implementations: list[Implementation]
    notes: list[str] = field(default_factory=list)  # e.g. zip members that were ignored


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def bundled_implementations(op: str) -> list[Implementation]:
    spec = get_op(op)
    module = spec.kernel_module
    # IMPLEMENTATIONS: (name, function) pairs (or a dict) when a module ships several designs.
    table = dict(getattr(module, "IMPLEMENTATIONS", None) or {"bundled": getattr(module, op)})
    path = Path(module.__file__)
    return [Implementation(op, name, fn, path, file_sha256(path)) for name, fn in table.items()]


def parse_kernel_option(value: str) -> tuple[str, Path]:
    op, sep, path = value.partition("=")
    if not sep or not op or not path:
        raise KernelLoadError(f"--kernel {value!r}: expected OP=PATH, e.g. --kernel hc_head=my_kernel.py")
    if op not in OPS:
        raise KernelLoadError(f"--kernel {value!r}: unknown op {op!r}; known ops: {', '.join(sorted(OPS))}")
    return op, Path(path)


def load_kernel(op: str, path: Path, *, workdir: Path | None = None,
                probe_timeout_s: float | None = None) -> LoadedKernel:
    """The implementations in PATH. A zip's members are unpacked once, into `workdir` (a
    folder the caller removes; one per run, shared by its processes) or a fresh temporary one.
    With `probe_timeout_s`, each module is first imported in a child process (probe_import)."""
    path = Path(path)
    if not path.exists():
        raise KernelLoadError(f"--kernel {op}={path}: no such file")
    if path.is_dir():
        raise KernelLoadError(f"--kernel {op}={path}: is a directory; expected a .py module or a competition .zip")
    if path.suffix == ".py":
        read_source(path, where=f"--kernel {op}={path}")
        if probe_timeout_s is not None:
            probe_import([path], where=f"--kernel {op}={path}", timeout_s=probe_timeout_s)
        return LoadedKernel(op, str(path), [load_module_implementation(op, path, name=path.name)])
    if path.suffix == ".zip":
        return load_zip(op, path, workdir=workdir, probe_timeout_s=probe_timeout_s)
    raise KernelLoadError(f"--kernel {op}={path}: expected a .py module or a competition .zip, got {path.suffix or 'no suffix'!r}")


def entry_point(op: str, module, *, where: str) -> Callable:
    """The op's function in `module`: `<op>`, else `reference`; its signature must accept the
    judge's keyword arguments."""
    fn = getattr(module, op, None) or getattr(module, "reference", None)
    if fn is None or not callable(fn):
        raise KernelLoadError(f"{where}: defines neither {op}() nor reference(); "
                              f"expected a function {op}({', '.join(get_op(op).params)})")
    params = get_op(op).params
    try:
        inspect.signature(fn).bind(**{p: None for p in params})
    except TypeError as e:
        raise KernelLoadError(f"{where}: {fn.__name__}{inspect.signature(fn)} cannot be called as the judge calls it "
                              f"({', '.join(f'{p}=...' for p in params)}): {e}") from None
    except ValueError:
        pass  # builtins without a signature: nothing to check
    return fn


def read_source(path: Path, *, where: str) -> bytes:
    """A .py module's bytes: a regular, readable file of at most PY_MAX_BYTES, UTF-8 as the judge
    reads it (a FIFO would block the read, a device never end it)."""
    if not path.is_file():
        raise KernelLoadError(f"{where}: not a regular file; expected a .py module or a competition .zip")
    try:
        size = path.stat().st_size
        if size > PY_MAX_BYTES:
            raise KernelLoadError(f"{where}: {size} bytes; a kernel module may have at most {PY_MAX_BYTES}")
        data = path.read_bytes()
    except OSError as e:
        raise KernelLoadError(f"{where}: cannot be read: {e.strerror or e}") from None
    if len(data) > PY_MAX_BYTES:  # grew since stat
        raise KernelLoadError(f"{where}: over {PY_MAX_BYTES} bytes; a kernel module may have at most {PY_MAX_BYTES}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KernelLoadError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                              f"the judge reads UTF-8 source") from None
    return data


IMPORT_PROBE_TIMEOUT_S = 120.0  # a cold import of torch and triton takes seconds; a kernel module's own, less
_IMPORT_RULE = "a kernel module's import must start no thread, change no directory and end no process"


class _RefusedAtImport(RuntimeError):
    """Raised inside a kernel module's import by what it must not do there."""


def _named(fn) -> str:
    return repr(getattr(fn, "__qualname__", fn))


@contextmanager
def _import_guard(refused: list[str]):
    """While a kernel module is imported (by this thread), what would outlive the import or move
    the run under its feet is refused: starting a thread (a running thread keeps the process from
    exiting), changing the working directory (every relative path of the run would move: fixtures,
    the report) and os._exit (the process would end with the module's exit code, 0 included). Each
    raises inside the module and is recorded in `refused` (a module that catches the error is
    refused all the same). What gets past the patches (ctypes, a C extension) is found afterwards:
    the directory is restored, and threads still running are recorded."""
    me, active = threading.get_ident(), [True]
    cwd = os.getcwd()
    saved = {(owner, attr): getattr(owner, attr) for owner, attr in (
        (threading.Thread, "start"), (_thread, "start_new_thread"), (os, "chdir"), (os, "fchdir"), (os, "_exit"))}

    def refuse(owner, attr, what):
        original = saved[(owner, attr)]

        def wrapper(*args, **kwargs):
            if not active[0] or threading.get_ident() != me:  # kept by the module for later, or another thread
                return original(*args, **kwargs)
            refused.append(f"tried to {what(*args)}, refused")
            raise _RefusedAtImport(f"a kernel module must not {what(*args)} at import")
        setattr(owner, attr, wrapper)

    refuse(threading.Thread, "start", lambda t, *_: f"start a thread ({t.name!r}, running "
                                                    f"{_named(getattr(t, '_target', None) or t.run)})")
    refuse(_thread, "start_new_thread", lambda fn, *_: f"start a thread (running {_named(fn)})")
    refuse(os, "chdir", lambda target, *_: f"change the working directory (to {target!r})")
    refuse(os, "fchdir", lambda fd, *_: "change the working directory (os.fchdir)")
    refuse(os, "_exit", lambda code, *_: f"end the process (os._exit({code!r}))")
    before = set(threading.enumerate())
    try:
        yield
    finally:
        active[0] = False
        for (owner, attr), original in saved.items():
            setattr(owner, attr, original)
        if os.getcwd() != cwd:
            refused.append(f"changed the working directory to {os.getcwd()!r} (restored to {cwd!r})")
            os.chdir(cwd)
        started = [t for t in threading.enumerate() if t not in before]
        if started:
            refused.append(f"started threads that are still running ({', '.join(repr(t.name) for t in started)})")


def load_module_implementation(op: str, path: Path, *, name: str) -> Implementation:
    digest = file_sha256(path)
    module_name = f"tritonfuzz_kernel_{digest[:12]}_{path.stem}"
    where = f"--kernel {op}={name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"{where}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # @triton.jit needs the module importable by name
    refused: list[str] = []  # what the module did at import that it must not (_import_guard)
    try:
        with _import_guard(refused):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # the kernel author's import error (or exit), reported as a usage error
        del sys.modules[module_name]
        if refused:
            raise KernelLoadError(f"{where}: at import the module {refused[0]}; {_IMPORT_RULE}") from None
        what = f"called sys.exit({e.code!r})" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
        raise KernelLoadError(f"{where}: importing the module failed: {what}") from None
    if refused:
        del sys.modules[module_name]
        raise KernelLoadError(f"{where}: at import the module {refused[0]}; {_IMPORT_RULE}")
    return Implementation(op, name, entry_point(op, module, where=where), path, digest)


# The child of probe_import: imports each module given, saying which before it starts.
_PROBE = """
import importlib.util, sys
for i, path in enumerate(sys.argv[1:]):
    print(f"tritonfuzz-probe-start {i}", flush=True)
    spec = importlib.util.spec_from_file_location(f"tritonfuzz_probe_{i}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        pass  # a Python error is reported by the import in the run itself, with its message
"""


def probe_import(paths: list[Path], *, where: str, timeout_s: float, names: list[str] | None = None) -> None:
    """Import the modules in a child process first: a module that kills its process at import (a
    segfault through ctypes, a C extension's abort) or never finishes importing would otherwise
    take the run down with no word; here it is a one-line error naming the module. Python errors
    are left to the import in the run, which reports them with their message."""
    names = names or [Path(p).name for p in paths]
    with tempfile.TemporaryFile() as out:
        run = _probe_forked if _may_fork() else _probe_spawned
        code = run([str(p) for p in paths], out, timeout_s)
        out.seek(0)
        if code is None:
            raise KernelLoadError(f"{where}: importing {names[_last_started(out)]} did not finish in {timeout_s:g} s "
                                  f"(a hang at import?)")
        if code < 0:
            raise KernelLoadError(f"{where}: importing {names[_last_started(out)]} killed its process "
                                  f"({_signal_name(-code)}); {_IMPORT_RULE}")


def _os_threads() -> int:
    """This process's threads as the kernel counts them (C threads too); 0 where it cannot tell."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


# The threads importing torch started: numpy's OpenBLAS pool (none with OPENBLAS_NUM_THREADS=1),
# which OpenBLAS shuts down around a fork (pthread_atfork). A thread started later (an OpenMP pool
# after a torch op, a Python thread) may hold a lock that a fork would copy held.
_THREADS_AT_IMPORT = _os_threads()


def _may_fork() -> bool:
    """A forked child starts with torch and triton already imported (a spawned one imports them
    again, every gate: tests/results/2026-12-07-session23.md): only where that is safe, a CPU run
    (the interpreter: no CUDA driver a child could inherit half-initialized) with no thread
    started since torch was imported."""
    return (os.name == "posix" and os.environ.get("TRITON_INTERPRET") == "1" and not _cuda_touched()
            and threading.active_count() == 1 and 0 < _os_threads() <= _THREADS_AT_IMPORT)


def _cuda_touched() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _probe_spawned(paths: list[str], out, timeout_s: float) -> int | None:
    """The probe in a fresh interpreter: its exit code, None past timeout_s."""
    try:
        return subprocess.run([sys.executable, "-c", _PROBE, *paths], stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.DEVNULL, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        return None


def _probe_forked(paths: list[str], out, timeout_s: float) -> int | None:
    """The probe in a fork of this process: its exit code (minus the signal that ended it), None
    past timeout_s (then killed)."""
    child = multiprocessing.get_context("fork").Process(target=_probe_child, args=(paths, out.fileno()), daemon=True)
    with warnings.catch_warnings():
        # Python >= 3.12 warns on any fork with a second thread; _may_fork allowed only OpenBLAS's.
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        child.start()
    child.join(timeout_s)
    if child.exitcode is None:
        child.kill()
        child.join()
        return None
    return child.exitcode


def _probe_child(paths: list[str], out_fd: int) -> None:
    """In the fork: _PROBE itself, its output (the marks, and what the modules print) to out_fd as
    in the spawned probe, stdin and stderr on /dev/null."""
    faulthandler.disable()  # it writes to a descriptor of its own (pytest's dup of stderr), not fd 2
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd, to in ((0, devnull), (1, out_fd), (2, devnull)):
        os.dup2(to, fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
    sys.argv = ["-c", *paths]
    exec(compile(_PROBE, "<tritonfuzz probe>", "exec"), {"__name__": "__main__"})
    sys.stdout.flush()
    os._exit(0)  # nothing of the parent's (atexit, pytest's hooks) runs in the fork


def _last_started(out) -> int:
    """The index of the last module the probe said it began importing (read from the end only:
    the module may have printed without bound)."""
    out.seek(0, os.SEEK_END)
    out.seek(max(0, out.tell() - 4096))
    marks = [line.split()[-1] for line in out.read().decode("utf-8", "replace").splitlines()
             if line.startswith("tritonfuzz-probe-start ")]
    return int(marks[-1]) if marks and marks[-1].isdigit() else 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def zip_member_role(op: str, member: str) -> str | None:
    """'generic' for <op>.py, the vendor for <op>_<vendor>.py, None for anything else."""
    base = member.rsplit("/", 1)[-1]
    if base == f"{op}.py":
        return "generic"
    for vendor in VENDORS:
        if base == f"{op}_{vendor}.py":
            return vendor
    return None


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: int, *, where: str) -> bytes:
    """A member's bytes, read in chunks and counted as they come (the header's sizes can lie):
    at most ZIP_MAX_MEMBER_BYTES, and at most `budget` bytes left of the zip's total."""
    limit = min(ZIP_MAX_MEMBER_BYTES, budget)
    chunks, size = [], 0
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(64 * 1024):
                size += len(chunk)
                if size > limit:
                    which = (f"over {ZIP_MAX_MEMBER_BYTES} bytes unpacked" if limit == ZIP_MAX_MEMBER_BYTES else
                             f"past the {ZIP_MAX_TOTAL_BYTES} bytes all members may unpack to")
                    raise KernelLoadError(f"{where}: member {info.filename} is {which}")
                chunks.append(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as e:
        raise KernelLoadError(f"{where}: member {info.filename} cannot be unpacked: {type(e).__name__}: {e}") from None
    return b"".join(chunks)


def load_zip(op: str, path: Path, *, workdir: Path | None = None, probe_timeout_s: float | None = None) -> LoadedKernel:
    where = f"--kernel {op}={path}"
    if path.stat().st_size > ZIP_MAX_BYTES:
        raise KernelLoadError(f"{where}: {path.stat().st_size} bytes; the judge accepts at most {ZIP_MAX_BYTES}")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise KernelLoadError(f"{where}: not a readable zip: {e}") from None
    notes, members = [], []
    with archive:
        infos = archive.infolist()
        if len(infos) > ZIP_MAX_MEMBERS:
            raise KernelLoadError(f"{where}: {len(infos)} entries; a submission may have at most {ZIP_MAX_MEMBERS}")
        budget = ZIP_MAX_TOTAL_BYTES
        for info in infos:
            if info.is_dir():
                continue
            role = zip_member_role(op, info.filename)
            if role is None:
                notes.append(f"{info.filename}: ignored (the judge reads only {op}.py and {op}_<vendor>.py, "
                              f"vendor in {', '.join(VENDORS)})")
                continue
            data = _read_member(archive, info, budget, where=where)
            budget -= len(data)
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise KernelLoadError(f"{where}: member {info.filename} is not UTF-8 text: {e}") from None
            members.append((info.filename, role, data))
    if not any(role == "generic" for _, role, _ in members):
        raise KernelLoadError(f"{where}: the zip holds no {op}.py (members: "
                              f"{', '.join(i for i, _, _ in members) or 'none that the judge reads'})")
    folder = _unpack_folder(op, path, workdir)
    unpacked = []
    for filename, role, data in sorted(members, key=lambda m: (m[1] != "generic", m[0])):
        target = folder / role / Path(filename).name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not (target.exists() and target.read_bytes() == data):  # unpacked once per run, reused by workers
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
        unpacked.append((target, f"{path.name}:{Path(filename).name}"))
    if probe_timeout_s is not None:
        probe_import([target for target, _ in unpacked], where=where, timeout_s=probe_timeout_s,
                     names=[name for _, name in unpacked])
    implementations = [load_module_implementation(op, target, name=name) for target, name in unpacked]
    return LoadedKernel(op, str(path), implementations, notes)


def _unpack_folder(op: str, path: Path, workdir: Path | None) -> Path:
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix=f"tritonfuzz-{op}-"))
    folder = Path(workdir) / f"{op}-{file_sha256(path)[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
