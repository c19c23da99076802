"""`bedrock-converse-stream`: Amazon Bedrock's Converse API (`ConverseStream`) via boto3.

Credentials come only from the session's `api_key`, never from the environment or AWS config files:
`ACCESS_KEY_ID:SECRET_ACCESS_KEY` or `ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN` signs requests
with SigV4; anything else is a Bedrock API key, sent as a bearer token. The region comes from the
base URL (`https://bedrock-runtime.REGION.amazonaws.com`), else `us-east-1`; the base URL is the
endpoint. boto3 is blocking, so each stream is read in its own thread and bridged into asyncio;
cancelling the turn shuts the socket down, which ends the read at once.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import threading
from typing import Any

import boto3
import botocore.session
import urllib3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.tokens import FrozenAuthToken

from runners.media import Media
from runners.protocol import JSONObject

from ..errors import ProviderFailure
from ..messages import AssistantMessage, Generation, ModelRequest, ToolCall, ToolResult, Usage, UserMessage
from ..metering import RequestMeter, UsageProfile, token_count
from .base import (
    CONNECT_TIMEOUT,
    MAX_RETRIES,
    OUTPUT_TOKENS,
    READ_TIMEOUT,
    THINKING_BUDGETS,
    Endpoint,
    TextSink,
    image_bytes,
    parse_arguments,
    refuse_image_url,
    tool_result_text,
)

__all__ = ["BedrockConverse", "region_from_url"]

TRANSPORT = "bedrock-converse-stream"
DEFAULT_REGION = "us-east-1"
# Stream events buffered between the reading thread and the loop; the thread waits beyond this.
EVENT_BUFFER = 256
_REGION = re.compile(r"bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com")
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_use",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
_CACHE_POINT = {"cachePoint": {"type": "default"}}
# inputTokens leaves out the cache reads and writes (reported only where a model caches);
# outputTokens counts reasoning, with no count of its own.
USAGE = UsageProfile("bedrock-converse", "separate", "included", ("reasoning_tokens",))


def region_from_url(url: str) -> str:
    match = _REGION.search(url)
    return match.group(1) if match else DEFAULT_REGION


class _BearerToken:
    """botocore token provider holding one Bedrock API key (instead of AWS_BEARER_TOKEN_BEDROCK)."""

    def __init__(self, token: str) -> None:
        self._token = FrozenAuthToken(token)

    def load_token(self, **_kwargs: Any) -> FrozenAuthToken:
        return self._token


class BedrockConverse:
    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._client: Any = None
        self._client_lock = threading.Lock()

    @classmethod
    def create(cls, endpoint: Endpoint, http_client: Any) -> BedrockConverse:
        return cls(endpoint)  # the boto3 client is built on first use, in the reading thread

    def _bedrock_client(self) -> Any:
        """The pooled boto3 client; building it loads service models (blocking, so off the loop)."""
        with self._client_lock:
            if self._client is None:
                self._client = _make_client(self._endpoint)
            return self._client

    def build_body(self, request: ModelRequest) -> JSONObject:
        anthropic = _is_anthropic(request.model)
        turns: list[dict[str, Any]] = []
        for message in request.messages:
            role, blocks = _blocks(message, anthropic=anthropic)
            if not blocks:
                continue
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)  # Converse wants roles to alternate
            else:
                turns.append({"role": role, "content": blocks})
        if anthropic and turns:
            turns[-1]["content"].append(_CACHE_POINT)
        body: JSONObject = {"modelId": request.model, "messages": turns}
        if request.instructions:  # Converse rejects a blank system block
            body["system"] = (
                [{"text": request.instructions}, _CACHE_POINT] if anthropic else [{"text": request.instructions}]
            )
        if request.tools:
            body["toolConfig"] = {"tools": [_tool_spec(t.name, t.description, t.input_schema) for t in request.tools]}
        budget = THINKING_BUDGETS.get(request.reasoning_effort, 0) if anthropic else 0
        if anthropic:
            body["inferenceConfig"] = {"maxTokens": OUTPUT_TOKENS + budget}
        if budget:
            body["additionalModelRequestFields"] = {"thinking": {"type": "enabled", "budget_tokens": budget}}
        elif request.reasoning_effort != "off" and not anthropic:
            body["additionalModelRequestFields"] = {"reasoning_effort": request.reasoning_effort}
        return body

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        meter.expect(USAGE)
        body = self.build_body(request)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=EVENT_BUFFER)
        stopped = threading.Event()
        streams: list[Any] = []

        def put(kind: str, value: Any) -> None:
            if not stopped.is_set():
                asyncio.run_coroutine_threadsafe(events.put((kind, value)), loop).result()

        def read_stream() -> None:
            try:
                response = self._bedrock_client().converse_stream(**body)
                put("metadata", response.get("ResponseMetadata"))
                stream = response["stream"]
                streams.append(stream)
                if stopped.is_set():
                    _abort(stream)
                    return
                for event in stream:
                    if stopped.is_set():
                        return
                    put("event", event)
                put("end", None)
            except Exception as exc:  # supervision boundary of the thread: the loop side raises it
                put("error", exc)

        reader = threading.Thread(target=read_stream, name="bedrock-stream", daemon=True)
        reader.start()
        finished = False
        try:
            accumulator = _Accumulator(meter)
            while True:
                kind, value = await events.get()
                if kind == "metadata":
                    _meter_attempts(meter, value)
                    continue
                if kind == "error":
                    _meter_failure(meter, value)
                    raise _failure(self._endpoint.provider, value) from value
                if kind == "end":
                    finished = True
                    return accumulator.generation()
                text = accumulator.apply(value)
                if text:
                    await on_text(text)
        finally:
            if not finished:
                stopped.set()
                for stream in streams:
                    _abort(stream)
                while not events.empty():  # frees a thread blocked on a full buffer
                    events.get_nowait()


class _Accumulator:
    """Content blocks by index, stop reason and usage, as the Converse stream delivers them."""

    def __init__(self, meter: RequestMeter) -> None:
        self.meter = meter
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stop = "end_turn"
        self.usage = Usage()

    def apply(self, event: dict[str, Any]) -> str:
        """Fold one event in; returns visible text to stream, if any."""
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            tool = start.get("start", {}).get("toolUse")
            if tool:
                self.blocks[start["contentBlockIndex"]] = {
                    "type": "tool",
                    "id": tool["toolUseId"],
                    "name": tool["name"],
                    "input": "",
                }
        elif "contentBlockDelta" in event:
            delta_event = event["contentBlockDelta"]
            delta = delta_event["delta"]
            index = delta_event["contentBlockIndex"]
            if "text" in delta:
                block = self.blocks.setdefault(index, {"type": "text", "text": ""})
                block["text"] += delta["text"]
                return str(delta["text"])
            if "toolUse" in delta:
                self.blocks[index]["input"] += delta["toolUse"].get("input", "")
            elif "reasoningContent" in delta:
                reasoning = delta["reasoningContent"]
                block = self.blocks.setdefault(index, {"type": "reasoning", "text": "", "signature": ""})
                block["text"] += reasoning.get("text", "")
                block["signature"] += reasoning.get("signature", "")
                if "redactedContent" in reasoning:
                    block["redacted"] = base64.b64encode(reasoning["redactedContent"]).decode()
        elif "messageStop" in event:
            self.stop = event["messageStop"].get("stopReason", self.stop)
        elif "metadata" in event:
            usage = event["metadata"].get("usage", {})
            cached = usage.get("cacheReadInputTokens", 0) + usage.get("cacheWriteInputTokens", 0)
            self.usage = Usage(input=usage.get("inputTokens", 0) + cached, output=usage.get("outputTokens", 0))
            self.meter.report(
                {
                    "input_tokens": token_count(usage.get("inputTokens")),
                    "output_tokens": token_count(usage.get("outputTokens")),
                    "cache_read_tokens": token_count(usage.get("cacheReadInputTokens")),
                    "cache_write_tokens": token_count(usage.get("cacheWriteInputTokens")),
                }
            )
        return ""

    def generation(self) -> Generation:
        ordered = [self.blocks[index] for index in sorted(self.blocks)]
        calls = tuple(
            ToolCall(id=b["id"], name=b["name"], arguments=parse_arguments(b["input"]))
            for b in ordered
            if b["type"] == "tool"
        )
        # Only signed or redacted reasoning must go back (Claude checks it); plain reasoning text need not.
        reasoning = [
            _replay_block(b) for b in ordered if b["type"] == "reasoning" and (b["signature"] or "redacted" in b)
        ]
        return Generation(
            text="".join(b["text"] for b in ordered if b["type"] == "text"),
            tool_calls=calls,
            stop_reason="tool_use" if calls else _STOP_REASONS.get(self.stop, self.stop),
            usage=self.usage,
            replay={"transport": TRANSPORT, "blocks": reasoning} if reasoning else None,
        )


def _replay_block(block: JSONObject) -> JSONObject:
    if "redacted" in block:
        return {"redacted": block["redacted"]}
    return {"text": block["text"], "signature": block["signature"]}


def _make_client(endpoint: Endpoint) -> Any:
    core = botocore.session.Session()
    region = region_from_url(endpoint.base_url)
    config = Config(
        region_name=region,
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        retries={"mode": "standard", "total_max_attempts": MAX_RETRIES + 1},
    )
    parts = endpoint.api_key.split(":")
    if len(parts) in (2, 3) and all(parts[:2]):
        session = boto3.session.Session(
            aws_access_key_id=parts[0],
            aws_secret_access_key=parts[1],
            aws_session_token=parts[2] if len(parts) == 3 else None,
            region_name=region,
            botocore_session=core,
        )
        return session.client("bedrock-runtime", endpoint_url=endpoint.base_url, config=config)
    core.register_component("token_provider", _BearerToken(endpoint.api_key))
    session = boto3.session.Session(region_name=region, botocore_session=core)
    return session.client(
        "bedrock-runtime", endpoint_url=endpoint.base_url, config=config.merge(Config(signature_version="bearer"))
    )


def _meter_attempts(meter: RequestMeter, metadata: object) -> None:
    """botocore's ResponseMetadata: the retries it made before this response, and its request id."""
    if isinstance(metadata, dict):
        retries = metadata.get("RetryAttempts")
        meter.attempts = 1 + (retries if isinstance(retries, int) and retries >= 0 else 0)
        meter.note_provider_id(metadata.get("RequestId"))


