"""A plain REST service on loopback for the declarative REST tool tests (served by LoopbackServer).

Paths: /items/... (answers with what it received as JSON, all but the Authorization header),
/text, /status/<code>, /stall?seconds=, /redirect, /big?n=, /empty, /badjson. Every request is
recorded, so tests can assert what was (not) sent.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from tests.tools.servers import Receive, Scope, Send


@dataclass
class RestRequest:
    method: str
    path: str  # decoded, as the ASGI scope gives it
    raw_path: str  # as sent on the wire
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class RestService:
    received: list[RestRequest] = field(default_factory=list)

    def requests(self, prefix: str) -> list[RestRequest]:
        return [item for item in self.received if item.path.startswith(prefix)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        raw_path = scope.get("raw_path", b"").decode()
        path = urlsplit(scope["path"]).path or "/"  # a forward proxy sees absolute-form targets
        query = parse_qsl(scope["query_string"].decode(), keep_blank_values=True)
        headers = {key.decode(): value.decode() for key, value in scope["headers"]}
        request = RestRequest(scope["method"], path, raw_path, query, headers, raw)
        self.received.append(request)
        arguments = dict(query)
        if path.startswith("/items"):
            body = json.loads(raw) if raw else None
            await _send(
                send,
                200,
                "application/json",
                json.dumps(
                    {
                        "method": request.method,
                        "path": path,
                        "raw_path": raw_path,
                        "query": query,
                        # the credential stays out of the answer, so a leak would be Brain's own
                        "headers": {key: value for key, value in headers.items() if key != "authorization"},
                        "body": body,
                    }
                ).encode(),
            )
        elif path == "/text":
            await _send(send, 200, "text/plain; charset=utf-8", "plain words ✓".encode())
        elif path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
            body = json.dumps({"error": "no such order", "code": status}, separators=(",", ":")).encode()
            await _send(send, status, "application/json", body)
        elif path == "/stall":
            await asyncio.sleep(float(arguments.get("seconds", "60")))
            await _send(send, 200, "text/plain", b"late")
        elif path == "/redirect":
            await send({"type": "http.response.start", "status": 302, "headers": [(b"location", b"/items/moved")]})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/big":
            await _send(send, 200, "application/json", json.dumps("x" * int(arguments.get("n", "0"))).encode())
        elif path == "/empty":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/badjson":
            await _send(send, 200, "application/json", b"{not json")
        else:
            await _send(send, 404, "text/plain", b"not here")


async def _send(send: Send, status: int, content_type: str, body: bytes) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
