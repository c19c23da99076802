"""Tools in real sessions: a runbrain process, the harness calling each kind of tool, the example
tool service with operator approvals, an MCP server and loopback HTTP/SSE services."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from examples.tools.app import ToolService, tool_bindings
from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    send_ok,
    wait_for_status,
    wait_for_turn_end,
)
from tests.tools.mcp_server import MCP_TOKEN
from tests.tools.servers import LoopbackServer, ToolZoo

TOOLS_KEY = "example-tools-key-0123456789abcdef"
APPROVAL_KEY = "example-approval-key-0123456789abcdef"


@pytest.fixture(scope="module")
def example_tools() -> Iterator[tuple[ToolService, str]]:
    service = ToolService(tools_key=TOOLS_KEY, approval_key=APPROVAL_KEY, progress_seconds=0.2)
    server = LoopbackServer(service).start()
    yield service, server.url
    server.stop()


@pytest.fixture
def tool_brain(
    brain_factory: Callable[..., BrainServer],
    example_tools: tuple[ToolService, str],
    mcp_url: str,
    zoo_url: str,
    zoo: ToolZoo,
) -> BrainServer:
    open_schema = {"type": "object"}
    bindings = [
        *tool_bindings(example_tools[1], tenant="acme", token_env="TEST_TOOLS_KEY"),
        {
            "name": "docs_work",
            "description": "Work in steps on the MCP server.",
            "input_schema": {"type": "object", "properties": {"steps": {"type": "integer"}}},
            "url": mcp_url,
            "mcp_tool": "work",
            "token_env": "TEST_MCP_KEY",
            "tenants": ["acme"],
        },
        {
            "name": "peek",
            "description": "Inspect probe.",
            "input_schema": open_schema,
            "url": zoo_url + "/inspect",
            "tenants": ["acme"],
            "inspect_session": True,
        },
        {
            "name": "whoami",
            "description": "Identity probe.",
            "input_schema": open_schema,
            "url": zoo_url + "/identity",
            "tenants": ["acme"],
            "inspect_session": True,
        },
        {
            "name": "globex_only",
            "description": "Another tenant's tool.",
            "input_schema": open_schema,
            "url": zoo_url + "/echo",
            "tenants": ["globex"],
        },
    ]
    server = brain_factory(start=False, tools=bindings)
    server.config["public_url"] = server.url
    server.env["TEST_TOOLS_KEY"] = TOOLS_KEY
    server.env["TEST_MCP_KEY"] = MCP_TOKEN
    server.start()
    return server


def tool_turn(server: BrainServer, session_id: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    message = send_ok(server, session_id, f"tool:{name} {json.dumps(arguments)}")
    events = wait_for_turn_end(server, session_id, message["id"])
    return [event for event in events if event.get("input_id") == message["id"]]


def only(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    (event,) = [event for event in events if event["type"] == type_]
    return event


def test_the_catalog_lists_the_tenants_tools_without_urls_or_credentials(tool_brain: BrainServer) -> None:
    # when
    with tool_brain.client("alice") as alice, tool_brain.client("charlie") as charlie:
        acme = alice.get("/catalog").json()["tools"]
        globex = charlie.get("/catalog").json()["tools"]

    # then
    assert [tool["name"] for tool in acme] == ["ask_approval", "docs_work", "echo", "inspect_session", "peek", "whoami"]
    assert [tool["name"] for tool in globex] == ["globex_only"]
    for tool in acme + globex:
        assert set(tool) <= {"name", "description", "input_schema", "output_schema"}


def test_a_session_cannot_enable_another_tenants_tool(tool_brain: BrainServer) -> None:
    # when
    with tool_brain.client("alice") as client:
        response = client.post(
            "/sessions",
            json={"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": ["globex_only"]}},
        )

    # then
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_the_harness_calls_an_http_tool_and_the_events_record_it(tool_brain: BrainServer) -> None:
    # given
    session = create_session(tool_brain, tools=["echo"])

    # when
    events = tool_turn(tool_brain, session["id"], "echo", {"text": "hello tools"})

    # then
    call, result = only(events, "tool.call"), only(events, "tool.result")
    assert call["data"]["name"] == "echo" and call["data"]["arguments"] == {"text": "hello tools"}
    assert len(call["data"]["id"]) == 32
    assert result["data"] == {
        "call_id": call["data"]["id"],
        "result": {"content": [{"type": "text", "text": "hello tools"}]},
        "outcome": "ok",
    }
    types = [event["type"] for event in events]
    assert types.index("tool.call") < types.index("tool.result") < types.index("assistant.message")
    assert only(events, "assistant.message")["data"]["text"].startswith("tool said: ")


def test_a_tool_the_session_did_not_enable_is_an_error_result(tool_brain: BrainServer, zoo: ToolZoo) -> None:
    # given: the tenant may use echo, but this session did not enable it
    session = create_session(tool_brain, tools=[])

    # when
    events = tool_turn(tool_brain, session["id"], "echo", {"text": "x"})

    # then
    result = only(events, "tool.result")["data"]["result"]
    assert result["is_error"] is True and "unknown_outcome" not in result


def test_an_mcp_tool_streams_progress_live_but_not_into_history(tool_brain: BrainServer) -> None:
    # given
    session = create_session(tool_brain, tools=["docs_work"])
    stream = open_stream(tool_brain, session["id"])

    # when
    events = tool_turn(tool_brain, session["id"], "docs_work", {"steps": 2})
    live = stream.wait_for_event("tool.result")
    stream.close()

    # then
    call = only(events, "tool.call")
    progress = [event for event in live if event["type"] == "tool.progress"]
    assert [event["data"] for event in progress] == [
        {"call_id": call["data"]["id"], "data": {"progress": step, "total": 2, "message": f"step {step}"}}
        for step in (1, 2)
    ]
    assert all("cursor" not in event or not event["cursor"] for event in progress)
    assert "tool.progress" not in [event["type"] for event in history(tool_brain, session["id"])]
    assert only(events, "tool.result")["data"]["result"]["content"][0]["text"] == "done after 2 steps"


def test_inspect_session_reads_the_running_session(tool_brain: BrainServer) -> None:
    # given
    session = create_session(tool_brain, tools=["inspect_session"])

    # when
    events = tool_turn(tool_brain, session["id"], "inspect_session", {"limit": 3})

    # then
    result = only(events, "tool.result")["data"]["result"]
    assert "is_error" not in result, result
    assert result["structured_content"]["status"] == "running"
    assert [event["type"] for event in result["structured_content"]["events"]] == [
        "user.message",
        "session.status",
        "tool.call",
    ]


def test_the_inspection_token_is_read_only_limited_to_the_session_and_revoked_after_the_call(
    tool_brain: BrainServer, zoo: ToolZoo
) -> None:
    # given
    other = create_session(tool_brain)
    session = create_session(tool_brain, tools=["peek", "whoami"])

    # when
    during = only(tool_turn(tool_brain, session["id"], "peek", {"other": other["id"]}), "tool.result")
    tool_turn(tool_brain, session["id"], "whoami", {})
    (probe,) = zoo.calls("/identity")
    token = probe.body["inspection_token"]
    after = httpx.get(f"{tool_brain.url}/sessions/{session['id']}", headers={"Authorization": f"Bearer {token}"})

    # then
    assert during["data"]["result"]["structured_content"] == {
        "own": 200,
        "status": "running",
        "events": 200,
        "other": 403,
        "listed": [session["id"]],
        "write": 403,
    }
    assert probe.body["brain_url"] == tool_brain.url
    assert after.status_code == 401


def _pending(url: str, timeout: float = 10) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        approvals = httpx.get(f"{url}/approvals", headers={"Authorization": f"Bearer {APPROVAL_KEY}"}).json()
        if approvals["approvals"]:
            return approvals["approvals"]  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("no approval became pending")


@pytest.mark.parametrize(
    ("approved", "expected"), [(True, "Operator approved: Deploy?"), (False, "Operator denied: Deploy?")]
)
def test_ask_approval_streams_progress_until_the_operator_answers(
    tool_brain: BrainServer, example_tools: tuple[ToolService, str], approved: bool, expected: str
) -> None:
    # given
    session = create_session(tool_brain, tools=["ask_approval"])
    stream = open_stream(tool_brain, session["id"])
    message = send_ok(tool_brain, session["id"], 'tool:ask_approval {"question": "Deploy?"}')

    # when
    (pending,) = _pending(example_tools[1])
    stream.wait_for_event("tool.progress")
    answer = httpx.post(
        f"{example_tools[1]}/approvals/{pending['call_id']}",
        headers={"Authorization": f"Bearer {APPROVAL_KEY}"},
        json={"approved": approved},
    )
    events = wait_for_turn_end(tool_brain, session["id"], message["id"])
    stream.close()

    # then
    call = only(events, "tool.call")
    assert answer.status_code == 200
    assert pending["call_id"] == call["data"]["id"] and pending["session_id"] == session["id"]
    assert pending["tenant_id"] == "acme" and pending["question"] == "Deploy?"
    result = only(events, "tool.result")["data"]["result"]
    assert result["content"] == [{"type": "text", "text": expected}]
    assert result.get("is_error", False) is (not approved) and "unknown_outcome" not in result
    progress = [event for event in stream.events() if event["type"] == "tool.progress"]
    assert progress and progress[0]["data"]["data"]["status"] == "waiting_for_operator"
    assert example_tools[0].pending == {}


def test_interrupting_the_session_cancels_the_pending_tool_call(
    tool_brain: BrainServer, example_tools: tuple[ToolService, str]
) -> None:
    # given
    session = create_session(tool_brain, tools=["ask_approval"])
    message = send_ok(tool_brain, session["id"], 'tool:ask_approval {"question": "Wait?"}')
    _pending(example_tools[1])

    # when
    with tool_brain.client() as client:
        assert client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"}).status_code == 202
    events = wait_for_turn_end(tool_brain, session["id"], message["id"])

    # then
    result = only(events, "tool.result")["data"]["result"]
    assert result["is_error"] is True and result["unknown_outcome"] is True
    deadline = time.monotonic() + 5
    while example_tools[0].pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert example_tools[0].pending == {}
    wait_for_status(tool_brain, session["id"], "interrupted")


def test_the_traceparent_of_a_send_reaches_the_tools_of_its_turn(tool_brain: BrainServer, zoo: ToolZoo) -> None:
    # given
    session = create_session(tool_brain, tools=["whoami"])
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    text = 'tool:whoami {"probe": "trace"}'
    # when
    with tool_brain.client() as client:
        sent = client.post(
            f"/sessions/{session['id']}/events",
            json={"type": "user.message", "text": text},
            headers={"traceparent": trace},
        ).json()
        wait_for_turn_end(tool_brain, session["id"], sent["id"])
    probe = [call for call in zoo.calls("/identity") if call.body["arguments"] == {"probe": "trace"}]
    # then
    assert len(probe) == 1
    assert probe[0].headers["traceparent"] == trace
