"""`openai-completions`: OpenAI Chat Completions (and compatible gateways) via the openai SDK."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import openai

from runners.protocol import JSONObject

from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, ToolSpec, Usage, UserMessage
from ..metering import RequestMeter, UsageProfile
from .base import (
    ClientProvider,
    Endpoint,
    TextSink,
    client_options,
    compact_json,
    parse_arguments,
    provider_failure,
    tool_result_text,
)
from .openai_responses import COMPLETIONS_USAGE, meter_openai_usage, open_stream, openai_events
from .sse import encode_body

__all__ = ["OpenAICompletions", "function_tools"]

# prompt_tokens counts cached_tokens, completion_tokens counts reasoning_tokens; no cache-write count.
USAGE = UsageProfile("openai-completions", "included", "included", ("cache_write_tokens",))
_STOP_REASONS = {"stop": "stop", "tool_calls": "tool_use", "function_call": "tool_use", "length": "length"}


def function_tools(tools: Sequence[ToolSpec]) -> list[JSONObject]:
    """The tools as Chat Completions `function` tools (Mistral takes the same shape)."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
        for t in tools
    ]


class OpenAICompletions(ClientProvider[openai.AsyncOpenAI]):
    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> OpenAICompletions:
        client = openai.AsyncOpenAI(**client_options(endpoint, http_client))
        return cls(client, endpoint)

    def build_body(self, request: ModelRequest) -> JSONObject:
        messages: list[JSONObject] = [{"role": "system", "content": request.instructions}]
        for message in request.messages:
            if isinstance(message, UserMessage):
                messages.append({"role": "user", "content": _user_content(message)})
            elif isinstance(message, ToolResult):
                messages.append({"role": "tool", "tool_call_id": message.call_id, "content": tool_result_text(message)})
            elif isinstance(message, AssistantMessage):
                messages.append(_assistant(message))
        body: JSONObject = {
            "model": request.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = function_tools(request.tools)
        if request.reasoning_effort != "off":
            body["reasoning_effort"] = request.reasoning_effort
        if request.cache_key:
            body["prompt_cache_key"] = request.cache_key
        return body

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish, usage = "stop", Usage()
        provider = self._endpoint.provider
        meter.expect(USAGE)
        try:
            response = await open_stream(self._client, "/chat/completions", encode_body(self.build_body(request)))
            try:
                async for chunk in openai_events(provider, response):
                    chunk_usage = chunk.get("usage")
                    if chunk_usage is not None:
                        prompt, completion = chunk_usage.get("prompt_tokens"), chunk_usage.get("completion_tokens")
                        usage = Usage(input=prompt or 0, output=completion or 0)
                        meter_openai_usage(meter, chunk_usage, COMPLETIONS_USAGE)
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        content = delta.get("content")
                        if content:
                            text.append(content)
                            await on_text(content)
                        for call in delta.get("tool_calls") or ():
                            slot = calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                            if call.get("id"):
                                slot["id"] = call["id"]
                            function = call.get("function") or {}
                            if function.get("name"):
                                slot["name"] += function["name"]
                            if function.get("arguments"):
                                slot["arguments"] += function["arguments"]
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
            finally:
                await response.aclose()
        except (openai.APIError, httpx.HTTPError) as exc:
            raise provider_failure(provider, exc) from exc
        tool_calls = tuple(
            ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=parse_arguments(slot["arguments"]))
            for index, slot in sorted(calls.items())
        )
        stop_reason = "tool_use" if tool_calls else _STOP_REASONS.get(finish, finish)
        return Generation(text="".join(text), tool_calls=tool_calls, stop_reason=stop_reason, usage=usage)


def _user_content(message: UserMessage) -> str | list[JSONObject]:
    """Plain text, or text and image_url parts (a data: or https URL) when it has images."""
    if not message.media:
        return message.text
    parts: list[JSONObject] = [{"type": "text", "text": message.text}]
    parts.extend({"type": "image_url", "image_url": {"url": item["url"]}} for item in message.media)
    return parts


def _assistant(message: AssistantMessage) -> JSONObject:
    entry: JSONObject = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": compact_json(c.arguments)}}
            for c in message.tool_calls
        ]
    return entry
