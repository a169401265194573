"""The processes a self-test started, found by a string in their command line (a tmp_path the test
passes them): what a stopped engine or power run must not leave running. Reads /proc (Linux)."""
from pathlib import Path


def processes_naming(text: str) -> dict[int, str]:
    """pid -> command line of every process whose command line holds `text`."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if text in cmdline:
                    found[int(entry.name)] = cmdline.strip()
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found
