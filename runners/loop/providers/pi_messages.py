"""`pi-messages`: Pi's own message wire, spoken by model gateways for Pi clients (Radius).

`POST {base_url}/messages` with a Bearer key and `{"model", "context", "options"}`: the context is
Pi's (`systemPrompt`, Pi messages, tools), the gateway converts it for the upstream provider. The
reply is server-sent events of Pi's assistant-message stream: `start`, `text_*`, `thinking_*`,
`toolcall_*` (each with a `contentIndex`), then exactly one `done` (stop reason, usage, the
gateway's `responseId`) or `error`; a stream that ends without one is a failure, not a short
answer. pi-ai's published events carry the message itself (`done.message`, `error.error`, and
each block in `partial.content`); some gateways flatten its fields onto the event (`usage`,
`responseId`, `errorMessage`, `contentSignature`, a call's `id` and `toolName`). Both are read,
the flat field first. Thinking blocks, with their signatures, go back verbatim with the message. Pi's images
are base64 only, so an https image is refused. The openai SDK client sends the request (Bearer
key, the same bounded retries and status errors as every transport); its typed helpers are not used.
"""

from __future__ import annotations

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
    image_base64,
    parse_arguments,
    provider_failure,
    refuse_image_url,
)
from .openai_responses import open_stream
from .sse import decode_event, encode_body, iter_sse

__all__ = ["PiMessages"]

TRANSPORT = "pi-messages"
# Pi's usage: `input` leaves out the cache reads and writes; `output` counts the reasoning.
USAGE = UsageProfile(TRANSPORT, "separate", "included", ("reasoning_tokens",))
_STOP_REASONS = {"stop": "stop", "toolUse": "tool_use", "length": "length"}
# Pi's thinking levels; the catalog's "max" is Pi's highest, "xhigh".
_LEVELS = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
# Pi messages carry a timestamp; a fixed one keeps the body of a restored session byte-identical.
TIMESTAMP = 0
# Usage of a replayed message: the gateway does not read it, Pi's message shape requires it.
_NO_USAGE: JSONObject = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


