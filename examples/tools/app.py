"""The example tool service: `echo` (JSON), `inspect_session` (reads the calling session through
Brain's delegated inspection token) and `ask_approval` (SSE progress until an operator answers).

A plain ASGI app with no framework; Brain's identity envelope is documented in the tools guide.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["APPROVAL_SECONDS", "MAX_PENDING", "ToolService", "tool_bindings"]

APPROVAL_SECONDS = 300.0  # an unanswered approval expires after 5 minutes
MAX_PENDING = 32  # at most this many approvals wait at once; more are refused as tool errors
PROGRESS_SECONDS = 10.0  # a progress event this often keeps the stream visibly alive
MAX_BODY_BYTES = 1 << 20  # Brain's requests carry arguments of at most a few KiB
INSPECT_EVENTS = 20  # recent events inspect_session reports by default
INSPECT_PAGES = 50  # pages of 100 events read at most while looking for the recent ones

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def tool_bindings(base_url: str, *, tenant: str = "local", token_env: str = "BRAIN_TOOLS_KEY") -> list[dict[str, Any]]:
    """Host-config bindings for this service's three tools at `base_url`."""
    common = {"token_env": token_env, "tenants": [tenant]}
    return [
        {
            "name": "echo",
            "description": "Echo text through an external tool service.",
            "input_schema": {
                "type": "object",
                "properties": {"text": {"type": "string", "maxLength": 4096}},
                "required": ["text"],
                "additionalProperties": False,
            },
            "url": f"{base_url}/tools/echo",
            **common,
            "timeout_seconds": 300,
            "max_output_bytes": 1048576,
        },
        {
            "name": "inspect_session",
            "description": "Read this session's status and its most recent events.",
            "input_schema": {
                "type": "object",
                "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                "additionalProperties": False,
            },
            "url": f"{base_url}/tools/inspect_session",
            **common,
            "inspect_session": True,
            "timeout_seconds": 60,
        },
        {
            "name": "ask_approval",
            "description": "Ask a human operator to approve or deny something; waits up to 5 minutes.",
            "input_schema": {
                "type": "object",
                "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 2048}},
                "required": ["question"],
                "additionalProperties": False,
            },
            "url": f"{base_url}/tools/ask_approval",
            **common,
            "timeout_seconds": 360,
        },
    ]


@dataclass
class Approval:
    call_id: str
    tenant_id: str
    session_id: str
    question: str
    created_at: float
    expires_at: float
    answer: asyncio.Future[bool] = field(repr=False)

    def as_wire(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tenant_id": self.tenant_id,
            "session_id": self.session_id,
            "question": self.question,
            "created_at": _iso(self.created_at),
            "expires_at": _iso(self.expires_at),
        }


