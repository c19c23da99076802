"""`google-generative-ai` (Gemini API) and `google-vertex` (Vertex AI) via the google-genai SDK.

Both send the whole conversation to `…:streamGenerateContent?alt=sse` with the session's `api_key`
(`x-goog-api-key`); Vertex AI runs in express mode (API keys, `publishers/google/models/…`), not
with project credentials. Gemini attaches `thoughtSignature`s to parts of reasoning models' replies
and wants them back, so such replies are replayed part for part.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx
from google import genai
from google.genai import errors, types

from runners.media import Media
from runners.protocol import JSONObject

from ..errors import ProviderFailure
from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from ..metering import RequestMeter, UsageProfile, token_count
from .base import MAX_RETRIES, READ_TIMEOUT, ClientProvider, Endpoint, TextSink, image_bytes, refuse_image_url

__all__ = ["GoogleGenerativeAI", "GoogleVertex"]

# reasoning_effort → Gemini 2.5 thinking budget (tokens); Gemini 3 takes a level instead.
THINKING_BUDGETS = {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768, "max": 32768}
THINKING_LEVELS = {"minimal": "low", "low": "low", "medium": "high", "high": "high", "xhigh": "high", "max": "high"}
# promptTokenCount counts cachedContentTokenCount; thoughtsTokenCount comes on top of
# candidatesTokenCount; no cache-write count. Gemini's JSON leaves zero counts out: absent is 0.
USAGE = UsageProfile("google-genai", "included", "separate", ("cache_write_tokens",))
# SDK retries (exponential with jitter, 408/429/5xx): the first wait in seconds, and the cap.
RETRY_INITIAL_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
_STOP_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}


class GoogleGenerativeAI(ClientProvider[genai.Client]):
    vertexai = False
    api_version = "v1beta"  # function declarations with JSON schema and thinking need the beta API

    @classmethod
    def create(cls, endpoint: Endpoint, http_client: httpx.AsyncClient) -> GoogleGenerativeAI:
        options = types.HttpOptions(
            base_url=endpoint.base_url,
            api_version=cls.api_version,
            timeout=int(READ_TIMEOUT * 1000),  # milliseconds
            httpx_async_client=http_client,
            retry_options=types.HttpRetryOptions(
                attempts=MAX_RETRIES + 1, initial_delay=RETRY_INITIAL_DELAY, max_delay=RETRY_MAX_DELAY
            ),
        )
        client = genai.Client(vertexai=cls.vertexai, api_key=endpoint.api_key, http_options=options)
        return cls(client, endpoint)

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        contents: list[dict[str, Any]] = []
        for message in request.messages:
            role, parts = self._parts(message)
            if not parts:
                continue
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].extend(parts)  # parallel function responses share one turn
            else:
                contents.append({"role": role, "parts": parts})
        config: JSONObject = {"system_instruction": request.instructions} if request.instructions else {}
        if request.tools:
            declarations = [
                {"name": t.name, "description": t.description, "parameters_json_schema": t.input_schema}
                for t in request.tools
            ]
            config["tools"] = [{"function_declarations": declarations}]
            config["automatic_function_calling"] = {"disable": True}  # the loop runs the tools
        if request.reasoning_effort != "off":
            if "gemini-3" in request.model:
                config["thinking_config"] = {"thinking_level": THINKING_LEVELS[request.reasoning_effort]}
            else:
                config["thinking_config"] = {"thinking_budget": THINKING_BUDGETS[request.reasoning_effort]}
        return {"model": request.model, "contents": contents, "config": config}

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        body = self.build_body(request)
        parts: list[dict[str, Any]] = []
        finish, usage = "STOP", Usage()
        meter.expect(USAGE)
        try:
            stream = await self._client.aio.models.generate_content_stream(
                model=body["model"], contents=body["contents"], config=body["config"]
            )
            async for chunk in stream:
                if chunk.usage_metadata is not None:
                    meta = chunk.usage_metadata
                    output = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
                    usage = Usage(input=meta.prompt_token_count or 0, output=output)
                    meter.report(
                        {
                            "input_tokens": token_count(meta.prompt_token_count or 0),
                            "output_tokens": token_count(meta.candidates_token_count or 0),
                            "cache_read_tokens": token_count(meta.cached_content_token_count or 0),
                            "reasoning_tokens": token_count(meta.thoughts_token_count or 0),
                        }
                    )
                if meter.provider_request_id is None:  # Gemini sends no request-id header
                    meter.note_provider_id(chunk.response_id)
                for candidate in (chunk.candidates or [])[:1]:
                    if candidate.finish_reason is not None:
                        finish = str(candidate.finish_reason.value)
                    content_parts = candidate.content.parts if candidate.content else None
                    for part in content_parts or ():
                        text = _add_part(parts, part)
                        if text:
                            await on_text(text)
        except errors.APIError as exc:
            raise ProviderFailure(f"{self._endpoint.provider} HTTP {exc.code}: {exc.message or exc.status}") from exc
        except httpx.HTTPError as exc:
            raise ProviderFailure(f"{self._endpoint.provider} {type(exc).__name__}: {exc}") from exc
        calls = tuple(
            ToolCall(id=p["functionCall"]["id"], name=p["functionCall"]["name"], arguments=p["functionCall"]["args"])
            for p in parts
            if "functionCall" in p
        )
        signed = any("thoughtSignature" in p for p in parts)
        return Generation(
            text="".join(p["text"] for p in parts if "text" in p and not p.get("thought")),
            tool_calls=calls,
            stop_reason="tool_use" if calls else _STOP_REASONS.get(finish, finish.lower()),
            usage=usage,
            replay={"transport": self._endpoint.transport, "parts": parts} if signed else None,
        )

    # Whether file_data may name an https URL: Vertex AI fetches one, the Gemini API takes only
    # its own Files API URIs (an https image there fails the turn before the call).
    takes_image_urls = False

    def _image_part(self, item: Media) -> JSONObject:
        """spec (Gemini Part): inline_data with the bytes (the SDK base64-encodes them), or
        file_data with file_uri where the endpoint fetches URLs."""
        data = image_bytes(item)
        if data is not None:
            return {"inline_data": {"mime_type": item["type"], "data": data}}
        if not self.takes_image_urls:
            raise refuse_image_url(self._endpoint.transport)
        return {"file_data": {"file_uri": item["url"], "mime_type": item["type"]}}

    def _parts(self, message: Any) -> tuple[str, list[JSONObject]]:
        if isinstance(message, UserMessage):
            parts: list[JSONObject] = [{"text": message.text}] if message.text else []
            parts.extend(self._image_part(item) for item in message.media)
            return "user", parts
        if isinstance(message, ToolResult):
            # spec (Gemini function calling): "output" carries the result, "error" a failure.
            key = "error" if message.is_error else "output"
            response = {"id": message.call_id, "name": message.name, "response": {key: message.text}}
            return "user", [{"function_response": response}]
        assert isinstance(message, AssistantMessage)
        if message.replay and message.replay.get("transport") == self._endpoint.transport:
            return "model", [_sdk_part(p) for p in message.replay.get("parts", ())]
        parts = [{"text": message.text}] if message.text else []
        parts.extend({"function_call": {"id": c.id, "name": c.name, "args": c.arguments}} for c in message.tool_calls)
        return "model", parts


class GoogleVertex(GoogleGenerativeAI):
    """Vertex AI express mode: `https://aiplatform.googleapis.com/v1beta1/publishers/google/models/…`."""

    vertexai = True
    api_version = "v1beta1"
    takes_image_urls = True


def _add_part(parts: list[dict[str, Any]], part: Any) -> str:
    """Record one streamed part in wire (camelCase, JSON-safe) form; returns visible text, if any."""
    signature = base64.b64encode(part.thought_signature).decode() if part.thought_signature else None
    if part.function_call is not None:
        call = part.function_call
        entry: dict[str, Any] = {
            # Gemini API calls come without ids; ours go back in the call and its response.
            "functionCall": {
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "name": call.name or "",
                "args": dict(call.args or {}),
            }
        }
        if signature:
            entry["thoughtSignature"] = signature
        parts.append(entry)
        return ""
    text = part.text or ""
    if not text and not signature:
        return ""
    previous = parts[-1] if parts else None
    mergeable = previous is not None and "text" in previous and bool(previous.get("thought")) == bool(part.thought)
    if mergeable and not signature and previous is not None:
        previous["text"] += text
    else:
        entry = {"text": text}
        if part.thought:
            entry["thought"] = True
        if signature:
            entry["thoughtSignature"] = signature
        parts.append(entry)
    return "" if part.thought else text


def _sdk_part(part: dict[str, Any]) -> dict[str, Any]:
    """A recorded part as the SDK takes it: snake_case keys, the signature back to bytes."""
    converted: JSONObject = {}
    if "text" in part:
        converted["text"] = part["text"]
    if part.get("thought"):
        converted["thought"] = True
    if "functionCall" in part:
        converted["function_call"] = part["functionCall"]
    if "thoughtSignature" in part:
        converted["thought_signature"] = base64.b64decode(part["thoughtSignature"])
    return converted
