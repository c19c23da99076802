"""The Responses body spliced from per-message encodings equals the body built as one object."""

from __future__ import annotations

import orjson
import pytest

from runners.loop.messages import AssistantMessage, ModelRequest, ToolCall, ToolResult, ToolSpec, UserMessage
from runners.loop.providers.openai_responses import OpenAIResponses


def conversation() -> tuple[UserMessage | AssistantMessage | ToolResult, ...]:
    return (
        UserMessage("hello é"),
        AssistantMessage("", tool_calls=(ToolCall("c1", "echo", {"text": "hi", "n": 2**64 - 1}),)),
        ToolResult("c1", "echo", "hi"),
        AssistantMessage("done"),
        UserMessage("again"),
    )


@pytest.mark.parametrize(
    ("effort", "tools", "cache_key"),
    [
        pytest.param("off", (), None, id="plain_case"),
        pytest.param("high", (ToolSpec("echo", "Echo.", {"type": "object"}),), "k", id="tools_and_reasoning_case"),
    ],
)
def test_the_spliced_body_decodes_to_the_built_body(
    effort: str, tools: tuple[ToolSpec, ...], cache_key: str | None
) -> None:
    # given
    provider = OpenAIResponses.__new__(OpenAIResponses)  # no client: only the body is built
    request = ModelRequest("gpt", "be brief", tools, conversation(), reasoning_effort=effort, cache_key=cache_key)

    # when: twice, the second time from the per-message encodings cached by the first
    first, second = provider.encode_request(request), provider.encode_request(request)

    # then
    assert first == second
    assert orjson.loads(first) == provider.build_body(request)


def test_an_empty_conversation_is_an_empty_input() -> None:
    provider = OpenAIResponses.__new__(OpenAIResponses)
    request = ModelRequest("gpt", "", (), ())

    assert orjson.loads(provider.encode_request(request))["input"] == []
