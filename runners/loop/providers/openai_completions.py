"""`openai-completions`: OpenAI Chat Completions (and compatible gateways) via the openai SDK."""

from __future__ import annotations

from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from .base import MAX_RETRIES, Endpoint, TextSink, compact_json, parse_arguments, provider_failure, tool_result_text

__all__ = ["OpenAICompletions"]

_STOP_REASONS = {"stop": "stop", "tool_calls": "tool_use", "function_call": "tool_use", "length": "length"}


class OpenAICompletions:
    def __init__(self, client: openai.AsyncOpenAI, endpoint: Endpoint) -> None:
        self._client = client
        self._endpoint = endpoint

    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> OpenAICompletions:
        client = openai.AsyncOpenAI(
            api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=MAX_RETRIES, http_client=http_client
        )
        return cls(client, endpoint)

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": request.instructions}]
        for message in request.messages:
            if isinstance(message, UserMessage):
                messages.append({"role": "user", "content": message.text})
            elif isinstance(message, ToolResult):
                messages.append({"role": "tool", "tool_call_id": message.call_id, "content": tool_result_text(message)})
            elif isinstance(message, AssistantMessage):
                messages.append(_assistant(message))
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
        if request.reasoning_effort != "off":
            body["reasoning_effort"] = request.reasoning_effort
        if request.cache_key:
            body["prompt_cache_key"] = request.cache_key
        return body

    async def generate(self, request: ModelRequest, *, on_text: TextSink) -> Generation:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish, usage = "stop", Usage()
        try:
            stream = await self._client.post(
                "/chat/completions",
                body=self.build_body(request),
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=openai.AsyncStream[ChatCompletionChunk],
            )
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = Usage(input=chunk.usage.prompt_tokens or 0, output=chunk.usage.completion_tokens or 0)
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            text.append(delta.content)
                            await on_text(delta.content)
                        for call in delta.tool_calls or ():
                            slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                            if call.id:
                                slot["id"] = call.id
                            if call.function and call.function.name:
                                slot["name"] += call.function.name
                            if call.function and call.function.arguments:
                                slot["arguments"] += call.function.arguments
                        if choice.finish_reason:
                            finish = choice.finish_reason
        except (openai.APIError, httpx.HTTPError) as exc:
            raise provider_failure(self._endpoint.provider, exc) from exc
        tool_calls = tuple(
            ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=parse_arguments(slot["arguments"]))
            for index, slot in sorted(calls.items())
        )
        stop_reason = "tool_use" if tool_calls else _STOP_REASONS.get(finish, finish)
        return Generation(text="".join(text), tool_calls=tool_calls, stop_reason=stop_reason, usage=usage)


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": compact_json(c.arguments)}}
            for c in message.tool_calls
        ]
    return entry
