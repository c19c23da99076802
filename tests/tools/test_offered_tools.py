"""What the model is offered: exactly the session's tools (config tools, then bound tools in
binding order), on every wire format the scripted provider speaks, through the published
client and the `loop` harness; after a restart, a rebind, a resume and a restore too. The
scripted provider records each request's tool names and, like a real model, never calls a tool
it was not offered."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brain import Brain, RuntimeTool

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

PROBE = "tests.support.providers.ProbeProvider"
ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
PROBE_BINDING = {"alias": "probe", "provider": "probe", "operations": ["echo"], "parameters": {"label": "p"}}
MIXED_TOOLS = ["zoo_echo", "probe_echo", "runtime_lookup"]
MIXED_PROMPT = "\n".join(
    [
        'call zoo_echo {"text": "over http"}',
        'call probe_echo {"text": "through a provider"}',
        'call runtime_lookup {"q": "in the client"}',
    ]
)

# (model, provider settings beyond base_url, base URL path below the scripted provider's root)
WIRE_FORMATS = [
    pytest.param("openai/gpt-4.1-mini", {}, "/v1", id="openai_responses_case"),
    pytest.param("openai/gpt-4.1-mini", {"api": "openai-completions"}, "/v1", id="openai_completions_case"),
    pytest.param("anthropic/claude-sonnet-4-5", {}, "", id="anthropic_messages_case"),
    pytest.param("amazon-bedrock/amazon.nova-pro-v1:0", {}, "", id="bedrock_converse_case"),
    pytest.param("google/gemini-2.5-flash", {}, "", id="google_generative_ai_case"),
    pytest.param("google-vertex/gemini-3-flash-preview", {}, "", id="google_vertex_case"),
]


def _lookup(arguments: Any, context: Any) -> dict[str, Any]:
    return {"found": arguments["q"]}


LOOKUP = RuntimeTool(
    "lookup",
    "Read application data",
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False},
    _lookup,
)


def _server(
    factory: Callable[..., BrainServer],
    provider: ScriptedProvider,
    zoo_url: str,
    tmp_path: Path,
    *,
    model: str = "openai/gpt-4.1-mini",
    settings: dict[str, Any] | None = None,
    path: str = "/v1",
    **overrides: Any,
) -> BrainServer:
    name = model.split("/", 1)[0]
    server = factory(
        start=False,
        harnesses={"loop": LOOP_HARNESS},
        providers={name: {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.root + path, **(settings or {})}},
        tools=[
            {
                "name": "zoo_echo",
                "description": "Echo text.",
                "input_schema": ECHO_SCHEMA,
                "url": zoo_url + "/echo",
                "tenants": ["acme"],
            },
            {
                "name": "zoo_hidden",
                "description": "A configured tool this session does not enable.",
                "input_schema": ECHO_SCHEMA,
                "url": zoo_url + "/echo",
                "tenants": ["acme"],
            },
        ],
        **overrides,
    )
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps({"probe": {"class": PROBE, "options": {"marks": str(marks)}}})
    server.start()
    provider.reset()  # no demo rules: the built-in `call NAME {json}` directive only
    return server


def _create(client: Brain, model: str, *, tools: list[str], bindings: list[Any], runtime: list[RuntimeTool]) -> Any:
    config: Any = {"model": model, "tools": tools, "bindings": bindings}
    return client.create({"harness": "loop", "config": config}, runtime_tools=runtime)


def _turn(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    accepted = send_ok(server, session_id, text)
    wait_for_turn_end(server, session_id, accepted["id"], timeout=60)
    return [event for event in history(server, session_id) if event.get("input_id") == accepted["id"]]


def _results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    names = {e["data"]["id"]: e["data"]["name"] for e in events if e["type"] == "tool.call"}
    return {names[e["data"]["call_id"]]: e["data"] for e in events if e["type"] == "tool.result"}


def _offered(provider: ScriptedProvider) -> list[list[str]]:
    return [request["tools"] for request in provider.requests()]


@pytest.mark.parametrize(("model", "settings", "path"), WIRE_FORMATS)
def test_the_model_is_offered_config_tools_then_provider_and_runtime_bindings(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_url: str,
    tmp_path: Path,
    model: str,
    settings: dict[str, Any],
    path: str,
) -> None:
    # given: a session with a config tool, a provider binding and a runtime tool
    server = _server(brain_factory, scripted_provider, zoo_url, tmp_path, model=model, settings=settings, path=path)
    client = server.sdk()
    try:
        session = _create(client, model, tools=["zoo_echo"], bindings=[PROBE_BINDING], runtime=[LOOKUP])
        assert [d["name"] for d in session["descriptors"]] == MIXED_TOOLS

        # when: the model calls all three
        events = _turn(server, session["id"], MIXED_PROMPT)
    finally:
        client.dispose()

    # then: every request of the turn offered exactly the session's tools, in order
    assert _offered(scripted_provider) == [MIXED_TOOLS, MIXED_TOOLS]
    results = _results(events)
    assert sorted(results) == sorted(MIXED_TOOLS)
    assert {name: result["outcome"] for name, result in results.items()} == dict.fromkeys(MIXED_TOOLS, "ok")
    assert results["zoo_echo"]["result"] == {"content": [{"type": "text", "text": "over http"}]}
    assert results["probe_echo"]["result"]["structured_content"]["arguments"] == {"text": "through a provider"}
    assert results["runtime_lookup"]["result"]["structured_content"] == {"found": "in the client"}


def test_a_session_with_only_runtime_tools_offers_them_and_nothing_configured(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str, tmp_path: Path
) -> None:
    # given
    server = _server(brain_factory, scripted_provider, zoo_url, tmp_path)
    client = server.sdk()
    try:
        session = _create(client, "openai/gpt-4.1-mini", tools=[], bindings=[], runtime=[LOOKUP])
        # when
        events = _turn(server, session["id"], 'call runtime_lookup {"q": "orders"}')
    finally:
        client.dispose()
    # then
    assert _offered(scripted_provider) == [["runtime_lookup"], ["runtime_lookup"]]
    assert _results(events)["runtime_lookup"]["result"]["structured_content"] == {"found": "orders"}


def test_a_provider_binding_alone_is_offered(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str, tmp_path: Path
) -> None:
    model = "anthropic/claude-sonnet-4-5"
    server = _server(brain_factory, scripted_provider, zoo_url, tmp_path, model=model, path="")
    client = server.sdk()
    session = _create(client, model, tools=[], bindings=[PROBE_BINDING], runtime=[])
    events = _turn(server, session["id"], 'call probe_echo {"text": "hi"}')
    assert _offered(scripted_provider) == [["probe_echo"], ["probe_echo"]]
    assert _results(events)["probe_echo"]["outcome"] == "ok"


def test_the_model_never_calls_a_tool_it_was_not_offered(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str, tmp_path: Path
) -> None:
    # given: a configured tool the session does not enable, and a name nobody serves
    server = _server(brain_factory, scripted_provider, zoo_url, tmp_path)
    client = server.sdk()
    session = _create(client, "openai/gpt-4.1-mini", tools=["zoo_echo"], bindings=[], runtime=[])
    # when
    events = _turn(server, session["id"], 'call zoo_hidden {"text": "x"}\ncall nowhere {}')
    # then: a plain answer, no call
    assert [e["type"] for e in events if e["type"].startswith("tool.")] == []
    (answer,) = [e["data"]["text"] for e in events if e["type"] == "assistant.message"]
    assert answer == "I cannot call zoo_hidden, nowhere: it was not offered to me (offered tools: zoo_echo)."
    assert _offered(scripted_provider) == [["zoo_echo"]]
    assert events[-1]["data"]["status"] == "idle"


def test_bound_tools_are_offered_again_after_a_restart_a_rebind_and_a_resume(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str, tmp_path: Path
) -> None:
    # given: a mixed session that ran one turn
    server = _server(brain_factory, scripted_provider, zoo_url, tmp_path)
    client = server.sdk()
    try:
        session = _create(client, "openai/gpt-4.1-mini", tools=["zoo_echo"], bindings=[PROBE_BINDING], runtime=[LOOKUP])
        _turn(server, session["id"], "hello")
        # when: the server restarts (a cold load), the client rebinds its runtime tools, resumes
        server.restart()
        client.rebind(session["id"], [LOOKUP])
        client.resume(session["id"])
        scripted_provider.reset()
        events = _turn(server, session["id"], MIXED_PROMPT)
    finally:
        client.dispose()
    # then
    assert _offered(scripted_provider) == [MIXED_TOOLS, MIXED_TOOLS]
    assert {name: result["outcome"] for name, result in _results(events).items()} == dict.fromkeys(MIXED_TOOLS, "ok")


def test_bound_tools_are_offered_on_the_server_a_session_is_restored_to(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str, tmp_path: Path
) -> None:
    # given: a session with a provider binding, flushed to a shared archive and stopped
    archive: dict[str, Any] = {
        "persistence": {"provider": "filesystem", "directory": str(tmp_path / "archive"), "interval_seconds": 1}
    }
    old = _server(brain_factory, scripted_provider, zoo_url, tmp_path, **archive)
    session = _create(old.sdk(), "openai/gpt-4.1-mini", tools=["zoo_echo"], bindings=[PROBE_BINDING], runtime=[])
    _turn(old, session["id"], "hello")
    checkpoint = old.sdk().flush(session["id"])["checkpoint"]
    old.stop()
    # when: another server restores it, resumes and runs a turn
    new = _server(brain_factory, scripted_provider, zoo_url, tmp_path, **archive)
    client = new.sdk()
    client.restore(session["id"], checkpoint)
    client.resume(session["id"])
    scripted_provider.reset()
    events = _turn(new, session["id"], 'call probe_echo {"text": "after the move"}')
    # then
    assert _offered(scripted_provider) == [["zoo_echo", "probe_echo"], ["zoo_echo", "probe_echo"]]
    assert _results(events)["probe_echo"]["outcome"] == "ok"