def _iso(moment: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


def _text(text: str, *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if error:
        result["is_error"] = True
    return result


class _BadRequest(Exception):
    pass


class ToolService:
    def __init__(
        self,
        *,
        tools_key: str,
        approval_key: str,
        approval_seconds: float = APPROVAL_SECONDS,
        progress_seconds: float = PROGRESS_SECONDS,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.tools_key = tools_key
        self.approval_key = approval_key
        self.approval_seconds = approval_seconds
        self.progress_seconds = progress_seconds
        self.max_pending = max_pending
        self.pending: dict[str, Approval] = {}
        self._brain: httpx.AsyncClient | None = None

    def _brain_client(self) -> httpx.AsyncClient:
        if self._brain is None:
            self._brain = httpx.AsyncClient(timeout=httpx.Timeout(10.0), follow_redirects=False)
        return self._brain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        try:
            if path == "/health" and method == "GET":
                await _json(send, 200, {"status": "ok"})
            elif path.startswith("/tools/"):
                if method != "POST":
                    await _json(send, 405, {"error": "method not allowed"})
                elif not _authorized(headers, self.tools_key):
                    await _json(send, 401, {"error": "unauthorized"})
                else:
                    await self._tool(path.removeprefix("/tools/"), await _body(receive), receive, send)
            elif path == "/approvals" or path.startswith("/approvals/"):
                if not _authorized(headers, self.approval_key):
                    await _json(send, 401, {"error": "unauthorized"})
                elif path == "/approvals" and method == "GET":
                    await _json(send, 200, {"approvals": [item.as_wire() for item in self.pending.values()]})
                elif path != "/approvals" and method == "POST":
                    await self._answer(path.removeprefix("/approvals/"), await _body(receive), send)
                else:
                    await _json(send, 405, {"error": "method not allowed"})
            else:
                await _json(send, 404, {"error": "not found"})
        except _BadRequest as exc:
            await _json(send, 400, {"error": str(exc)})

    async def _tool(self, name: str, envelope: dict[str, Any], receive: Receive, send: Send) -> None:
        for key in ("tenant_id", "session_id", "call_id"):
            if not isinstance(envelope.get(key), str):
                raise _BadRequest(f"{key} is required")
        arguments = envelope.get("arguments")
        if not isinstance(arguments, dict):
            raise _BadRequest("arguments must be an object")
        if name == "echo":
            await _json(send, 200, _text(str(arguments.get("text", ""))))
        elif name == "inspect_session":
            await _json(send, 200, await self._inspect(envelope, arguments))
        elif name == "ask_approval":
            await self._ask(envelope, arguments, receive, send)
        else:
            await _json(send, 404, {"error": f"unknown tool {name}"})

    async def _inspect(self, envelope: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
        token, brain_url = envelope.get("inspection_token"), envelope.get("brain_url")
        if not token or not brain_url:
            return _text("this binding does not set inspect_session: no inspection token", error=True)
        limit = arguments.get("limit", INSPECT_EVENTS)
        client = self._brain_client()
        headers = {"Authorization": f"Bearer {token}"}
        base = f"{str(brain_url).rstrip('/')}/sessions/{envelope['session_id']}"
        try:
            session = await client.get(base, headers=headers)
            if session.status_code != 200:
                return _text(f"Brain refused the inspection token (HTTP {session.status_code})", error=True)
            recent: list[dict[str, Any]] = []
            after = ""
            for _ in range(INSPECT_PAGES):
                page = await client.get(f"{base}/events", params={"after": after, "limit": 100}, headers=headers)
                if page.status_code != 200:
                    return _text(f"Brain refused the event history (HTTP {page.status_code})", error=True)
                body = page.json()
                recent = (recent + body["events"])[-limit:]
                if not body["events"] or not body.get("next_cursor"):
                    break
                after = body["next_cursor"]
        except httpx.HTTPError as exc:
            return _text(f"could not reach Brain at brain_url: {type(exc).__name__}", error=True)
        status = session.json()["status"]
        events = [{"type": event["type"], "id": event["id"]} for event in recent]
        summary = ", ".join(event["type"] for event in events) or "none"
        return {
            "content": [{"type": "text", "text": f"Session status: {status}. Recent events: {summary}."}],
            "structured_content": {"status": status, "events": events},
        }

    async def _ask(self, envelope: dict[str, Any], arguments: dict[str, Any], receive: Receive, send: Send) -> None:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            await _json(send, 200, _text("question must be a non-empty string", error=True))
            return
        call_id = envelope["call_id"]
        if call_id in self.pending:
            await _json(send, 200, _text("this call already waits for an operator", error=True))
            return
        if len(self.pending) >= self.max_pending:
            await _json(send, 200, _text(f"too many pending approvals (at most {self.max_pending})", error=True))
            return
        now = time.time()
        approval = Approval(
            call_id=call_id,
            tenant_id=envelope["tenant_id"],
            session_id=envelope["session_id"],
            question=question,
            created_at=now,
            expires_at=now + self.approval_seconds,
            answer=asyncio.get_running_loop().create_future(),
        )
        self.pending[call_id] = approval
        watcher = asyncio.get_running_loop().create_task(_until_disconnect(receive))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
                }
            )
            result = await self._wait(approval, watcher, send)
            self.pending.pop(call_id, None)  # settled before its result is out: a listing never shows it
            if result is not None:
                await _event(send, "result", result)
                await send({"type": "http.response.body", "body": b""})
        except OSError:
            pass  # the client went away while we wrote
        finally:
            watcher.cancel()
            self.pending.pop(call_id, None)

    async def _wait(self, approval: Approval, watcher: asyncio.Task[None], send: Send) -> dict[str, Any] | None:
        """The result to send, or None when Brain dropped the stream (interrupt or close)."""
        while True:
            left = approval.expires_at - time.time()
            if left <= 0:
                return _text("No operator answered within the approval window; treat this as denied.", error=True)
            progress = {"status": "waiting_for_operator", "call_id": approval.call_id, "expires_in": round(left)}
            await _event(send, "progress", progress)
            waiters: set[asyncio.Future[Any]] = {approval.answer, watcher}
            done, _ = await asyncio.wait(
                waiters,
                timeout=min(left, self.progress_seconds),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if watcher in done:
                return None
            if approval.answer in done:
                if approval.answer.result():
                    return _text(f"Operator approved: {approval.question}")
                return _text(f"Operator denied: {approval.question}", error=True)

    async def _answer(self, call_id: str, body: dict[str, Any], send: Send) -> None:
        if set(body) != {"approved"} or not isinstance(body["approved"], bool):
            raise _BadRequest('body must be {"approved": true|false}')
        approval = self.pending.get(call_id)
        if approval is None or approval.answer.done():
            await _json(send, 404, {"error": "no pending approval with that call_id"})
            return
        approval.answer.set_result(body["approved"])
        await _json(send, 200, {"call_id": call_id, "approved": body["approved"]})


def _authorized(headers: dict[str, str], key: str) -> bool:
    return hmac.compare_digest(headers.get("authorization", "").encode(), f"Bearer {key}".encode())


async def _body(receive: Receive) -> dict[str, Any]:
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if len(raw) > MAX_BODY_BYTES:
            raise _BadRequest("body too large")
        if not message.get("more_body"):
            break
    try:
        value = json.loads(raw)
    except ValueError:
        raise _BadRequest("body must be JSON") from None
    if not isinstance(value, dict):
        raise _BadRequest("body must be a JSON object")
    return value


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _json(send: Send, status: int, value: Any) -> None:
    body = json.dumps(value).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _event(send: Send, name: str, data: Any) -> None:
    frame = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    await send({"type": "http.response.body", "body": frame, "more_body": True})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
