"""The example component (examples/components/workspace_reader), checked once per test run into a
compile cache of the test run, and a recorder of the events a call commits."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from toolkits.wasm import ComponentLimits, ComponentOutcome, WorkspaceGrant, check_component, run_component

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"
LIMITS = ComponentLimits(deadline_s=10.0, memory_bytes=128 * 1024 * 1024, fuel=2_000_000_000)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A compile cache warmed by check_component, as the server does at startup; one per test
    run, shared by its parallel workers (each compile costs seconds of CPU; artifacts are written
    atomically, so workers compiling at once each see a whole one)."""
    base = tmp_path_factory.getbasetemp()
    run_root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory = run_root / "wasm-cache"
    directory.mkdir(mode=0o700, exist_ok=True)
    assert COMPONENT.is_file(), f"the example component is missing: {COMPONENT} (see its README to build it)"
    check_component(COMPONENT, cache_dir=directory)
    yield directory


@dataclass
class Recorder:
    """An emit callback that commits into a list, after an optional pause and action."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay_s: float = 0.0
    on_commit: Any = None

    async def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.on_commit is not None:
            self.on_commit(kind, data)
        self.events.append((kind, data))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    directory = tmp_path / "workspace"
    directory.mkdir()
    return directory


def worker_processes() -> list[int]:
    """Process ids of this process's component workers still alive (not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"toolkits.wasm.worker" in command:
            found.append(int(entry.name))
    return found


async def call(
    tool: str,
    input: dict[str, Any],
    *,
    cache_dir: Path,
    grants: list[WorkspaceGrant],
    limits: ComponentLimits = LIMITS,
    emit: Recorder | None = None,
) -> ComponentOutcome:
    return await run_component(
        COMPONENT,
        tool=tool,
        input=input,
        config={},
        limits=limits,
        grants=grants,
        emit=emit or Recorder(),
        cache_dir=cache_dir,
    )


async def assert_the_next_call_works(cache_dir: Path, workspace: Path) -> None:
    """No worker is left behind, and a well-behaved call after a failed one succeeds."""
    assert worker_processes() == []
    (workspace / "after.txt").write_text("still fine")
    outcome = await call(
        "read_file", {"path": "after.txt"}, cache_dir=cache_dir, grants=[WorkspaceGrant(workspace, "read")]
    )
    assert outcome == ComponentOutcome("ok", {"path": "after.txt", "bytes": 10, "text": "still fine"}, None)
    assert worker_processes() == []
