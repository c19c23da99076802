"""`anthropic-messages`: the Anthropic Messages API via the anthropic SDK.

Prompt caching is explicit here: one breakpoint after the system prompt (caching tools and
instructions) and one on the newest message block (caching the conversation so far).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
from anthropic.types import Message, RawMessageStreamEvent

from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from .base import (
    MAX_RETRIES,
    OUTPUT_TOKENS,
    THINKING_BUDGETS,
    Endpoint,
    TextSink,
    parse_arguments,
    provider_failure,
)

__all__ = ["AnthropicMessages"]

TRANSPORT = "anthropic-messages"
_CACHE = {"type": "ephemeral"}
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_use", "max_tokens": "length"}


class AnthropicMessages:
    def __init__(self, client: anthropic.AsyncAnthropic, endpoint: Endpoint) -> None:
        self._client = client
        self._endpoint = endpoint

    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> AnthropicMessages:
        client = anthropic.AsyncAnthropic(
            api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=MAX_RETRIES, http_client=http_client
        )
        return cls(client, endpoint)

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
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
        body: dict[str, Any] = {
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

    async def generate(self, request: ModelRequest, *, on_text: TextSink) -> Generation:
        blocks: dict[int, dict[str, Any]] = {}
        stop, input_tokens, output_tokens = "end_turn", 0, 0
        try:
            stream = await self._client.post(
                "/v1/messages",
                body=self.build_body(request),
                cast_to=Message,
                stream=True,
                stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
            )
            async with stream:
                async for event in stream:
                    if event.type == "message_start":
                        usage = event.message.usage
                        input_tokens = (
                            usage.input_tokens
                            + (usage.cache_creation_input_tokens or 0)
                            + (usage.cache_read_input_tokens or 0)
                        )
                    elif event.type == "content_block_start":
                        blocks[event.index] = _start_block(event.content_block)
                    elif event.type == "content_block_delta":
                        await _apply_delta(blocks[event.index], event.delta, on_text)
                    elif event.type == "message_delta":
                        stop = event.delta.stop_reason or stop
                        output_tokens = event.usage.output_tokens or output_tokens
        except (anthropic.APIError, httpx.HTTPError) as exc:
            raise provider_failure(self._endpoint.provider, exc) from exc
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


def _blocks(message: Any) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, UserMessage):
        return "user", [{"type": "text", "text": message.text}] if message.text else []
    if isinstance(message, ToolResult):
        block = {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": message.text,
            "is_error": message.is_error,
        }
        return "user", [block]
    assert isinstance(message, AssistantMessage)
    blocks: list[dict[str, Any]] = []
    if message.replay and message.replay.get("transport") == TRANSPORT:
        blocks.extend(message.replay.get("blocks", ()))
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls)
    return "assistant", blocks


def _start_block(block: Any) -> dict[str, Any]:
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input or {}, "partial_json": ""}
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.thinking or "", "signature": block.signature or ""}
    if block.type == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": block.type, "text": getattr(block, "text", "") or ""}


async def _apply_delta(block: dict[str, Any], delta: Any, on_text: TextSink) -> None:
    if delta.type == "text_delta":
        block["text"] = block.get("text", "") + delta.text
        await on_text(delta.text)
    elif delta.type == "input_json_delta":
        block["partial_json"] += delta.partial_json
    elif delta.type == "thinking_delta":
        block["thinking"] += delta.thinking
    elif delta.type == "signature_delta":
        block["signature"] += delta.signature