def _meter_failure(meter: RequestMeter, exc: BaseException) -> None:
    if meter.attempts:
        return  # the stream had begun: its response metadata counted the attempts
    if isinstance(exc, ClientError):  # the provider refused: its metadata says how often it was asked
        _meter_attempts(meter, exc.response.get("ResponseMetadata"))
    elif isinstance(exc, HTTPClientError | BotoConnectionError):
        meter.attempts = meter.allowed_attempts  # botocore retries connection failures until none are left


def _abort(stream: Any) -> None:
    """Shut the stream's socket down: unlike close(), this wakes a read blocked in another thread."""
    raw = getattr(stream, "_raw_stream", None)
    connection = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the other side
    stream.close()


def _failure(provider: str, exc: BaseException) -> ProviderFailure:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        prefix = f"{provider} HTTP {status}" if status else f"{provider} stream error"
        return ProviderFailure(f"{prefix}: {error.get('Code', 'Error')}: {error.get('Message') or exc}")
    if isinstance(exc, BotoCoreError | urllib3.exceptions.HTTPError | OSError):
        return ProviderFailure(f"{provider} {type(exc).__name__}: {exc}")
    raise exc  # not a provider failure: a bug, reported as brain_error


def _is_anthropic(model: str) -> bool:
    return "anthropic." in model or model.startswith("anthropic")


