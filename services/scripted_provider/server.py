"""A small asyncio HTTP/1.1 server in front of the script: model routes, request log, controls.

Routes: POST `…/chat/completions`, `…/responses`, `…/messages`, `/model/{id}/converse-stream`,
`…/models/{model}:streamGenerateContent` (any prefix, any model name), and under a marked prefix
`…/mistral/…/chat/completions` (Mistral), `…/radius/…/messages` (Pi's messages),
`…/codex/responses` (the ChatGPT backend's Responses);
GET `/_requests` (every model request received, oldest first); POST `/_reset` (clear the log);
POST `/_script` (replace the rules); GET `/_health`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any

from .script import Plan, Script, parse_script
from .views import (
    find_header_error,
    find_request_error,
    find_wire,
    parse_json_body,
    request_model,
    streams,
    view_request,
)
from .wire import (
    IdSource,
    error_body,
    error_event,
    error_headers,
    render_json,
    render_stream,
    request_headers,
    stream_content_type,
)

__all__ = ["ScriptedProvider", "serve"]

# Request heads and bodies beyond these are refused; model requests in tests stay far below.
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
# Servers answer 429/5xx with this hint; the SDKs honour it, which keeps their retries fast.
RETRY_AFTER_MS = 20
# Headers worth keeping in the request log (the key shows which credential the client sent).
_LOGGED_HEADERS = (
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "anthropic-version",
    "content-type",
    "x-amz-date",
    "chatgpt-account-id",
    "openai-beta",
    "originator",
    "session_id",
    "x-affinity",
    "accept",
)

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    411: "Length Required",
    413: "Payload Too Large",
}


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class ScriptedProvider:
    """Holds the script and the request log; one instance serves every connection."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.ids = IdSource()
        self._connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    async def close_connections(self) -> None:
        """Hang up on every client and wait for the handlers: a quiet shutdown, nothing cancelled."""
        for writer in self._connections.values():
            writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # always called inside the connection's task
        self._connections[task] = writer
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                keep_alive = await self._respond(request, reader, writer)
                if not keep_alive or request.headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            print(f"scripted provider: connection dropped: {exc!r}", file=sys.stderr)
        finally:
            writer.close()
            self._connections.pop(task, None)

    async def _respond(self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        path = request.path.split("?", 1)[0].rstrip("/")
        if request.method == "GET" and path == "/_requests":
            return await _send_json(writer, 200, self.requests)
        if request.method == "GET" and path == "/_health":
            return await _send_json(writer, 200, {"ok": True})
        if request.method == "POST" and path == "/_reset":
            self.requests.clear()
            return await _send_json(writer, 200, {"ok": True})
        if request.method == "POST" and path == "/_script":
            self.script = parse_script(parse_json_body(request.body))
            return await _send_json(writer, 200, {"ok": True})
        wire = find_wire(path)
        if request.method != "POST" or wire is None:
            return await _send_json(writer, 404, {"error": {"message": f"no route {request.method} {path}"}})
        try:
            body = parse_json_body(request.body)
        except ValueError as exc:
            return await _send_json(writer, 400, error_body(wire, 400, f"invalid JSON body: {exc}"))
        headers = {name: request.headers[name] for name in _LOGGED_HEADERS if name in request.headers}
        request_id = self.ids.next("req")
        entry: dict[str, Any] = {
            "path": path,
            "wire": wire,
            "headers": headers,
            "body": body,
            "tools": [],
            "request_id": request_id,
        }
        self.requests.append(entry)
        named = request_headers(wire, request_id)
        refused = find_header_error(wire, request.headers)
        if refused is not None:
            return await _send_json(writer, 401, error_body(wire, 401, refused), named)
        problem = find_request_error(wire, body)
        if problem is not None:
            return await _send_json(writer, 400, error_body(wire, 400, problem), {**named, **error_headers(wire, 400)})
        model = request_model(wire, path, body)
        view = view_request(wire, body, body_size=len(request.body), model=model)
        entry["tools"] = list(view.tool_names)
        plan = self.script.plan(view)
        if plan.fail_status:
            extra = {"retry-after-ms": str(RETRY_AFTER_MS), **named, **error_headers(wire, plan.fail_status)}
            return await _send_json(
                writer, plan.fail_status, error_body(wire, plan.fail_status, plan.fail_message), extra
            )
        if not streams(wire, body):
            return await _send_json(writer, 200, render_json(wire, plan, model, self.ids), named)
        steps = render_stream(wire, plan, model, self.ids, request_id=request_id)
        return await _stream(writer, reader, wire, plan, steps, named)


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed a kept-alive connection
    except asyncio.LimitOverrunError as exc:
        raise ValueError("request head too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY_BYTES:
            raise ValueError("request body too large")
        body = await reader.readexactly(length)
    return _Request(method=method, path=path, headers=headers, body=body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append((await reader.readexactly(size + 2))[:-2])


async def _send_json(
    writer: asyncio.StreamWriter, status: int, value: Any, extra_headers: dict[str, str] | None = None
) -> bool:
    payload = json.dumps(value).encode()
    headers = {"content-type": "application/json", "content-length": str(len(payload)), **(extra_headers or {})}
    writer.write(_head(status, headers) + payload)
    await writer.drain()
    return True


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = _REASONS.get(status, "Error")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _stream(
    writer: asyncio.StreamWriter,
    reader: asyncio.StreamReader,
    wire: str,
    plan: Plan,
    steps: list[Any],
    extra_headers: dict[str, str],
) -> bool:
    """Send stream steps (SSE or event-stream) chunked; returns False when the connection must close."""
    headers = {
        "content-type": stream_content_type(wire),
        "cache-control": "no-cache",
        "transfer-encoding": "chunked",
        **extra_headers,
    }
    writer.write(_head(200, headers))
    seen_text = False
    for step in steps:
        if step.is_text_delta and seen_text and plan.delay_ms:
            await asyncio.sleep(plan.delay_ms / 1000)
        writer.write(_chunk(step.data))
        await writer.drain()
        if step.is_text_delta and not seen_text:
            seen_text = True
            if plan.stall:
                await reader.read()  # nothing more is sent; wait for the client to hang up
                return False
            if plan.break_stream:
                writer.write(_chunk(error_event(wire, "scripted mid-stream failure", plan=plan)) + _chunk(b""))
                await writer.drain()
                return False
    writer.write(_chunk(b""))
    await writer.drain()
    return True


async def serve(provider: ScriptedProvider, *, host: str, port: int) -> asyncio.Server:
    return await asyncio.start_server(provider.handle_connection, host, port, limit=MAX_HEAD_BYTES)
