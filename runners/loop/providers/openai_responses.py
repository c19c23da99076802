"""`openai-responses` and `azure-openai-responses`: the OpenAI Responses API via the openai SDK.

Every request carries the whole conversation (`store: false`, no `previous_response_id`), so the
native file alone reproduces it. Reasoning items come back encrypted and are replayed verbatim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai

from runners.protocol import JSONObject

from ..errors import ProviderFailure
from ..messages import AssistantMessage, Generation, Message, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from ..metering import RequestMeter, UsageProfile, token_count
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
from .sse import decode_event, encode_body, iter_sse

__all__ = ["AzureOpenAIResponses", "OpenAIResponses", "meter_openai_usage", "open_stream", "openai_events"]

TRANSPORT = "openai-responses"
# input_tokens counts cached_tokens, output_tokens counts reasoning_tokens; no cache-write count.
USAGE = UsageProfile("openai-responses", "included", "included", ("cache_write_tokens",))
ENCODED_ITEMS = TRANSPORT + ".encoded"  # derived key: the items of one message as JSON, comma-joined


class OpenAIResponses(ClientProvider[openai.AsyncOpenAI]):
    PATH = "/responses"

    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> OpenAIResponses:
        client = openai.AsyncOpenAI(**client_options(endpoint, http_client), default_headers=cls._headers(endpoint))
        return cls(client, endpoint)

    @staticmethod
    def _headers(endpoint: Endpoint) -> dict[str, str]:
        return {}

    def build_body(self, request: ModelRequest) -> JSONObject:
        items: list[JSONObject] = []
        for message in request.messages:
            items.extend(_items_of(message))
        return {"input": items, **self._settings(request)}

    def encode_request(self, request: ModelRequest) -> bytes:
        """build_body() as JSON bytes. Each message's items are encoded once and spliced in, so a
        long conversation costs a join per turn instead of re-encoding every earlier item."""
        pieces: list[bytes] = []
        for message in request.messages:
            encoded = message.derived.get(ENCODED_ITEMS)
            if not isinstance(encoded, bytes):
                encoded = message.derived[ENCODED_ITEMS] = b",".join(encode_body(item) for item in _items_of(message))
            if encoded:
                pieces.append(encoded)
        settings = encode_body(self._settings(request))  # a non-empty object: b'{"model":...}'
        return b'{"input":[' + b",".join(pieces) + b"]," + settings[1:]

    def _request_headers(self, request: ModelRequest) -> dict[str, str] | None:
        """Headers of one request on top of the client's (none here)."""
        return None

    def _settings(self, request: ModelRequest) -> JSONObject:
        """Every body member but `input`."""
        body: JSONObject = {
            "model": request.model,
            "instructions": request.instructions,
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

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        provider = self._endpoint.provider
        final: Any = None
        meter.expect(USAGE)
        try:
            body, headers = self.encode_request(request), self._request_headers(request)
            response = await open_stream(self._client, self.PATH, body, headers)
            try:
                async for event in openai_events(provider, response):
                    kind = event.get("type")
                    if kind == "response.output_text.delta":
                        delta = event.get("delta")
                        if delta:
                            await on_text(delta)
                    elif kind in _FINAL_EVENTS:
                        final = event.get("response")
                    elif kind == "response.failed":
                        meter_openai_usage(meter, (event.get("response") or {}).get("usage"), RESPONSES_USAGE)
                        error = (event.get("response") or {}).get("error")
                        message = error.get("message", "response failed") if isinstance(error, dict) else None
                        raise ProviderFailure(f"{provider}: {message or 'response failed'}")
                    elif kind == "error":
                        raise ProviderFailure(f"{provider} stream error: {event.get('message')}")
            finally:
                await response.aclose()
        except (openai.APIError, httpx.HTTPError) as exc:
            raise provider_failure(provider, exc) from exc
        if not isinstance(final, dict):
            raise ProviderFailure(f"{provider}: stream ended before the response completed")
        meter_openai_usage(meter, final.get("usage"), RESPONSES_USAGE)
        return _generation(final)


# Events that carry the finished response (the ChatGPT backend of Codex may send `response.done`).
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.done"})
# (input, its details, output, its details) as Responses and Chat Completions name them.
RESPONSES_USAGE = ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details")
COMPLETIONS_USAGE = ("prompt_tokens", "prompt_tokens_details", "completion_tokens", "completion_tokens_details")


def meter_openai_usage(meter: RequestMeter, usage: object, names: tuple[str, str, str, str]) -> None:
    """OpenAI's usage object as the meter counts it: `cached_tokens` and `reasoning_tokens` are
    parts of the input and output counts; compatible gateways may leave the details out."""
    if not isinstance(usage, dict):
        return
    input_name, input_details, output_name, output_details = names
    cached = usage.get(input_details)
    reasoning = usage.get(output_details)
    meter.report(
        {
            "input_tokens": token_count(usage.get(input_name)),
            "output_tokens": token_count(usage.get(output_name)),
            "cache_read_tokens": token_count(cached.get("cached_tokens")) if isinstance(cached, dict) else None,
            "reasoning_tokens": token_count(reasoning.get("reasoning_tokens")) if isinstance(reasoning, dict) else None,
        }
    )


async def open_stream(
    client: openai.AsyncOpenAI, path: str, body: bytes, headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST through the SDK (auth, retries, status errors) and hand back the unread stream."""
    response = await client.post(
        path,
        body=body,
        cast_to=httpx.Response,
        options={"headers": headers} if headers else {},
        stream=True,
        stream_cls=None,
    )
    assert isinstance(response, httpx.Response)  # cast_to=httpx.Response: the SDK returns it as is
    return response


async def openai_events(provider: str, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each event's object until `[DONE]`; an `error` member raises as the SDK's own stream does."""
    async for _event, data in iter_sse(response):
        if data.startswith(b"[DONE]"):
            return
        value = decode_event(provider, data)
        error = value.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            if not message or not isinstance(message, str):
                message = "An error occurred during streaming"
            raise openai.APIError(message, response.request, body=error)
        yield value


class AzureOpenAIResponses(OpenAIResponses):
    """Azure OpenAI's v1 Responses endpoint (`https://RESOURCE.openai.azure.com/openai/v1`)."""

    @staticmethod
    def _headers(endpoint: Endpoint) -> dict[str, str]:
        return {"api-key": endpoint.api_key}  # Azure authenticates API keys with this header


def _items_of(message: Message) -> tuple[JSONObject, ...]:
    derived = message.derived.get(TRANSPORT)
    if isinstance(derived, tuple):
        return derived
    items = message.derived[TRANSPORT] = _message_items(message)
    return items


def _message_items(message: Message) -> tuple[JSONObject, ...]:
    """The input items of one message; derived once per message, shared by every later request."""
    if isinstance(message, UserMessage):
        content: list[JSONObject] = [{"type": "input_text", "text": message.text}]
        # spec (Responses input_image): a data: URL or an https URL in image_url; detail is required
        content.extend({"type": "input_image", "image_url": item["url"], "detail": "auto"} for item in message.media)
        return ({"role": "user", "content": content},)
    if isinstance(message, ToolResult):
        return ({"type": "function_call_output", "call_id": message.call_id, "output": tool_result_text(message)},)
    return tuple(_assistant_items(message))


def _assistant_items(message: AssistantMessage) -> list[JSONObject]:
    items: list[JSONObject] = []
    if message.replay and message.replay.get("transport") == TRANSPORT:
        items.extend(message.replay.get("items", ()))
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    for call in message.tool_calls:
        items.append(
            {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": compact_json(call.arguments)}
        )
    return items


def _generation(response: dict[str, Any]) -> Generation:
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        kind = item.get("type")
        if kind == "message":
            text.extend(part.get("text", "") for part in item.get("content") or () if part.get("type") == "output_text")
        elif kind == "function_call":
            arguments = parse_arguments(item.get("arguments") or "")
            calls.append(ToolCall(id=item["call_id"], name=item["name"], arguments=arguments))
        elif kind == "reasoning" and item.get("encrypted_content"):
            reasoning.append(
                {
                    "type": "reasoning",
                    "id": item["id"],
                    "summary": [_without_nulls(s) for s in item.get("summary") or ()],
                    "encrypted_content": item["encrypted_content"],
                }
            )
    usage = response.get("usage")
    if calls:
        stop_reason = "tool_use"
    elif response.get("status") == "incomplete":
        details = response.get("incomplete_details") or {}
        stop_reason = "length" if details.get("reason") == "max_output_tokens" else "content_filter"
    else:
        stop_reason = "stop"
    return Generation(
        text="".join(text),
        tool_calls=tuple(calls),
        stop_reason=stop_reason,
        usage=Usage(input=usage.get("input_tokens") or 0, output=usage.get("output_tokens") or 0) if usage else Usage(),
        replay={"transport": TRANSPORT, "items": reasoning} if reasoning else None,
    )


def _without_nulls(value: JSONObject) -> JSONObject:
    """A summary part as it is replayed: the members the provider set (null means unset)."""
    return {key: member for key, member in value.items() if member is not None}