class PiMessages(ClientProvider[openai.AsyncOpenAI]):
    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> PiMessages:
        client = openai.AsyncOpenAI(
            **client_options(endpoint, http_client), default_headers={"Accept": "text/event-stream"}
        )
        return cls(client, endpoint)

    def build_body(self, request: ModelRequest) -> JSONObject:
        context: JSONObject = {
            "systemPrompt": request.instructions,
            "messages": [self._message(message, request.model) for message in request.messages],
        }
        if request.tools:
            context["tools"] = [
                {"name": t.name, "description": t.description, "parameters": t.input_schema} for t in request.tools
            ]
        options: JSONObject = {}
        if request.reasoning_effort != "off":
            options["reasoning"] = _LEVELS[request.reasoning_effort]
        if request.cache_key:
            options["sessionId"] = request.cache_key
        return {"model": request.model, "context": context, "options": options}

    def _message(self, message: Message, model: str) -> JSONObject:
        if isinstance(message, UserMessage):
            content: list[JSONObject] = [{"type": "text", "text": message.text}]
            for item in message.media:
                data = image_base64(item)
                if data is None:
                    raise refuse_image_url(TRANSPORT)
                content.append({"type": "image", "data": data, "mimeType": item["type"]})
            return {"role": "user", "content": content, "timestamp": TIMESTAMP}
        if isinstance(message, ToolResult):
            return {
                "role": "toolResult",
                "toolCallId": message.call_id,
                "toolName": message.name,
                "content": [{"type": "text", "text": message.text}],
                "isError": message.is_error,
                "timestamp": TIMESTAMP,
            }
        return self._assistant(message, model)

    def _assistant(self, message: AssistantMessage, model: str) -> JSONObject:
        replay = message.replay if message.replay and message.replay.get("transport") == TRANSPORT else None
        content: list[JSONObject] = list(replay.get("blocks", ())) if replay else []
        if message.text:
            content.append({"type": "text", "text": message.text})
        content.extend(
            {"type": "toolCall", "id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        )
        return {
            "role": "assistant",
            "content": content,
            "api": TRANSPORT,
            "provider": self._endpoint.provider,
            "model": model,
            "usage": _NO_USAGE,
            "stopReason": "toolUse" if message.tool_calls else "stop",
            "timestamp": TIMESTAMP,
        }

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        provider = self._endpoint.provider
        meter.expect(USAGE)
        stream = _Stream(provider, on_text, meter)
        try:
            response = await open_stream(self._client, "/messages", encode_body(self.build_body(request)))
            try:
                async for _event, data in iter_sse(response):
                    if data.startswith(b"[DONE]"):
                        break
                    if await stream.feed(decode_event(provider, data)):
                        break
            finally:
                await response.aclose()
        except (openai.APIError, httpx.HTTPError) as exc:
            raise provider_failure(provider, exc) from exc
        return stream.generation()


class _Stream:
    """The blocks of one reply as its events build them, by content index."""

    def __init__(self, provider: str, on_text: TextSink, meter: RequestMeter) -> None:
        self.provider = provider
        self.on_text = on_text
        self.meter = meter
        self.blocks: dict[int, dict[str, Any]] = {}
        self.done: dict[str, Any] | None = None

    async def feed(self, event: dict[str, Any]) -> bool:
        """Apply one event; True once the terminal `done` arrived."""
        kind = event.get("type")
        if kind == "done":
            self._meter(event)
            self.done = event
            return True
        if kind == "error":
            self._meter(event)
            message = _field(event, "error", "errorMessage")
            raise ProviderFailure(f"{self.provider}: {message if isinstance(message, str) else 'request failed'}")
        if not isinstance(kind, str) or "_" not in kind or kind == "start":
            return False  # `start` and events this wire may add later carry nothing to keep
        family, _, step = kind.rpartition("_")
        index = event.get("contentIndex")
        if family not in ("text", "thinking", "toolcall") or not isinstance(index, int) or isinstance(index, bool):
            return False
        block = self.blocks.setdefault(index, {"type": family, "text": "", "arguments": ""})
        if block["type"] != family:
            raise ProviderFailure(f"{self.provider}: malformed stream: block {index} changed its kind")
        await self._apply(block, step, event)
        return False

    async def _apply(self, block: dict[str, Any], step: str, event: dict[str, Any]) -> None:
        partial = _partial_block(event)
        if step == "start" and block["type"] == "toolcall":
            block["id"] = str(event.get("id") or partial.get("id") or "")
            block["name"] = str(event.get("toolName") or partial.get("name") or "")
        elif step == "delta" and isinstance(event.get("delta"), str):
            key = "arguments" if block["type"] == "toolcall" else "text"
            block[key] += event["delta"]
            if block["type"] == "text" and event["delta"]:
                await self.on_text(event["delta"])
        elif step == "end" and block["type"] == "toolcall":
            call = event.get("toolCall")
            if isinstance(call, dict):
                block["id"] = str(call.get("id") or block.get("id", ""))
                block["name"] = str(call.get("name") or block.get("name", ""))
                block["final_arguments"] = call.get("arguments")
        elif step == "end" and isinstance(event.get("content"), str):
            content = event["content"]
            if block["type"] == "text" and content.startswith(block["text"]) and content != block["text"]:
                await self.on_text(content[len(block["text"]) :])  # what the deltas left out
            block["text"] = content
            signature = event.get("contentSignature", partial.get("thinkingSignature"))
            if isinstance(signature, str):
                block["signature"] = signature
            if event.get("redacted", partial.get("redacted")) is True:
                block["redacted"] = True

    def _meter(self, event: dict[str, Any]) -> None:
        self.meter.note_provider_id(_field(event, "message", "responseId"))
        usage = _field(event, "message", "usage") or _field(event, "error", "usage")
        if isinstance(usage, dict):
            self.meter.report(
                {
                    "input_tokens": token_count(usage.get("input")),
                    "output_tokens": token_count(usage.get("output")),
                    "cache_read_tokens": token_count(usage.get("cacheRead")),
                    "cache_write_tokens": token_count(usage.get("cacheWrite")),
                }
            )

    def generation(self) -> Generation:
        if self.done is None:
            raise ProviderFailure(f"{self.provider}: stream ended before the response completed")
        text: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[JSONObject] = []
        for _index, block in sorted(self.blocks.items()):
            if block["type"] == "text":
                text.append(block["text"])
            elif block["type"] == "thinking":
                thinking.append(_thinking_block(block))
            else:
                final = block.get("final_arguments")  # the end event's object wins over the streamed JSON
                arguments = parse_arguments(compact_json(final) if isinstance(final, dict) else block["arguments"])
                calls.append(ToolCall(id=block.get("id", ""), name=block.get("name", ""), arguments=arguments))
        raw_usage = _field(self.done, "message", "usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        reason = self.done.get("reason")
        return Generation(
            text="".join(text),
            tool_calls=tuple(calls),
            stop_reason="tool_use" if calls else _STOP_REASONS.get(str(reason), str(reason or "stop")),
            usage=Usage(input=token_count(usage.get("input")) or 0, output=token_count(usage.get("output")) or 0),
            replay={"transport": TRANSPORT, "blocks": thinking} if thinking else None,
        )


def _field(event: dict[str, Any], carrier: str, name: str) -> Any:
    """`event[name]`, else the same field of the message the event carries (`done.message`, `error.error`)."""
    if event.get(name) is not None:
        return event[name]
    message = event.get(carrier)
    return message.get(name) if isinstance(message, dict) else None


def _partial_block(event: dict[str, Any]) -> dict[str, Any]:
    """The event's own block in the message so far (`partial.content[contentIndex]`), or {}."""
    partial = event.get("partial")
    content = partial.get("content") if isinstance(partial, dict) else None
    index = event["contentIndex"]
    block = content[index] if isinstance(content, list) and 0 <= index < len(content) else None
    return block if isinstance(block, dict) else {}


def _thinking_block(block: dict[str, Any]) -> JSONObject:
    """A thinking block as Pi carries it back: its text, its signature, and whether it is redacted."""
    entry: JSONObject = {"type": "thinking", "thinking": block["text"]}
    if "signature" in block:
        entry["thinkingSignature"] = block["signature"]
    if block.get("redacted"):
        entry["redacted"] = True
    return entry
