"""Each implemented transport end to end: streamed text, parallel tool calls, results back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    CODEX_TEST_KEY,
    ECHO_TOOL,
    RunnerProcess,
    ScriptedProviderServer,
    echo_tool_handler,
    restore_checkpoint,
)


class _AnyKey(str):
    """Equal to any non-empty string: a per-session key the test cannot know in advance."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


ANY_KEY = _AnyKey("any")

ADD_TOOL = {
    "name": "add",
    "description": "Add two numbers",
    "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}

# (label, model, base URL attribute, api override, wire the provider must see)
TRANSPORT_CASES = [
    ("openai_responses_case", "openai/gpt-4.1-mini", "openai_base_url", None, "openai-responses"),
    ("openai_completions_case", "deepseek/deepseek-flash", "openai_base_url", None, "openai-completions"),
    ("anthropic_messages_case", "anthropic/claude-sonnet-4-5", "anthropic_base_url", None, "anthropic-messages"),
    ("azure_openai_responses_case", "azure/gpt-4.1-mini", "openai_base_url", None, "openai-responses"),
    ("api_override_case", "openai/gpt-4.1-mini", "openai_base_url", "openai-completions", "openai-completions"),
    (
        "bedrock_converse_case",
        "amazon-bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "bedrock_base_url",
        None,
        "bedrock-converse-stream",
    ),
    (
        "bedrock_non_claude_case",
        "amazon-bedrock/amazon.nova-pro-v1:0",
        "bedrock_base_url",
        None,
        "bedrock-converse-stream",
    ),
    ("mistral_case", "mistral/mistral-large-latest", "mistral_base_url", None, "mistral-conversations"),
    ("pi_messages_case", "radius/claude-sonnet-4-5", "radius_base_url", None, "pi-messages"),
    ("openai_codex_case", "openai-codex/gpt-5.5", "codex_base_url", None, "openai-codex-responses"),
]


def _tool_results_in(wire: str, body: dict[str, Any]) -> list[str]:
    if wire in ("openai-completions", "mistral-conversations"):
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if wire == "pi-messages":
        return [m["content"][0]["text"] for m in body["context"]["messages"] if m["role"] == "toolResult"]
    if wire in ("openai-responses", "openai-codex-responses"):
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    if wire in ("google-generative-ai", "google-vertex"):
        return [
            part["functionResponse"]["response"]["output"]
            for content in body["contents"]
            for part in content["parts"]
            if "functionResponse" in part
        ]
    if wire == "bedrock-converse-stream":
        return [
            block["toolResult"]["content"][0]["text"]
            for message in body["messages"]
            for block in message["content"]
            if "toolResult" in block
        ]
    return [
        block["content"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


@pytest.mark.parametrize(
    ("label", "model", "base", "api", "wire"), TRANSPORT_CASES, ids=[c[0] for c in TRANSPORT_CASES]
)
def test_it_runs_a_turn_with_parallel_tool_calls_on_each_transport(
    label: str,
    model: str,
    base: str,
    api: str | None,
    wire: str,
    runner: RunnerProcess,
    provider: ScriptedProviderServer,
    tmp_path: Path,
) -> None:
    # given
    runner.open(
        "a1", tmp_path / "native", model=model, base_url=getattr(provider, base), tools=[ECHO_TOOL, ADD_TOOL], api=api
    )
    calls: list[dict[str, Any]] = []

    def answer_after_both_calls(frame: dict[str, Any]) -> dict[str, Any] | None:
        calls.append(frame)
        if len(calls) < 2:
            return None  # hold the first call: the second must arrive before any result
        for held in calls[:1]:
            runner.send({"attachment": "a1", "turn": "t1", "id": held["id"], "result": echo_tool_handler(held)})
        return echo_tool_handler(frame)

    # when
    reply, seen = runner.prompt(
        "a1", 'call echo {"text": "hi"}\ncall add {"a": 2, "b": 3}', turn="t1", tool_handler=answer_after_both_calls
    )

    # then
    assert reply == {"attachment": "a1", "turn": "t1", "id": reply["id"], "result": {}}
    assert [f["params"]["name"] for f in seen if f.get("method") == "tool.call"] == ["echo", "add"]
    assert [f["params"]["arguments"] for f in calls] == [{"text": "hi"}, {"a": 2, "b": 3}]
    messages = [f["data"] for f in seen if f.get("event") == "assistant.message"]
    assert [m["stop_reason"] for m in messages] == ["tool_use", "stop"]
    assert messages[0]["text"] == "Calling echo, add."
    assert messages[1]["text"] == 'Tool echo returned: {"text": "hi"} Tool add returned: {"a": 2, "b": 3}'
    assert all(m["usage"]["input"] > 0 and m["usage"]["output"] > 0 for m in messages)
    deltas = [f["data"]["text"] for f in seen if f.get("event") == "assistant.delta"]
    assert "".join(deltas) == messages[0]["text"] + messages[1]["text"]
    requests = provider.requests()
    assert [r["wire"] for r in requests] == [wire, wire]
    assert _tool_results_in(wire, requests[1]["body"]) == ['{"text": "hi"}', '{"a": 2, "b": 3}']
    assert requests[0]["body"].get("stream", True) is True  # Bedrock streams by route, not by flag
    expected_key_header = (
        "api-key"
        if model.startswith("azure/")
        else "x-api-key"
        if wire == "anthropic-messages"
        else "x-goog-api-key"
        if wire.startswith("google")
        else "authorization"
    )
    assert requests[0]["headers"][expected_key_header] in ("test-key", "Bearer test-key", f"Bearer {CODEX_TEST_KEY}")


def test_it_sends_the_default_instructions_and_tools_with_a_stable_prefix(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open(
        "a1", tmp_path / "native", model="openai/gpt-4.1-mini", base_url=provider.openai_base_url, tools=[ECHO_TOOL]
    )

    # when
    runner.prompt("a1", "first", turn="t1")
    runner.prompt("a1", "second", turn="t2")

    # then
    first, second = provider.bodies()
    assert first["instructions"] == "You are a helpful assistant. Use the available tools when needed."
    assert first["store"] is False and "previous_response_id" not in first
    assert (
        first["tools"]
        == second["tools"]
        == [
            {
                "type": "function",
                "name": "echo",
                "description": ECHO_TOOL["description"],
                "parameters": ECHO_TOOL["input_schema"],
                "strict": False,
            }
        ]
    )
    assert second["input"][: len(first["input"])] == first["input"]  # the old request is a prefix
    assert first["prompt_cache_key"] == second["prompt_cache_key"]
    assert [i.get("content") for i in second["input"]] == [
        [{"type": "input_text", "text": "first"}],
        "You said: first",
        [{"type": "input_text", "text": "second"}],
    ]


def test_it_uses_the_configured_instructions_and_the_key_from_open(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open(
        "a1",
        tmp_path / "native",
        model="anthropic/claude-sonnet-4-5",
        base_url=provider.anthropic_base_url,
        instructions="Be terse.",
    )

    # when
    runner.prompt("a1", "hi", turn="t1")

    # then
    (request,) = provider.requests()
    assert request["headers"]["x-api-key"] == "test-key"
    assert request["body"]["system"] == [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}]
    assert request["body"]["model"] == "claude-sonnet-4-5"


@pytest.mark.parametrize(
    ("label", "model", "base", "effort", "expected"),
    [
        ("responses_case", "openai/gpt-5", "openai_base_url", "low", ("reasoning", {"effort": "low"})),
        ("completions_case", "deepseek/deepseek-v4-pro", "openai_base_url", "high", ("reasoning_effort", "high")),
        (
            "anthropic_case",
            "anthropic/claude-sonnet-4-5",
            "anthropic_base_url",
            "medium",
            ("thinking", {"type": "enabled", "budget_tokens": 8192}),
        ),
        (
            "bedrock_gpt_oss_case",
            "amazon-bedrock/openai.gpt-oss-120b-1:0",
            "bedrock_base_url",
            "high",
            ("additionalModelRequestFields", {"reasoning_effort": "high"}),
        ),
        (
            "gemini_case",
            "google/gemini-2.5-flash",
            "google_base_url",
            "low",
            ("generationConfig", {"thinkingConfig": {"thinking_budget": 2048}}),
        ),
        ("mistral_case", "mistral/magistral-medium-latest", "mistral_base_url", "high", ("prompt_mode", "reasoning")),
        (
            "pi_messages_case",
            "radius/claude-opus-5",
            "radius_base_url",
            "max",
            ("options", {"reasoning": "xhigh", "sessionId": ANY_KEY}),
        ),
        (
            "openai_codex_case",
            "openai-codex/gpt-5.5",
            "codex_base_url",
            "low",
            ("reasoning", {"effort": "low", "summary": "auto"}),
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith("_case") else "",
)
def test_it_passes_a_supported_reasoning_effort_to_the_provider(
    label: str,
    model: str,
    base: str,
    effort: str,
    expected: tuple[str, Any],
    runner: RunnerProcess,
    provider: ScriptedProviderServer,
    tmp_path: Path,
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base), reasoning_effort=effort)

    # when
    reply, _seen = runner.prompt("a1", "think", turn="t1")

    # then
    assert reply["result"] == {}
    (body,) = provider.bodies()
    key, value = expected
    assert body[key] == value


def test_tool_results_with_structured_content_and_unknown_outcome_reach_the_model(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open(
        "a1", tmp_path / "native", model="deepseek/deepseek-flash", base_url=provider.openai_base_url, tools=[ECHO_TOOL]
    )

    def structured(_frame: dict[str, Any]) -> dict[str, Any]:
        return {"content": [], "structured_content": {"n": 1}, "is_error": True, "unknown_outcome": True}

    # when
    reply, _seen = runner.prompt("a1", "call echo {}", turn="t1", tool_handler=structured)

    # then
    assert reply["result"] == {}
    tool_message = [m for m in provider.bodies()[1]["messages"] if m["role"] == "tool"]
    assert [json.loads(json.dumps(m["content"])) for m in tool_message] == [
        'Error: {"n":1}\n(The tool call may or may not have taken effect.)'
    ]


@pytest.mark.parametrize(
    ("label", "model", "base", "effort", "replayed"),
    [
        ("responses_case", "openai/gpt-5", "openai_base_url", "low", "reasoning"),
        ("anthropic_case", "anthropic/claude-sonnet-4-5", "anthropic_base_url", "high", "thinking"),
        (
            "bedrock_case",
            "amazon-bedrock/global.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "bedrock_base_url",
            "low",
            "reasoningContent",
        ),
        ("gemini_case", "google/gemini-2.5-pro", "google_base_url", "medium", "thoughtSignature"),
        ("vertex_case", "google-vertex/gemini-3-flash-preview", "google_base_url", "high", "thoughtSignature"),
    ],
    ids=["responses_case", "anthropic_case", "bedrock_case", "gemini_case", "vertex_case"],
)
def test_reasoning_items_are_replayed_verbatim_and_survive_a_restore(
    label: str,
    model: str,
    base: str,
    effort: str,
    replayed: str,
    spawn_runner: Callable[..., RunnerProcess],
    provider: ScriptedProviderServer,
    tmp_path: Path,
) -> None:
    # given a reasoning turn with a tool call
    runner = spawn_runner()
    runner.open(
        "a1",
        tmp_path / "native",
        model=model,
        base_url=getattr(provider, base),
        tools=[ECHO_TOOL],
        reasoning_effort=effort,
    )
    reply, _seen = runner.prompt("a1", 'call echo {"text": "r"}', turn="t1", tool_handler=echo_tool_handler)
    files = runner.checkpoint("a1")

    # then the follow-up request carried the reasoning block before the tool call
    assert reply["result"] == {}
    follow_up = provider.bodies()[1]
    if replayed == "thinking":
        assistant = follow_up["messages"][1]["content"]
        assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use"]
        assert assistant[0]["signature"].startswith("sig:")
    elif replayed == "thoughtSignature":
        model_turn = follow_up["contents"][1]["parts"]
        assert [next(iter(p)) for p in model_turn] == ["text", "functionCall"]
        assert model_turn[1]["thoughtSignature"]
        assert follow_up["generationConfig"]["thinkingConfig"] in (
            {"thinking_budget": 8192},
            {"thinking_level": "HIGH"},
        )
    elif replayed == "reasoningContent":
        assistant = follow_up["messages"][1]["content"]
        assert [next(iter(b)) for b in assistant] == ["reasoningContent", "text", "toolUse"]
        assert assistant[0]["reasoningContent"]["reasoningText"]["signature"].startswith("sig:")
        assert follow_up["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    else:
        kinds = [i.get("type", "message") for i in follow_up["input"]]
        assert kinds == ["message", "reasoning", "message", "function_call", "function_call_output"]
        assert follow_up["include"] == ["reasoning.encrypted_content"]

    # and a restored copy sends the same reasoning items again
    restore_checkpoint(tmp_path / "native", tmp_path / "restored", files)
    provider.reset()
    runner.prompt("a1", "more", turn="t2")
    restored = spawn_runner()
    restored.open(
        "b1",
        tmp_path / "restored",
        model=model,
        base_url=getattr(provider, base),
        tools=[ECHO_TOOL],
        reasoning_effort=effort,
    )
    restored.prompt("b1", "more", turn="t2")
    original_body, restored_body = provider.bodies()
    assert original_body == restored_body


@pytest.mark.parametrize(
    ("label", "model", "base", "effort"),
    [
        ("mistral_case", "mistral/magistral-medium-latest", "mistral_base_url", "medium"),
        ("pi_messages_case", "radius/claude-sonnet-4-5", "radius_base_url", "high"),
        ("openai_codex_case", "openai-codex/gpt-5.5", "codex_base_url", "medium"),
    ],
    ids=["mistral_case", "pi_messages_case", "openai_codex_case"],
)
def test_reasoning_of_mistral_pi_and_codex_goes_back_verbatim_and_survives_a_restore(
    label: str,
    model: str,
    base: str,
    effort: str,
    spawn_runner: Callable[..., RunnerProcess],
    provider: ScriptedProviderServer,
    tmp_path: Path,
) -> None:
    # given a reasoning turn with a tool call
    runner = spawn_runner()
    runner.open(
        "a1",
        tmp_path / "native",
        model=model,
        base_url=getattr(provider, base),
        tools=[ECHO_TOOL],
        reasoning_effort=effort,
    )
    reply, seen = runner.prompt("a1", 'call echo {"text": "r"}', turn="t1", tool_handler=echo_tool_handler)
    files = runner.checkpoint("a1")

    # then the reasoning never reached the visible text, and the follow-up carried it back
    assert reply["result"] == {}
    assert "Considering" not in "".join(f["data"]["text"] for f in seen if f.get("event") == "assistant.delta")
    follow_up = provider.bodies()[1]
    thought = 'Considering call echo {"text": "r"}'
    if label == "mistral_case":
        assistant = follow_up["messages"][2]
        assert assistant["content"] == [
            {"type": "thinking", "thinking": [{"type": "text", "text": thought}]},
            {"type": "text", "text": "Calling echo."},
        ]
        assert assistant["tool_calls"][0]["id"] == follow_up["messages"][3]["tool_call_id"]
        affinity = {request["headers"].get("x-affinity") for request in provider.requests()}
        assert len(affinity) == 1 and affinity != {None}  # one session, one cache route
    elif label == "pi_messages_case":
        assistant = follow_up["context"]["messages"][1]
        assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "toolCall"]
        assert assistant["content"][0]["thinking"] == thought
        assert assistant["content"][0]["thinkingSignature"].startswith("sig:")
    else:
        kinds = [i.get("type", "message") for i in follow_up["input"]]
        assert kinds == ["message", "reasoning", "message", "function_call", "function_call_output"]
        assert provider.requests()[1]["headers"]["session_id"] == follow_up["prompt_cache_key"]

    # and a restored copy sends the byte-identical request
    restore_checkpoint(tmp_path / "native", tmp_path / "restored", files)
    provider.reset()
    runner.prompt("a1", "more", turn="t2")
    restored = spawn_runner()
    restored.open(
        "b1",
        tmp_path / "restored",
        model=model,
        base_url=getattr(provider, base),
        tools=[ECHO_TOOL],
        reasoning_effort=effort,
    )
    restored.prompt("b1", "more", turn="t2")
    original_body, restored_body = provider.bodies()
    assert original_body == restored_body


def test_a_codex_key_that_is_not_a_chatgpt_token_fails_the_turn_before_any_request(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given a platform API key where a ChatGPT access token belongs
    runner.open(
        "a1", tmp_path / "native", model="openai-codex/gpt-5.5", base_url=provider.codex_base_url, api_key="sk-1"
    )

    # when
    reply, seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["error"] == {
        "code": "provider_error",
        "message": "openai-codex: the API key is not a ChatGPT access token "
        "(a JWT whose auth claim names the chatgpt_account_id)",
    }
    assert provider.requests() == []
    assert [f.get("event") for f in seen] == []


def test_pi_messages_refuses_an_https_image_and_sends_a_data_image_as_base64(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model="radius/claude-sonnet-4-5", base_url=provider.radius_base_url)
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

    # when
    refused = runner.request(
        "a1",
        "prompt",
        {"text": "look", "media": [{"type": "image/png", "url": "https://example.com/a.png"}]},
        turn="t1",
    )
    taken = runner.request(
        "a1",
        "prompt",
        {"text": "look", "media": [{"type": "image/png", "url": f"data:image/png;base64,{pixel}"}]},
        turn="t2",
    )

    # then
    assert refused["error"]["code"] == "brain_error"
    assert "cannot fetch image URLs" in refused["error"]["message"]
    assert taken["result"] == {}
    (body,) = provider.bodies()
    assert body["context"]["messages"][-1]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "data": pixel, "mimeType": "image/png"},
    ]
