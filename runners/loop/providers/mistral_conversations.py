"""`mistral-conversations`: Mistral's chat API, streamed (`POST {base_url}/chat/completions`).

The catalog's name for Mistral's transport is the reference harness's (Pi's `mistral-conversations`
API), which streams Mistral's chat completions; so does this one, so a session moved from the
reference server sees the same requests. The body and the events are Mistral's own: content may
come as a list of chunks, reasoning models (`prompt_mode: "reasoning"`, or `reasoning_effort: "high"`
for the models that take Mistral's effort instead, as pi-ai sends it) stream `thinking` chunks
that go back verbatim with the message, tool call ids are nine letters or digits, and usage comes
with the last chunk; the session's cache key goes as the `x-affinity` header (Mistral's prefix
cache routing, as Pi sends it). The openai SDK client sends the request (Bearer key, the same bounded
retries and status errors as every transport); its typed helpers are not used.
"""

from __future__ import annotations

import hashlib
import re
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
from .openai_completions import function_tools
from .openai_responses import open_stream, openai_events
from .sse import encode_body

__all__ = ["MistralConversations", "mistral_call_id"]

TRANSPORT = "mistral-conversations"
# prompt_tokens and completion_tokens only: no cache counts, reasoning counted in the completion.
USAGE = UsageProfile(
    TRANSPORT, "unreported", "included", ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
)
# Models that reason at Mistral's `reasoning_effort` ("high" or "none") rather than in
# `prompt_mode: "reasoning"`; pi-ai's list (providers/mistral.js usesReasoningEffort).
REASONING_EFFORT_MODELS = frozenset({"mistral-small-2603", "mistral-small-latest", "mistral-medium-3.5"})
_STOP_REASONS = {"stop": "stop", "tool_calls": "tool_use", "length": "length", "model_length": "length"}
# Mistral refuses tool call ids that are not exactly this many letters or digits.
CALL_ID_LENGTH = 9
_CALL_ID = re.compile(r"[A-Za-z0-9]{9}")


class MistralConversations(ClientProvider[openai.AsyncOpenAI]):
    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> MistralConversations:
        return cls(openai.AsyncOpenAI(**client_options(endpoint, http_client)), endpoint)

    def build_body(self, request: ModelRequest) -> JSONObject:
        messages: list[JSONObject] = [{"role": "system", "content": request.instructions}]
        messages.extend(_message(message) for message in request.messages)
        body: JSONObject = {"model": request.model, "messages": messages, "stream": True}
        if request.tools:
            body["tools"] = function_tools(request.tools)
        if request.reasoning_effort != "off":  # Mistral has one reasoning mode, not levels
            if request.model in REASONING_EFFORT_MODELS:
                body["reasoning_effort"] = "high"
            else:
                body["prompt_mode"] = "reasoning"
        return body

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        text: list[str] = []
        thinking: list[JSONObject] = []
        calls: dict[int, dict[str, str]] = {}
        finish, usage = "stop", Usage()
        provider = self._endpoint.provider
        meter.expect(USAGE)
        try:
            # the session's key routes requests to the replica holding its prefix cache
            headers = {"x-affinity": request.cache_key} if request.cache_key else None
            body = encode_body(self.build_body(request))
            response = await open_stream(self._client, "/chat/completions", body, headers)
            try:
                async for chunk in openai_events(provider, response):
                    if chunk.get("object") == "error":  # Mistral's error object, sent in place of a chunk
                        raise ProviderFailure(f"{provider} stream error: {chunk.get('message')}")
                    chunk_usage = chunk.get("usage")
                    if isinstance(chunk_usage, dict):
                        prompt = token_count(chunk_usage.get("prompt_tokens"))
                        completion = token_count(chunk_usage.get("completion_tokens"))
                        usage = Usage(input=prompt or 0, output=completion or 0)
                        meter.report({"input_tokens": prompt, "output_tokens": completion})
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        for piece in _text_pieces(delta.get("content"), thinking):
                            text.append(piece)
                            await on_text(piece)
                        for index, call in enumerate(delta.get("tool_calls") or ()):
                            slot = calls.setdefault(call.get("index", index), {"id": "", "name": "", "arguments": ""})
                            _merge_call(slot, call)
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
            finally:
                await response.aclose()
        except (openai.APIError, httpx.HTTPError) as exc:
            raise provider_failure(provider, exc) from exc
        tool_calls = tuple(
            ToolCall(
                id=slot["id"] or mistral_call_id(f"call:{index}"),
                name=slot["name"],
                arguments=parse_arguments(slot["arguments"]),
            )
            for index, slot in sorted(calls.items())
        )
        stop_reason = "tool_use" if tool_calls else _STOP_REASONS.get(finish, finish)
        return Generation(
            text="".join(text),
            tool_calls=tool_calls,
            stop_reason=stop_reason,
            usage=usage,
            replay={"transport": TRANSPORT, "blocks": thinking} if thinking else None,
        )


