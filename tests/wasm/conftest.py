"""The example component (examples/components/workspace_reader), checked once per module into a
compile cache of the test run, and a recorder of the events a call commits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from toolkits.wasm import ComponentLimits, check_component

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"
LIMITS = ComponentLimits(deadline_s=10.0, memory_bytes=128 * 1024 * 1024, fuel=2_000_000_000)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A compile cache warmed by check_component, as the server does at startup."""
    directory = tmp_path_factory.mktemp("wasm-cache")
    directory.chmod(0o700)
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
