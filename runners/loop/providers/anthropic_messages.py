"""`anthropic-messages`: the Anthropic Messages API via the anthropic SDK.

Prompt caching is explicit here: one breakpoint after the system prompt (caching tools and
instructions) and one on the newest message block (caching the conversation so far).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx

from runners.media import Media
from runners.protocol import JSONObject

from ..errors import ProviderFailure
from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from ..metering import RequestMeter, UsageProfile, token_count
from .base import (
    OUTPUT_TOKENS,
    THINKING_BUDGETS,
    ClientProvider,
    Endpoint,
    TextSink,
    client_options,
    image_base64,
    parse_arguments,
    provider_failure,
)
from .sse import decode_event, encode_body, iter_sse

__all__ = ["AnthropicMessages"]

TRANSPORT = "anthropic-messages"
_CACHE = {"type": "ephemeral"}
# input_tokens leaves out the cache reads and writes; output_tokens counts thinking, with no count of its own.
USAGE = UsageProfile("anthropic-messages", "separate", "included", ("reasoning_tokens",))
# Stream events that carry message state; `ping` and unknown events are skipped, `error` raises.
_MESSAGE_EVENTS = frozenset(
    {"message_start", "message_delta", "message_stop"}
    | {"content_block_start", "content_block_delta", "content_block_stop"}
)
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_use", "max_tokens": "length"}


class AnthropicMessages(ClientProvider[anthropic.AsyncAnthropic]):
    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> AnthropicMessages:
        client = anthropic.AsyncAnthropic(**client_options(endpoint, http_client))
        return cls(client, endpoint)

    def build_body(self, request: ModelRequest) -> JSONObject:
        turns: list[dict[str, Any]] = []
        for message in request.messages:
            role, blocks = _blocks(message)
            if not blocks:
                continue
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)  # the API wants roles to alternate
            else:
                turns.append({"role": role, "content": blocks})
        if turns:
            last = turns[-1]["content"]
            last[-1] = {**last[-1], "cache_control": _CACHE}
        budget = THINKING_BUDGETS.get(request.reasoning_effort, 0)
        body: JSONObject = {
            "model": request.model,
            "max_tokens": OUTPUT_TOKENS + budget,
            "system": [{"type": "text", "text": request.instructions, "cache_control": _CACHE}],
            "messages": turns,
            "stream": True,
        }
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools
            ]
        if budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        return body

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        blocks: dict[int, dict[str, Any]] = {}
        stop, input_tokens, output_tokens = "end_turn", 0, 0
        counts: dict[str, int | None] = {}
        provider = self._endpoint.provider
        meter.expect(USAGE)
        try:
            response = await self._client.post(
                "/v1/messages",
                body=encode_body(self.build_body(request)),
                cast_to=httpx.Response,
                stream=True,
                stream_cls=None,
            )
            assert isinstance(response, httpx.Response)  # cast_to=httpx.Response: the SDK returns it as is
            try:
                async for name, data in iter_sse(response):
                    if name == "error":
                        raise _stream_error(response, data)
                    if name not in _MESSAGE_EVENTS:
                        continue
                    event = decode_event(provider, data)
                    kind = event.get("type", name)
                    if kind == "message_start":
                        usage = event["message"]["usage"]
                        input_tokens = (
                            (usage.get("input_tokens") or 0)
                            + (usage.get("cache_creation_input_tokens") or 0)
                            + (usage.get("cache_read_input_tokens") or 0)
                        )
                        counts = _input_counts(usage)
                        meter.report(counts)  # output_tokens follows in message_delta
                    elif kind == "content_block_start":
                        blocks[event["index"]] = _start_block(event["content_block"])
                    elif kind == "content_block_delta":
                        block = blocks.get(event["index"])
                        if block is None:
                            raise ProviderFailure(f"{provider}: delta for a content block that never started")
                        await _apply_delta(block, event["delta"], on_text)
                    elif kind == "message_delta":
                        stop = (event.get("delta") or {}).get("stop_reason") or stop
                        output_tokens = (event.get("usage") or {}).get("output_tokens") or output_tokens
                        final = event.get("usage") or {}
                        later = {name: count for name, count in _input_counts(final).items() if count is not None}
                        counts = {**counts, **later, "output_tokens": token_count(final.get("output_tokens"))}
                        meter.report(counts)
            finally:
                await response.aclose()
        except (anthropic.APIError, httpx.HTTPError) as exc:
            raise provider_failure(provider, exc) from exc
        ordered = [blocks[index] for index in sorted(blocks)]
        calls = tuple(
            ToolCall(
                id=b["id"],
                name=b["name"],
                arguments=parse_arguments(b["partial_json"]) if b["partial_json"] else b["input"],
            )
            for b in ordered
            if b["type"] == "tool_use"
        )
        thinking = [b for b in ordered if b["type"] in ("thinking", "redacted_thinking")]
        return Generation(
            text="".join(b["text"] for b in ordered if b["type"] == "text"),
            tool_calls=calls,
            stop_reason="tool_use" if calls else _STOP_REASONS.get(stop, stop),
            usage=Usage(input=input_tokens, output=output_tokens),
            replay={"transport": TRANSPORT, "blocks": thinking} if thinking else None,
        )


def _image_block(item: Media) -> JSONObject:
    """spec (Messages vision): a base64 source with its media_type, or a url source."""
    data = image_base64(item)
    if data is None:
        return {"type": "image", "source": {"type": "url", "url": item["url"]}}
    return {"type": "image", "source": {"type": "base64", "media_type": item["type"], "data": data}}


def _input_counts(usage: dict[str, Any]) -> dict[str, int | None]:
    return {
        "input_tokens": token_count(usage.get("input_tokens")),
        "cache_read_tokens": token_count(usage.get("cache_read_input_tokens")),
        "cache_write_tokens": token_count(usage.get("cache_creation_input_tokens")),
    }


def _blocks(message: Any) -> tuple[str, list[JSONObject]]:
    if isinstance(message, UserMessage):
        blocks: list[JSONObject] = [{"type": "text", "text": message.text}] if message.text else []
        blocks.extend(_image_block(item) for item in message.media)
        return "user", blocks
    if isinstance(message, ToolResult):
        block = {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": message.text,
            "is_error": message.is_error,
        }
        return "user", [block]
    assert isinstance(message, AssistantMessage)
    blocks = []
    if message.replay and message.replay.get("transport") == TRANSPORT:
        blocks.extend(message.replay.get("blocks", ()))
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls)
    return "assistant", blocks


def _stream_error(response: httpx.Response, data: bytes) -> anthropic.APIStatusError:
    """A mid-stream `error` event, as the SDK's own stream reports it (status of the response)."""
    text = data.decode("utf-8", "replace")
    body: Any = text
    try:
        body = decode_event("anthropic", data)
        message = f"{body}"
    except ProviderFailure:
        message = text or f"Error code: {response.status_code}"
    return anthropic.APIStatusError(message, response=response, body=body)


def _start_block(block: dict[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block["id"],
            "name": block["name"],
            "input": block.get("input") or {},
            "partial_json": "",
        }
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.get("thinking") or "", "signature": block.get("signature") or ""}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.get("data")}
    return {"type": kind, "text": block.get("text") or ""}


async def _apply_delta(block: dict[str, Any], delta: dict[str, Any], on_text: TextSink) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        text = delta.get("text") or ""
        block["text"] = block.get("text", "") + text
        await on_text(text)
    elif kind == "input_json_delta":
        block["partial_json"] += delta.get("partial_json") or ""
    elif kind == "thinking_delta":
        block["thinking"] += delta.get("thinking") or ""
    elif kind == "signature_delta":
        block["signature"] += delta.get("signature") or ""