def _tool_spec(name: str, description: str, schema: JSONObject) -> JSONObject:
    spec: JSONObject = {"name": name, "inputSchema": {"json": schema}}
    if description:
        spec["description"] = description  # Converse rejects an empty description
    return {"toolSpec": spec}


def _image_block(item: Media) -> JSONObject:
    """spec (Converse ImageBlock): format and source.bytes (boto3 base64-encodes them); Bedrock
    fetches no URLs, so an https image fails the turn before the call."""
    data = image_bytes(item)
    if data is None:
        raise refuse_image_url(TRANSPORT)
    return {"image": {"format": item["type"].removeprefix("image/"), "source": {"bytes": data}}}


def _blocks(message: Any, *, anthropic: bool) -> tuple[str, list[JSONObject]]:
    if isinstance(message, UserMessage):
        blocks: list[JSONObject] = [{"text": message.text}] if message.text else []
        blocks.extend(_image_block(item) for item in message.media)
        return "user", blocks
    if isinstance(message, ToolResult):
        # Only Claude models accept a result `status`; the others see failures as `Error: …` text.
        text = message.text if anthropic else tool_result_text(message)
        result: JSONObject = {"toolUseId": message.call_id, "content": [{"text": text or "(no output)"}]}
        if anthropic:
            result["status"] = "error" if message.is_error else "success"
        return "user", [{"toolResult": result}]
    assert isinstance(message, AssistantMessage)
    blocks = []
    if message.replay and message.replay.get("transport") == TRANSPORT:
        for block in message.replay.get("blocks", ()):
            if "redacted" in block:
                blocks.append({"reasoningContent": {"redactedContent": base64.b64decode(str(block["redacted"]))}})
            else:
                blocks.append({"reasoningContent": {"reasoningText": dict(block)}})
    if message.text:
        blocks.append({"text": message.text})
    blocks.extend({"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}} for c in message.tool_calls)
    return "assistant", blocks
