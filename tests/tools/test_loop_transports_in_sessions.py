"""Every implemented `loop` transport in a real session: a streamed turn whose model calls an
HTTP tool through Brain, against the scripted provider speaking that provider's wire format."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, wait_for_turn_end

# (model, provider settings beyond base_url, base URL path below the scripted provider's root)
TRANSPORTS = [
    pytest.param("openai/gpt-4.1-mini", {}, "/v1", id="openai_responses_case"),
    pytest.param("openai/gpt-4.1-mini", {"api": "openai-completions"}, "/v1", id="openai_completions_case"),
    pytest.param("azure/gpt-4.1-mini", {}, "/v1", id="azure_openai_responses_case"),
    pytest.param("anthropic/claude-sonnet-4-5", {}, "", id="anthropic_messages_case"),
    pytest.param("amazon-bedrock/amazon.nova-pro-v1:0", {}, "", id="bedrock_converse_case"),
    pytest.param("google/gemini-2.5-flash", {}, "", id="google_generative_ai_case"),
    pytest.param("google-vertex/gemini-3-flash-preview", {}, "", id="google_vertex_case"),
]


@pytest.mark.parametrize(("model", "settings", "path"), TRANSPORTS)
def test_each_loop_transport_runs_a_tool_calling_turn_through_brain(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_url: str,
    model: str,
    settings: dict[str, Any],
    path: str,
) -> None:
    # given
    provider = model.split("/", 1)[0]
    echo = {"name": "zoo_echo", "description": "Echo text.", "input_schema": {"type": "object"}}
    server = brain_factory(
        harnesses={"loop": LOOP_HARNESS},
        providers={provider: {"api_key_env": "TEST_OPENAI_KEY", "base_url": scripted_provider.root + path, **settings}},
        tools=[{**echo, "url": zoo_url + "/echo", "tenants": ["acme"]}],
    )
    with server.client() as client:
        body = {"harness": "loop", "config": {"model": model, "tools": ["zoo_echo"]}}
        session = client.post("/sessions", json=body).json()
        # when
        text = 'call zoo_echo {"text": "hello from the model"}'
        sent = client.post(f"/sessions/{session['id']}/events", json={"type": "user.message", "text": text}).json()
    wait_for_turn_end(server, session["id"], sent["id"])
    events = [e for e in history(server, session["id"]) if e.get("input_id") == sent["id"]]
    # then
    assert [e["type"] for e in events if e["type"].startswith("tool.")] == ["tool.call", "tool.result"]
    result = next(e for e in events if e["type"] == "tool.result")["data"]["result"]
    assert result == {"content": [{"type": "text", "text": "hello from the model"}]}
    final = [e for e in events if e["type"] == "assistant.message"][-1]["data"]
    assert "hello from the model" in final["text"] and final["usage"]["input"] > 0
    assert events[-1]["type"] == "session.status" and events[-1]["data"]["status"] == "idle"
