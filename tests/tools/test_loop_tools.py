"""The `loop` harness calling each kind of tool in a real session: HTTP JSON, SSE and MCP,
three calls in parallel from one model reply, with the scripted provider as the model."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, wait_for_turn_end
from tests.tools.mcp_server import MCP_TOKEN

SSE_CHUNKS = [
    'event: progress\ndata: {"step": 1}\n\n',
    ": a comment line\n\n",
    'event: result\ndata: {"content": [{"type": "text", "text": "streamed done"}]}\n\n',
]


def test_the_loop_harness_calls_http_sse_and_mcp_tools_in_one_turn(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str, mcp_url: str
) -> None:
    # given
    open_schema = {"type": "object"}
    tools = [
        {"name": "zoo_echo", "description": "Echo.", "input_schema": open_schema, "url": zoo_url + "/echo"},
        {"name": "zoo_sse", "description": "Stream.", "input_schema": open_schema, "url": zoo_url + "/sse"},
        {
            "name": "docs_work",
            "description": "Work in steps.",
            "input_schema": {"type": "object", "properties": {"steps": {"type": "integer"}}},
            "url": mcp_url,
            "mcp_tool": "work",
            "token_env": "TEST_MCP_KEY",
        },
    ]
    server = brain_factory(
        start=False,
        harnesses={"loop": LOOP_HARNESS},
        providers=scripted_provider.providers(),
        tools=[{**tool, "tenants": ["acme"]} for tool in tools],
    )
    server.env["TEST_MCP_KEY"] = MCP_TOKEN
    server.start()
    config = {"model": "openai/gpt-4.1-mini", "tools": ["zoo_echo", "zoo_sse", "docs_work"]}
    with server.client() as client:
        session = client.post("/sessions", json={"harness": "loop", "config": config}).json()
        text = "\n".join(
            [
                'call zoo_echo {"text": "hello over http"}',
                f"call zoo_sse {json.dumps({'chunks': SSE_CHUNKS})}",
                'call docs_work {"steps": 2}',
            ]
        )
        # when
        sent = client.post(f"/sessions/{session['id']}/events", json={"type": "user.message", "text": text}).json()
    wait_for_turn_end(server, session["id"], sent["id"])
    events = [e for e in history(server, session["id"]) if e.get("input_id") == sent["id"]]
    # then
    calls = {e["data"]["id"]: e["data"]["name"] for e in events if e["type"] == "tool.call"}
    results = {calls[e["data"]["call_id"]]: e["data"]["result"] for e in events if e["type"] == "tool.result"}
    assert sorted(calls.values()) == ["docs_work", "zoo_echo", "zoo_sse"]
    assert results["zoo_echo"] == {"content": [{"type": "text", "text": "hello over http"}]}
    assert results["zoo_sse"] == {"content": [{"type": "text", "text": "streamed done"}]}
    assert not results["docs_work"].get("is_error"), results["docs_work"]
    final = [e for e in events if e["type"] == "assistant.message"][-1]["data"]["text"]
    assert "hello over http" in final and "streamed done" in final
    assert events[-1]["type"] == "session.status" and events[-1]["data"]["status"] == "idle"
