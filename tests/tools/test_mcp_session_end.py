"""An MCP call that times out or is interrupted ends its remote MCP session: Brain sends the
Streamable HTTP DELETE with the call's Mcp-Session-Id, so the server can stop the tool."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.server import BrainServer, create_session, history, make_server, send_ok, wait_for_turn_end
from tests.support.gzip_bomb import BombService, Seen
from tests.tools.mcp_server import MCP_TOKEN
from tests.tools.servers import LoopbackServer

DELETE_WAIT_SECONDS = 10.0


@pytest.fixture(scope="module")
def mcp_service() -> Iterator[tuple[BombService, str]]:
    service = BombService()
    server = LoopbackServer(service, lifespan="on").start()
    yield service, server.url + "/mcp"
    server.stop()


@pytest.fixture(scope="module")
def nap_brain(tmp_path_factory: pytest.TempPathFactory, mcp_service: tuple[BombService, str]) -> Iterator[BrainServer]:
    common = {
        "description": "Sleep, then answer.",
        "input_schema": {"type": "object"},
        "url": mcp_service[1],
        "mcp_tool": "nap",
        "token_env": "TEST_MCP_KEY",
        "tenants": ["acme"],
    }
    tools = [
        {**common, "name": "nap_short", "timeout_seconds": 1},
        {**common, "name": "nap_long", "timeout_seconds": 60},
        {**common, "name": "nap_hung_delete", "timeout_seconds": 60, "url": mcp_service[1] + "?hang_delete=1"},
        {**common, "name": "big", "mcp_tool": "big", "max_output_bytes": 64 * 1024},
    ]
    server = make_server(tmp_path_factory.mktemp("brain"), tools=tools)
    server.env["TEST_MCP_KEY"] = MCP_TOKEN
    server.start()
    # the first MCP call loads the SDK, which may take longer than nap_short's deadline
    warm = create_session(server, tools=["nap_long"])
    message = send_ok(server, warm["id"], f"tool:nap_long {json.dumps({'seconds': 0})}")
    wait_for_turn_end(server, warm["id"], message["id"])
    yield server
    server.stop(signal.SIGKILL)


def _call_session(service: BombService, start: int) -> str:
    """The Mcp-Session-Id the one tools/call received since `start` was sent on."""
    (call,) = [seen for seen in service.received[start:] if seen.rpc_method == "tools/call"]
    assert call.mcp_session is not None
    return call.mcp_session


def _deletes(service: BombService, start: int) -> list[Seen]:
    """The DELETEs received since `start`, once the first has arrived (or none in time)."""
    deadline = time.monotonic() + DELETE_WAIT_SECONDS
    while time.monotonic() < deadline:
        if any(seen.method == "DELETE" for seen in service.received[start:]):
            time.sleep(0.1)  # so that a second DELETE, sent right after the first, is seen too
            break
        time.sleep(0.02)
    return [seen for seen in service.received[start:] if seen.method == "DELETE"]


def test_a_timed_out_mcp_call_ends_its_remote_session(
    nap_brain: BrainServer, mcp_service: tuple[BombService, str]
) -> None:
    # given
    service, _ = mcp_service
    session = create_session(nap_brain, tools=["nap_short"])
    start = len(service.received)

    # when
    message = send_ok(nap_brain, session["id"], f"tool:nap_short {json.dumps({'seconds': 30})}")
    events = wait_for_turn_end(nap_brain, session["id"], message["id"])

    # then
    (result,) = [
        event["data"] for event in events if event["type"] == "tool.result" and event["input_id"] == message["id"]
    ]
    remote = _call_session(service, start)
    assert [(seen.path, seen.mcp_session) for seen in _deletes(service, start)] == [("/mcp", remote)]
    assert result["outcome"] == "timeout", result


@pytest.mark.parametrize(
    "tool", [pytest.param("nap_long", id="answering_case"), pytest.param("nap_hung_delete", id="hung_delete_case")]
)
def test_an_interrupted_mcp_call_ends_its_remote_session(
    nap_brain: BrainServer, mcp_service: tuple[BombService, str], tool: str
) -> None:
    # given: a call that is running at the MCP server (which may never answer the DELETE)
    service, _ = mcp_service
    session = create_session(nap_brain, tools=[tool])
    start = len(service.received)
    message = send_ok(nap_brain, session["id"], f"tool:{tool} {json.dumps({'seconds': 30})}")
    deadline = time.monotonic() + DELETE_WAIT_SECONDS
    while not any(seen.rpc_method == "tools/call" for seen in service.received[start:]):
        assert time.monotonic() < deadline, "the call never reached the MCP server"
        time.sleep(0.02)

    # when
    with nap_brain.client() as client:
        assert client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"}).status_code == 202
    wait_for_turn_end(nap_brain, session["id"], message["id"])

    # then
    results = [e["data"] for e in history(nap_brain, session["id"]) if e["type"] == "tool.result"]
    remote = _call_session(service, start)
    assert [(seen.path, seen.mcp_session) for seen in _deletes(service, start)] == [("/mcp", remote)]
    assert [result["outcome"] for result in results] == ["cancelled"], results


def test_an_mcp_call_cut_off_at_its_output_limit_ends_its_remote_session(
    nap_brain: BrainServer, mcp_service: tuple[BombService, str]
) -> None:
    # given
    service, _ = mcp_service
    session = create_session(nap_brain, tools=["big"])
    start = len(service.received)

    # when
    message = send_ok(nap_brain, session["id"], f"tool:big {json.dumps({'n': 1 << 20})}")
    events = wait_for_turn_end(nap_brain, session["id"], message["id"])

    # then
    (result,) = [
        event["data"] for event in events if event["type"] == "tool.result" and event["input_id"] == message["id"]
    ]
    remote = _call_session(service, start)
    assert [(seen.path, seen.mcp_session) for seen in _deletes(service, start)] == [("/mcp", remote)]
    assert result["outcome"] == "unknown"
    assert "tool output exceeds max_output_bytes (65536)" in result["result"]["content"][0]["text"]
