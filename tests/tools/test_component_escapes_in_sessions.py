"""A session's component cannot escape its brain environment, through a real server, the `loop`
harness and the example component: a write outside the granted workspace, a write under a read
grant, an endless loop (its deadline: `timeout`) and a memory bomb (its memory cap) each end the
call with its outcome and one readable line, and nothing is written anywhere."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, make_server, send_ok, wait_for_turn_end
from tests.support.served_schemas import assert_event_data_served

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"
MODEL = "openai/gpt-4.1-mini"
DEADLINE_S = 2  # the endless loop's: short, so the test stays short
MEMORY_BYTES = 64 << 20
NOT_PERMITTED = "not permitted (outside the granted workspace or not granted)"
TOOLS = {
    "write_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
    "spin": {"type": "object"},
    "hog_memory": {"type": "object"},
}


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, provider: ScriptedProvider) -> Iterator[BrainServer]:
    """One server for the module's cases: each runs in a session of its own."""
    assert COMPONENT.is_file(), f"the example component is missing: {COMPONENT}"
    started = make_server(
        tmp_path_factory.mktemp("brain"),
        harnesses={"loop": LOOP_HARNESS},
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.openai_base_url}},
        environments=[
            {
                "name": "box",
                "kind": "brain",
                "tenants": ["acme"],
                "components": [str(COMPONENT)],
                "grants": {"workspace": ["read", "read-write"]},
                "limits": {"deadline_seconds": DEADLINE_S, "memory_bytes": MEMORY_BYTES, "fuel": 10**15},
            }
        ],
    )
    started.directory.mkdir(parents=True, exist_ok=True)
    started.start()
    yield started
    started.stop(signal.SIGKILL)


def _session(server: BrainServer, grant: str) -> tuple[str, Path]:
    placement = {
        "environments": [{"name": "box", "filesystem": {"workspace": grant}}],
        "tools": [
            {"tool": {"name": name, "description": name, "input_schema": schema}, "env": "box"}
            for name, schema in TOOLS.items()
        ],
    }
    with server.client() as api:
        created = api.post(
            "/sessions", json={"harness": "loop", "config": {"model": MODEL, "tools": [], "placement": placement}}
        )
    assert created.status_code == 201, created.text
    session_id: str = created.json()["id"]
    workspace = server.data_dir / "sessions" / session_id / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("original")
    return session_id, workspace


def _files(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


@pytest.mark.parametrize(
    ("grant", "tool", "arguments", "outcome", "error"),
    [
        pytest.param(
            "read-write",
            "write_file",
            {"path": "../planted.txt", "text": "x"},
            "error",
            f"cannot write ../planted.txt: {NOT_PERMITTED}",
            id="outside_the_grant_case",
        ),
        pytest.param(
            "read",
            "write_file",
            {"path": "notes.txt", "text": "changed"},
            "error",
            f"cannot write notes.txt: {NOT_PERMITTED}",
            id="write_under_a_read_grant_case",
        ),
        pytest.param("read", "spin", {}, "timeout", f"deadline {DEADLINE_S} s passed", id="endless_loop_case"),
        pytest.param("read", "hog_memory", {}, "error", "memory limit 64 MiB exceeded", id="memory_bomb_case"),
    ],
)
def test_a_component_that_tries_to_escape_ends_with_its_outcome_and_writes_nothing(
    server: BrainServer,
    provider: ScriptedProvider,
    grant: str,
    tool: str,
    arguments: dict[str, Any],
    outcome: str,
    error: str,
) -> None:
    # given: a session whose component has the workspace under `grant`
    provider.reset()
    session_id, workspace = _session(server, grant)
    before = _files(workspace)

    # when: the model makes the escaping call
    accepted = send_ok(server, session_id, f"call {tool} {json.dumps(arguments)}")
    wait_for_turn_end(server, session_id, accepted["id"], timeout=60)

    # then: the call ended with its outcome and why; the workspace is as it was, nothing was planted
    events = history(server, session_id)
    (result,) = [e["data"] for e in events if e["type"] == "tool.result"]
    assert (result["outcome"], result["environment"]) == (outcome, "box"), result
    assert result["result"]["content"] == [{"type": "text", "text": f"tool {tool!r} failed in 'box': {error}"}]
    assert _files(workspace) == before == {"notes.txt": b"original"}
    assert list(server.directory.rglob("planted.txt")) == []
    with server.client() as api:  # and the served contract describes what was recorded
        assert assert_event_data_served(api, events) == {"tool.call", "tool.result"}
