"""`--memcheck` on a GPU: the gate's judge cases and fixtures replayed under NVIDIA's
compute-sanitizer (its memcheck tool), one run per `--kernel`.

The CPU tier checks every interpreted load and store against its tensor's bounds
(oracles/harness/sanitizers.py, memcheck). A compiled kernel's accesses can only be seen by the driver's
own tool, which is slow (10-100x), so it replays a fixed set after the gate rather than fuzzing:
the judge's official cases and the fixture corpus, in one child pytest whose kernel calls run
without guard bands and without torch's caching allocator (TRITONFUZZ_SANITIZE=0,
PYTORCH_NO_CUDA_MEMORY_CACHING=1): with either, an out-of-bounds access lands in memory the
process owns -- a guard band, a neighbouring tensor of the same cached block -- and memcheck,
which tracks allocations, would see nothing. Each tensor is then its own cudaMalloc, and an
access past it is an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ERROR_EXIT_CODE = 97
# compute-sanitizer prefixes its lines with "========= "; pytest's own rules end in "=" too.
_ERROR_LINE = re.compile(r"^========= ((?:Invalid|Program hit|Malloc/Free error|Misaligned|Out-of-range) .*)$")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def find_compute_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for folder in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        candidate = Path(folder) / "bin" / "compute-sanitizer"
        if folder and candidate.is_file():
            return str(candidate)
    return None


def replay_command(tool: str, kernel_option: str, regressions_dir: str, root: Path) -> list[str]:
    """The child pytest under the sanitizer: judge cases and fixture replays of one --kernel."""
    return [tool, "--tool", "memcheck", "--error-exitcode", str(ERROR_EXIT_CODE), "--print-limit", "50",
            sys.executable, "-m", "pytest", f"--kernel={kernel_option}", f"--regressions-dir={regressions_dir}",
            "-n", "0", "-p", "no:cacheprovider", "-q", "--hypothesis-profile", "ci", "--minimize-budget", "0",
            "-k", "judge_cases or fixture_replays", str(root / "tests" / "kernel")]


def parse(output: str, returncode: int | None) -> dict:
    """{'status': 'pass' | 'fail' | 'not run', 'errors': count, 'messages': first distinct lines}."""
    summary = _SUMMARY.findall(output)
    messages = []
    for line in output.splitlines():
        match = _ERROR_LINE.match(line.rstrip())
        if match and "ERROR SUMMARY" not in line and match.group(1) not in messages:
            messages.append(match.group(1))
    count = int(summary[-1]) if summary else len(messages)
    if returncode is None:
        return {"status": "not run", "errors": count, "messages": messages[:10] or ["timed out"]}
    if not summary and returncode not in (0, 1, ERROR_EXIT_CODE):
        return {"status": "not run", "errors": 0,
                "messages": [f"compute-sanitizer ended with exit code {returncode} and no summary: "
                             + " ".join(output.strip().splitlines()[-3:])[:500]]}
    return {"status": "fail" if count or returncode == ERROR_EXIT_CODE else "pass", "errors": count,
            "messages": messages[:10]}


def memcheck_replay(kernel_option: str, regressions_dir: str, root: Path, *, timeout_s: float) -> dict:
    """Run the replay; the parsed result, with the command that reproduces it."""
    tool = find_compute_sanitizer()
    if tool is None:
        return {"status": "not run", "errors": 0, "messages": ["compute-sanitizer not found (PATH, $CUDA_HOME/bin, "
                                                                 "/usr/local/cuda/bin)"], "command": ""}
    command = replay_command(tool, kernel_option, regressions_dir, root)
    env = {**os.environ, "TRITONFUZZ_SANITIZE": "0", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    shown = "TRITONFUZZ_SANITIZE=0 PYTORCH_NO_CUDA_MEMORY_CACHING=1 " + " ".join(command)
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = None
    return {**parse(output, code), "command": shown}
