"""A component's tool runs in a worker process with the workspace it is granted, and each event
it emits is committed before it continues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.wasm.conftest import COMPONENT, LIMITS, Recorder
from toolkits.wasm import ComponentOutcome, WorkspaceGrant, check_component, run_component


def test_check_component_lists_the_tools_the_component_exports(cache_dir: Path) -> None:
    tools = check_component(COMPONENT, cache_dir=cache_dir)
    assert tools == ["read_file", "write_file", "list_dir", "spin", "hog_memory", "flood_events", "big_output"]


async def test_a_component_reads_the_granted_workspace_and_its_event_is_committed_first(
    cache_dir: Path, workspace: Path
) -> None:
    # The file is written by the commit of the component's read_started event: the component
    # can read it only if its emit returned after the commit.
    def prepare(kind: str, data: dict[str, Any]) -> None:
        (workspace / data["path"]).write_text("written during the commit\n")

    recorder = Recorder(delay_s=0.3, on_commit=prepare)
    outcome = await run_component(
        COMPONENT,
        tool="read_file",
        input={"path": "notes.txt"},
        config={"depth": 1},
        limits=LIMITS,
        grants=[WorkspaceGrant(workspace, "read")],
        emit=recorder,
        cache_dir=cache_dir,
    )
    assert outcome == ComponentOutcome(
        "ok", {"path": "notes.txt", "bytes": 26, "text": "written during the commit\n"}, None
    )
    assert recorder.events == [("read_started", {"path": "notes.txt"})]


async def test_a_read_write_grant_lets_the_component_write_its_workspace(cache_dir: Path, workspace: Path) -> None:
    outcome = await run_component(
        COMPONENT,
        tool="write_file",
        input={"path": "out.txt", "text": "from the component"},
        config={},
        limits=LIMITS,
        grants=[WorkspaceGrant(workspace, "read-write")],
        emit=Recorder(),
        cache_dir=cache_dir,
    )
    assert outcome == ComponentOutcome("ok", {"path": "out.txt", "bytes": 18}, None)
    assert (workspace / "out.txt").read_text() == "from the component"
