"""`openai-responses` and `azure-openai-responses`: the OpenAI Responses API via the openai SDK.

Every request carries the whole conversation (`store: false`, no `previous_response_id`), so the
native file alone reproduces it. Reasoning items come back encrypted and are replayed verbatim.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
from openai.types.responses import Response, ResponseStreamEvent

from ..errors import ProviderFailure
from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from .base import MAX_RETRIES, Endpoint, TextSink, compact_json, parse_arguments, provider_failure, tool_result_text

__all__ = ["AzureOpenAIResponses", "OpenAIResponses"]

TRANSPORT = "openai-responses"


class OpenAIResponses:
    def __init__(self, client: openai.AsyncOpenAI, endpoint: Endpoint) -> None:
        self._client = client
        self._endpoint = endpoint

    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> OpenAIResponses:
        client = openai.AsyncOpenAI(
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            max_retries=MAX_RETRIES,
            http_client=http_client,
            default_headers=cls._headers(endpoint),
        )
        return cls(client, endpoint)

    @staticmethod
    def _headers(endpoint: Endpoint) -> dict[str, str]:
        return {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for message in request.messages:
            if isinstance(message, UserMessage):
                items.append({"role": "user", "content": [{"type": "input_text", "text": message.text}]})
            elif isinstance(message, ToolResult):
                items.append(
                    {"type": "function_call_output", "call_id": message.call_id, "output": tool_result_text(message)}
                )
            elif isinstance(message, AssistantMessage):
                items.extend(_assistant_items(message))
        body: dict[str, Any] = {
            "model": request.model,
            "instructions": request.instructions,
            "input": items,
            "stream": True,
            "store": False,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": False,
                }
                for t in request.tools
            ]
        if request.reasoning_effort != "off":
            body["reasoning"] = {"effort": request.reasoning_effort}
            body["include"] = ["reasoning.encrypted_content"]
        if request.cache_key:
            body["prompt_cache_key"] = request.cache_key
        return body

    async def generate(self, request: ModelRequest, *, on_text: TextSink) -> Generation:
        final: Any = None
        try:
            stream = await self._client.post(
                "/responses",
                body=self.build_body(request),
                cast_to=Response,
                stream=True,
                stream_cls=openai.AsyncStream[ResponseStreamEvent],
            )
            async with stream:
                async for event in stream:
                    if event.type == "response.output_text.delta" and event.delta:
                        await on_text(event.delta)
                    elif event.type == "response.completed" or event.type == "response.incomplete":
                        final = event.response
                    elif event.type == "response.failed":
                        error = getattr(event.response, "error", None)
                        raise ProviderFailure(
                            f"{self._endpoint.provider}: {getattr(error, 'message', 'response failed')}"
                        )
                    elif event.type == "error":
                        raise ProviderFailure(f"{self._endpoint.provider} stream error: {event.message}")
        except (openai.APIError, httpx.HTTPError) as exc:
            raise provider_failure(self._endpoint.provider, exc) from exc
        if final is None:
            raise ProviderFailure(f"{self._endpoint.provider}: stream ended before the response completed")
        return _generation(final)


class AzureOpenAIResponses(OpenAIResponses):
    """Azure OpenAI's v1 Responses endpoint (`https://RESOURCE.openai.azure.com/openai/v1`)."""

    @staticmethod
    def _headers(endpoint: Endpoint) -> dict[str, str]:
        return {"api-key": endpoint.api_key}  # Azure authenticates API keys with this header


def _assistant_items(message: AssistantMessage) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.replay and message.replay.get("transport") == TRANSPORT:
        items.extend(message.replay.get("items", ()))
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    for call in message.tool_calls:
        items.append(
            {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": compact_json(call.arguments)}
        )
    return items


def _generation(response: Any) -> Generation:
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[dict[str, Any]] = []
    for item in response.output or ():
        if item.type == "message":
            text.extend(part.text for part in item.content if getattr(part, "type", "") == "output_text")
        elif item.type == "function_call":
            calls.append(ToolCall(id=item.call_id, name=item.name, arguments=parse_arguments(item.arguments or "")))
        elif item.type == "reasoning" and getattr(item, "encrypted_content", None):
            reasoning.append(
                {
                    "type": "reasoning",
                    "id": item.id,
                    "summary": [s.model_dump(exclude_none=True) for s in item.summary or ()],
                    "encrypted_content": item.encrypted_content,
                }
            )
    usage = response.usage
    if calls:
        stop_reason = "tool_use"
    elif response.status == "incomplete":
        details = getattr(response, "incomplete_details", None)
        stop_reason = "length" if getattr(details, "reason", "") == "max_output_tokens" else "content_filter"
    else:
        stop_reason = "stop"
    return Generation(
        text="".join(text),
        tool_calls=tuple(calls),
        stop_reason=stop_reason,
        usage=Usage(input=usage.input_tokens, output=usage.output_tokens) if usage else Usage(),
        replay={"transport": TRANSPORT, "items": reasoning} if reasoning else None,
    )
