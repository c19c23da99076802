"""A loopback E2B: the control-plane paths the SDK calls (`/v2/sandboxes`,
`/v2/sandboxes/{id}/connect`, `/sandboxes/{id}`) and envd's Connect `process.Process/Start`
served by the SDK's own generated Connect application, which runs the command on this machine as
envd runs it inside the sandbox (`/bin/bash -l -c`, output streamed back as events)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

import uvicorn
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_pb
from e2b.envd.process.process_connect import ProcessASGIApplication
from protobuf import Oneof

from tests.cloud_sandboxes.http_fake import send_json, serve

API_KEY = "e2b_test_key_0123456789abcdef"
_TIMES = {"startedAt": "2026-01-01T00:00:00Z", "endAt": "2026-01-01T00:05:00Z"}


@dataclass
class FakeE2B:
    sandboxes: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)  # the create bodies
    started: list[list[str]] = field(default_factory=list)  # the argv of each command
    connects: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    keys_seen: set[str] = field(default_factory=set)  # every X-API-Key the control plane received
    drop_exec: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, request: BaseHTTPRequestHandler, method: str, path: str, body: bytes) -> None:
        with self.lock:
            self.keys_seen.add(str(request.headers.get("X-API-Key")))
        if request.headers.get("X-API-Key") != API_KEY:
            send_json(request, 401, {"code": 401, "message": "Invalid API key"})
            return
        parts = path.split("?")[0].strip("/").split("/")
        with self.lock:
            if method == "POST" and parts == ["v2", "sandboxes"]:
                self.created.append(json.loads(body))
                sandbox_id = f"e2b-{len(self.created)}"
                self.sandboxes[sandbox_id] = {"templateID": self.created[-1]["templateID"]}
                send_json(request, 201, self._sandbox(sandbox_id))
            elif parts[:2] == ["v2", "sandboxes"] and parts[3:] == ["connect"] and method == "POST":
                self.connects.append(parts[2])
                self._answer(request, parts[2], lambda sandbox_id: self._sandbox(sandbox_id))
            elif parts[0] == "sandboxes" and len(parts) == 2 and method == "GET":
                self._answer(request, parts[1], self._detail)
            elif parts[0] == "sandboxes" and len(parts) == 2 and method == "DELETE":
                self.killed.append(parts[1])
                if self.sandboxes.pop(parts[1], None) is None:
                    send_json(request, 404, {"code": 404, "message": "sandbox not found"})
                else:
                    request.send_response(204)
                    request.send_header("Content-Length", "0")
                    request.end_headers()
            else:
                send_json(request, 404, {"code": 404, "message": f"no route {method} {path}"})

    def _answer(self, request: BaseHTTPRequestHandler, sandbox_id: str, render: Any) -> None:
        if sandbox_id in self.sandboxes:
            send_json(request, 200 if "connect" not in request.path else 201, render(sandbox_id))
        else:
            send_json(request, 404, {"code": 404, "message": f"sandbox {sandbox_id} not found"})

    def _sandbox(self, sandbox_id: str) -> dict[str, Any]:
        return {
            "templateID": self.sandboxes[sandbox_id]["templateID"],
            "sandboxID": sandbox_id,
            "clientID": "client-1",
            "envdVersion": "0.4.0",
            "envdAccessToken": "envd-token",
        }

    def _detail(self, sandbox_id: str) -> dict[str, Any]:
        return {
            **self._sandbox(sandbox_id),
            **_TIMES,
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": "running",
        }

    # envd's process service (the Connect application calls these)
    async def start(self, request: process_pb.StartRequest, ctx: object) -> AsyncIterator[process_pb.StartResponse]:
        assert request.process is not None
        argv = [request.process.cmd, *request.process.args]
        with self.lock:
            self.started.append(argv)
        process = await asyncio.create_subprocess_exec(*argv, stdout=PIPE, stderr=PIPE, stdin=DEVNULL)
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
        yield _event(Oneof("start", process_pb.ProcessEvent.StartEvent(pid=4242)))
        if self.drop_exec:
            raise ConnectionAbortedError("the answer is lost")
        out: Oneof[Literal["stdout"], bytes] = Oneof("stdout", stdout)
        err: Oneof[Literal["stderr"], bytes] = Oneof("stderr", stderr)
        for output, data in ((out, stdout), (err, stderr)):
            if data:
                yield _event(Oneof("data", process_pb.ProcessEvent.DataEvent(output=output)))
        end = process_pb.ProcessEvent.EndEvent(exit_code=process.returncode or 0, exited=True, status="exited")
        yield _event(Oneof("end", end))


class _Envd:
    """The process service: `start` is the fake's; every other method is unimplemented."""

    def __init__(self, fake: FakeE2B) -> None:
        self.start = fake.start

    def __getattr__(self, name: str) -> Any:
        def unimplemented(*args: object) -> Any:
            raise ConnectError(Code.UNIMPLEMENTED, f"{name} is not in the fake")

        return unimplemented


def _event(event: Any) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=event))


@contextmanager
def serve_e2b(fake: FakeE2B) -> Iterator[tuple[str, str]]:
    """The control plane's and envd's base URLs on 127.0.0.1 (envd under uvicorn: the Connect
    client streams its request body in chunks)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(ProcessASGIApplication(_Envd(fake)), log_level="critical", lifespan="off")
    envd = uvicorn.Server(config)
    thread = threading.Thread(target=envd.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        with serve(fake.handle) as api_url:
            yield api_url, f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        envd.should_exit = True
        thread.join(timeout=10)
        listener.close()
