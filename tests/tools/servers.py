"""Real tool services on loopback for the tool tests: a uvicorn server per app, in a thread.

`ToolZoo` is one ASGI app whose paths behave like well- and ill-behaved tool services; it
records every request it receives so tests can assert what was (not) dispatched.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import uvicorn

from tests.fixtures.ports import free_port

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LoopbackServer:
    """uvicorn serving `app` on 127.0.0.1 from a daemon thread (its own event loop)."""

    def __init__(self, app: Any, *, lifespan: Literal["auto", "on", "off"] = "off") -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan=lifespan,
            http="h11",
            loop="asyncio",
            timeout_keep_alive=30,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("loopback server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ToolZoo:
    """Paths: /echo, /reply (status/content_type/body from arguments), /sse (events from
    arguments), /stall (no headers for `seconds`), /slow (headers, then silence), /redirect,
    /status/500, /big (n bytes of text), /identity (returns what it received)."""

    received: list[Received] = field(default_factory=list)

    def calls(self, path: str) -> list[Received]:
        return [item for item in self.received if item.path == path]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {key.decode(): value.decode() for key, value in scope["headers"]}
        body = json.loads(raw) if raw else {}
        path = urlsplit(scope["path"]).path or "/"  # a forward proxy sees absolute-form targets
        self.received.append(Received(path, headers, body))
        arguments = body.get("arguments", {}) if isinstance(body, dict) else {}
        if path == "/echo":
            await _json(send, {"content": [{"type": "text", "text": arguments.get("text", "")}]})
        elif path == "/identity":
            await _json(
                send,
                {"content": [{"type": "text", "text": "ok"}], "structured_content": {"headers": headers, "body": body}},
            )
        elif path == "/reply":
            await _raw(
                send,
                arguments.get("status", 200),
                arguments.get("content_type", "application/json"),
                arguments["body"].encode(),
            )
        elif path == "/sse":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            for chunk in arguments["chunks"]:
                await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
                await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": b""})
        elif path == "/stall":
            await asyncio.sleep(arguments.get("seconds", 60))
            await _json(send, {"content": [{"type": "text", "text": "late"}]})
        elif path == "/slow":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send({"type": "http.response.body", "body": b": started\n\n", "more_body": True})
            await asyncio.sleep(arguments.get("seconds", 60))
            await send({"type": "http.response.body", "body": b""})
        elif path == "/redirect":
            await send({"type": "http.response.start", "status": 307, "headers": [(b"location", b"/echo")]})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/status/500":
            await _raw(send, 500, "application/json", b'{"content":[{"type":"text","text":"ignored"}],"is_error":true}')
        elif path == "/inspect":
            # What an inspection token may do during the call: read its session, nothing else.
            base, token = body["brain_url"], body["inspection_token"]
            auth = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=base, headers=auth, timeout=10) as client:
                own = await client.get(f"/sessions/{body['session_id']}")
                events = await client.get(f"/sessions/{body['session_id']}/events")
                other = await client.get(f"/sessions/{arguments['other']}")
                listing = await client.get("/sessions")
                write = await client.post(f"/sessions/{body['session_id']}/events", json={"type": "user.interrupt"})
                await _json(
                    send,
                    {
                        "structured_content": {
                            "own": own.status_code,
                            "status": own.json().get("status"),
                            "events": events.status_code,
                            "other": other.status_code,
                            "listed": [item["id"] for item in listing.json().get("sessions", [])],
                            "write": write.status_code,
                        }
                    },
                )
        elif path == "/big":
            await _json(send, {"content": [{"type": "text", "text": "x" * arguments.get("n", 0)}]})
        else:
            await _raw(send, 404, "text/plain", b"no such tool")


async def _raw(send: Send, status: int, content_type: str, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, value: Any) -> None:
    await _raw(send, 200, "application/json", json.dumps(value).encode())