def mistral_call_id(call_id: str) -> str:
    """A call id as Mistral accepts it: its own ids as they are, any other (a call another
    transport made before the session changed models) as nine characters derived from it."""
    if _CALL_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()
    return digest[:CALL_ID_LENGTH]


def _text_pieces(content: object, thinking: list[JSONObject]) -> list[str]:
    """The visible text of one delta; `thinking` chunks are kept for the replay."""
    if isinstance(content, str):
        return [content] if content else []
    pieces: list[str] = []
    for chunk in content if isinstance(content, list) else ():
        if not isinstance(chunk, dict):
            continue
        if chunk.get("type") == "text" and isinstance(chunk.get("text"), str) and chunk["text"]:
            pieces.append(chunk["text"])
        elif chunk.get("type") == "thinking" and isinstance(chunk.get("thinking"), list):
            _add_thinking(thinking, chunk["thinking"])
    return pieces


def _add_thinking(thinking: list[JSONObject], parts: list[Any]) -> None:
    """Streamed thinking deltas joined into one chunk, as the message carries it back."""
    text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text")
    if not text:
        return
    previous = thinking.pop()["thinking"][0]["text"] if thinking else ""  # type: ignore[index]  # built below
    thinking.append({"type": "thinking", "thinking": [{"type": "text", "text": previous + text}]})


def _merge_call(slot: dict[str, str], call: dict[str, Any]) -> None:
    if call.get("id") and call["id"] != "null":
        slot["id"] = str(call["id"])
    function = call.get("function") or {}
    if function.get("name"):
        slot["name"] += str(function["name"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        slot["arguments"] += arguments
    elif isinstance(arguments, dict):  # Mistral may send the arguments as an object
        slot["arguments"] += compact_json(arguments)


def _message(message: Message) -> JSONObject:
    if isinstance(message, UserMessage):
        if not message.media:
            return {"role": "user", "content": message.text}
        parts: list[JSONObject] = [{"type": "text", "text": message.text}]
        # Mistral's image chunk: a data: URL or an https URL it fetches itself
        parts.extend({"type": "image_url", "image_url": item["url"]} for item in message.media)
        return {"role": "user", "content": parts}
    if isinstance(message, ToolResult):
        return {
            "role": "tool",
            "tool_call_id": mistral_call_id(message.call_id),
            "name": message.name,
            "content": tool_result_text(message),
        }
    return _assistant(message)


def _assistant(message: AssistantMessage) -> JSONObject:
    entry: JSONObject = {"role": "assistant"}
    replay = message.replay if message.replay and message.replay.get("transport") == TRANSPORT else None
    if replay:
        content: list[JSONObject] = list(replay.get("blocks", ()))
        if message.text:
            content.append({"type": "text", "text": message.text})
        entry["content"] = content
    else:
        entry["content"] = message.text
    if message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": mistral_call_id(c.id),
                "type": "function",
                "function": {"name": c.name, "arguments": compact_json(c.arguments)},
            }
            for c in message.tool_calls
        ]
    return entry
