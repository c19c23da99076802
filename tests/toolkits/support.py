"""Real local sandboxes for tests: bubblewrap runs for real; a machine without it fails naming it."""

from __future__ import annotations

import shutil
from pathlib import Path

from toolkits.sandbox.backend import ExecResult
from toolkits.sandbox.local import LocalBackend

NONE: dict[str, str] = {}


def local_backend(data_dir: Path, **overrides: float | int) -> LocalBackend:
    assert shutil.which("bwrap"), "these tests need bubblewrap: install the Debian package bubblewrap (make deps)"
    return LocalBackend(data_dir=data_dir, **overrides)  # type: ignore[arg-type]  # keyword overrides of numbers


async def run(backend: LocalBackend, sandbox_id: str, command: str, *, deadline: float = 30.0) -> ExecResult:
    return await backend.exec(sandbox_id, command, settings=NONE, credential=NONE, deadline_seconds=deadline)


def processes_with(marker: str) -> list[int]:
    """Host PIDs whose command line contains `marker` (read from the host's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended while we looked
        if marker in cmdline and "pytest" not in cmdline:
            found.append(int(entry.name))
    return found
