"""The scripted provider on its own: SDKs parse its plain JSON replies; logs and strict checks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from conftest import ScriptedProviderServer


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_non_streaming_replies_parse_in_all_three_sdks(provider: ScriptedProviderServer) -> None:
    async def call_all() -> tuple[Any, Any, Any]:
        oai = openai.AsyncOpenAI(api_key="k", base_url=provider.openai_base_url, max_retries=0)
        ant = anthropic.AsyncAnthropic(api_key="k", base_url=provider.anthropic_base_url, max_retries=0)
        echo: Any = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}
        chat = await oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": 'call echo {"a": 1}'}], tools=[echo]
        )
        response = await oai.responses.create(model="m", input="hi there")
        message = await ant.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        return chat, response, message

    # when
    chat, response, message = _run(call_all())

    # then
    assert chat.choices[0].message.tool_calls[0].function.name == "echo"
    assert response.output_text == "You said: hi there"
    assert message.content[0].text == "You said: hi"
    assert [r["wire"] for r in provider.requests()] == ["openai-completions", "openai-responses", "anthropic-messages"]


def test_rules_from_a_script_take_precedence_and_can_fail(provider: ScriptedProviderServer) -> None:
    # given
    provider.set_script(
        {"rules": [{"match": "weather", "reply": "Sunny."}, {"match": "quota", "status": 429, "message": "slow down"}]}
    )
    client = openai.OpenAI(api_key="k", base_url=provider.openai_base_url, max_retries=0)

    # when
    sunny = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "The WEATHER?"}])
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "quota"}])

    # then
    assert sunny.choices[0].message.content == "Sunny."
    assert "slow down" in str(limited.value)


def test_it_rejects_requests_the_real_apis_would_reject(provider: ScriptedProviderServer) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=provider.anthropic_base_url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
    with pytest.raises(openai.BadRequestError):
        openai.OpenAI(api_key="k", base_url=provider.openai_base_url, max_retries=0).responses.create(
            model="m", input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}]
        )


def test_reset_clears_the_request_log(provider: ScriptedProviderServer) -> None:
    openai.OpenAI(api_key="k", base_url=provider.openai_base_url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert len(provider.requests()) == 1
    provider.reset()
    assert provider.requests() == []


def test_the_default_demo_script_remembers_the_first_message(scripted_provider: ScriptedProviderServer) -> None:
    # given the demo script the server starts with
    demo = json.loads(
        (Path(__file__).resolve().parents[2] / "services/scripted_provider/default_script.json").read_text()
    )
    scripted_provider.reset()
    scripted_provider.set_script({**demo, "delay_ms": 0})
    client = openai.OpenAI(api_key="k", base_url=scripted_provider.openai_base_url, max_retries=0)
    history: list[dict[str, Any]] = []
    replies = []

    # when
    for text in ("Hello! What can you do?", "Tell me a fun fact about octopuses.", "What was my first message?"):
        history.append({"role": "user", "content": [{"type": "input_text", "text": text}]})
        reply = client.responses.create(model="gpt-4.1-mini", input=history).output_text  # type: ignore[arg-type]  # plain dict items
        history.append({"role": "assistant", "content": reply})
        replies.append(reply)

    # then
    assert replies[0].startswith("Hello! I am the scripted demo model")
    assert "three hearts" in replies[1]
    assert replies[2] == (
        'Your first message in this conversation was: "Hello! What can you do?". You have sent 3 messages so far.'
    )


def test_a_rule_after_a_tool_result_calls_the_next_tool_with_what_its_regex_captured(
    scripted_provider: ScriptedProviderServer,
) -> None:
    # given: a script that reads a handle out of a tool result, as a model chaining two tools does
    scripted_provider.reset()
    rule = {
        "after_tool": True,
        "regex": r"Handle: (\S+) \(exec allowed until (\S+)\)",
        "requires_tool": "box_exec",
        "tool_calls": [{"name": "box_exec", "arguments": {"handle": "{group1}", "command": ["echo", "{group2}"]}}],
    }
    scripted_provider.set_script({"rules": [rule]})
    client = openai.OpenAI(api_key="k", base_url=scripted_provider.openai_base_url, max_retries=0)
    tool: Any = {"type": "function", "function": {"name": "box_exec", "parameters": {"type": "object"}}}
    call = {"id": "c1", "type": "function", "function": {"name": "box_create", "arguments": "{}"}}
    messages: list[Any] = [
        {"role": "user", "content": "make a box"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Created. Handle: sbx.a1.b2 (exec allowed until noon)."},
    ]
    # when
    reply = client.chat.completions.create(model="gpt-4.1-mini", messages=messages, tools=[tool])
    # then
    (made,) = reply.choices[0].message.tool_calls or []
    assert made.function.name == "box_exec"  # type: ignore[union-attr]  # a function call
    assert json.loads(made.function.arguments) == {"handle": "sbx.a1.b2", "command": ["echo", "noon"]}  # type: ignore[union-attr]
