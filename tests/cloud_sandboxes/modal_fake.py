"""A loopback Modal over gRPC: grpclib serving Modal's own generated service bases. The control
plane (`modal_proto.api_grpc.ModalClientBase`) answers what the SDK's blocking API calls for a V2
sandbox: the app, environment and image look-ups, `AuthTokenGet`, `SandboxCreateV2`,
`SandboxWaitV2` (`from_id` and `poll`), `SandboxGetTaskIdV2`, `SandboxGetCommandRouterAccess` and
`SandboxTerminateV2`. The task command router (`modal_proto.task_command_router_grpc
.TaskCommandRouterBase`, a second server whose plain-http URL and JWT the control plane hands
out) answers `TaskExecStart`, `TaskExecStdioRead` and `TaskExecWait`, running the command on this
machine as the worker runs it inside the sandbox. Every other method answers UNIMPLEMENTED."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpclib.server
from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_grpc, api_pb2, task_command_router_grpc
from modal_proto import task_command_router_pb2 as sr_pb2

TOKEN_ID = "ak-test-0123456789"
TOKEN_SECRET = "as-test-0123456789"
_COMMAND_SECONDS = 60  # no test command runs this long


@dataclass
class _Exec:
    argv: list[str]
    done: asyncio.Future[tuple[bytes, bytes, int]]


@dataclass
class FakeModal:
    calls: list[str] = field(default_factory=list)
    sandboxes: dict[str, api_pb2.GenericResult | None] = field(default_factory=dict)  # None: running
    created: list[Any] = field(default_factory=list)
    requests: dict[str, Any] = field(default_factory=dict)  # the last request of each method
    started: list[list[str]] = field(default_factory=list)  # the argv of each command run
    router_calls: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    tokens_seen: set[tuple[str, str]] = field(default_factory=set)  # every token id and secret received
    drop_exec: bool = False  # the router loses every command's output
    router_url: str = ""
    router_jwt: str = ""
    execs: dict[str, _Exec] = field(default_factory=dict)


def fake_jwt(subject: str = "fake") -> str:
    """An unsigned JWT that expires in an hour (the SDK reads only its `exp`)."""
    parts = [{"alg": "none", "typ": "JWT"}, {"exp": int(time.time()) + 3600, "sub": subject}]
    encoded = [base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode() for part in parts]
    return ".".join([*encoded, "c2ln"])


def _task_id(sandbox_id: str) -> str:
    return f"ta-{sandbox_id}-V"  # the SDK reads a trailing V as a V2 sandbox's task


class _Servicer(api_grpc.ModalClientBase):
    def __init__(self, fake: FakeModal) -> None:
        self.fake = fake

    def _authorized(self, stream: Any) -> None:
        metadata = stream.metadata
        self.fake.tokens_seen.add((str(metadata.get("x-modal-token-id")), str(metadata.get("x-modal-token-secret"))))
        if metadata.get("x-modal-token-id") != TOKEN_ID or metadata.get("x-modal-token-secret") != TOKEN_SECRET:
            raise GRPCError(Status.UNAUTHENTICATED, "invalid token")

    async def _answer(self, stream: Any, name: str, reply: Any) -> Any:
        request = await stream.recv_message()
        self._authorized(stream)
        self.fake.calls.append(name)
        self.fake.requests[name] = request
        await stream.send_message(reply(request))
        return request

    def _known(self, sandbox_id: str) -> str:
        if sandbox_id not in self.fake.sandboxes:
            raise GRPCError(Status.NOT_FOUND, f"sandbox {sandbox_id} not found")
        return sandbox_id

    async def ClientHello(self, stream: Any) -> None:  # noqa: N802
        await self._answer(stream, "ClientHello", lambda request: empty_pb2.Empty())

    async def AppGetOrCreate(self, stream: Any) -> None:  # noqa: N802
        await self._answer(stream, "AppGetOrCreate", lambda request: api_pb2.AppGetOrCreateResponse(app_id="ap-1"))

    async def AuthTokenGet(self, stream: Any) -> None:  # noqa: N802
        reply = api_pb2.AuthTokenGetResponse(token=fake_jwt())
        await self._answer(stream, "AuthTokenGet", lambda request: reply)

    async def EnvironmentGetOrCreate(self, stream: Any) -> None:  # noqa: N802
        settings = api_pb2.EnvironmentSettings(image_builder_version="2025.06")
        metadata = api_pb2.EnvironmentMetadata(name="main", settings=settings)
        reply = api_pb2.EnvironmentGetOrCreateResponse(environment_id="en-1", metadata=metadata)
        await self._answer(stream, "EnvironmentGetOrCreate", lambda request: reply)

    async def ImageGetOrCreate(self, stream: Any) -> None:  # noqa: N802
        success = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)
        reply = api_pb2.ImageGetOrCreateResponse(image_id="im-1", result=success)
        await self._answer(stream, "ImageGetOrCreate", lambda request: reply)

    async def SandboxCreateV2(self, stream: Any) -> None:  # noqa: N802
        sandbox_id = f"sb-v2-{len(self.fake.created) + 1}"  # not the V1 shape: the SDK treats it as V2

        def reply(request: Any) -> api_pb2.SandboxCreateV2Response:
            self.fake.created.append(request)
            self.fake.sandboxes[sandbox_id] = None  # running: no result yet
            return api_pb2.SandboxCreateV2Response(sandbox_id=sandbox_id, task_id=_task_id(sandbox_id))

        await self._answer(stream, "SandboxCreateV2", reply)

    async def SandboxWaitV2(self, stream: Any) -> None:  # noqa: N802
        def reply(request: Any) -> api_pb2.SandboxWaitResponse:
            result = self.fake.sandboxes[self._known(request.sandbox_id)]
            return api_pb2.SandboxWaitResponse(result=result)

        await self._answer(stream, "SandboxWaitV2", reply)

    async def SandboxGetTaskIdV2(self, stream: Any) -> None:  # noqa: N802
        def reply(request: Any) -> api_pb2.SandboxGetTaskIdResponse:
            result = self.fake.sandboxes[self._known(request.sandbox_id)]
            if result is not None:
                return api_pb2.SandboxGetTaskIdResponse(task_result=result)
            return api_pb2.SandboxGetTaskIdResponse(task_id=_task_id(request.sandbox_id))

        await self._answer(stream, "SandboxGetTaskIdV2", reply)

    async def SandboxGetCommandRouterAccess(self, stream: Any) -> None:  # noqa: N802
        def reply(request: Any) -> api_pb2.SandboxGetCommandRouterAccessResponse:
            self._known(request.sandbox_id)
            return api_pb2.SandboxGetCommandRouterAccessResponse(url=self.fake.router_url, jwt=self.fake.router_jwt)

        await self._answer(stream, "SandboxGetCommandRouterAccess", reply)

    async def SandboxTerminateV2(self, stream: Any) -> None:  # noqa: N802
        def reply(request: Any) -> api_pb2.SandboxTerminateResponse:
            self.fake.terminated.append(request.sandbox_id)
            self._known(request.sandbox_id)
            terminated = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED)
            self.fake.sandboxes[request.sandbox_id] = terminated
            return api_pb2.SandboxTerminateResponse()

        await self._answer(stream, "SandboxTerminateV2", reply)


class _Router(task_command_router_grpc.TaskCommandRouterBase):
    """The worker's command router: the bearer JWT the control plane handed out, then the exec."""

    def __init__(self, fake: FakeModal) -> None:
        self.fake = fake

    async def _request(self, stream: Any, name: str) -> Any:
        request = await stream.recv_message()
        if stream.metadata.get("authorization") != f"Bearer {self.fake.router_jwt}":
            raise GRPCError(Status.UNAUTHENTICATED, "invalid router token")
        self.fake.router_calls.append(name)
        return request

    def _exec(self, request: Any) -> _Exec:
        running = self.fake.execs.get(request.exec_id)
        if running is None:
            raise GRPCError(Status.NOT_FOUND, f"exec {request.exec_id} not found")
        return running

    async def TaskExecStart(self, stream: Any) -> None:  # noqa: N802
        request = await self._request(stream, "TaskExecStart")
        if request.exec_id not in self.fake.execs:  # the exec id is the SDK's idempotency key
            argv = list(request.command_args)
            self.fake.started.append(argv)
            done = asyncio.get_running_loop().create_future()
            self.fake.execs[request.exec_id] = _Exec(argv, done)
            asyncio.get_running_loop().create_task(_run(argv, done))
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    async def TaskExecStdioRead(self, stream: Any) -> None:  # noqa: N802
        request = await self._request(stream, "TaskExecStdioRead")
        stdout, stderr, _ = await self._exec(request).done
        if self.fake.drop_exec:
            raise GRPCError(Status.DATA_LOSS, "the output is lost")
        stdout_fd = sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT
        data = (stdout if request.file_descriptor == stdout_fd else stderr)[request.offset :]
        if data:
            await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=data))

    async def TaskExecWait(self, stream: Any) -> None:  # noqa: N802
        request = await self._request(stream, "TaskExecWait")
        _, _, code = await self._exec(request).done
        if code < 0:
            await stream.send_message(sr_pb2.TaskExecWaitResponse(signal=-code))
        else:
            await stream.send_message(sr_pb2.TaskExecWaitResponse(code=code))


async def _run(argv: list[str], done: asyncio.Future[tuple[bytes, bytes, int]]) -> None:
    process = await asyncio.create_subprocess_exec(*argv, stdout=PIPE, stderr=PIPE, stdin=DEVNULL)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=_COMMAND_SECONDS)
    done.set_result((stdout, stderr, process.returncode or 0))


def _unimplemented(name: str) -> Any:
    async def answer(self: object, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, f"{name} is not in the fake")

    return answer


# Every method of Modal's services not written above answers UNIMPLEMENTED (what the SDK's own
# `modal._utils.grpc_testing.patch_mock_servicer` does; it walks dir() of the class, which fails
# under pytest here, so the abstract methods are filled in directly).
for _service in (_Servicer, _Router):
    for _name in _service.__abstractmethods__:
        setattr(_service, _name, _unimplemented(_name))
    _service.__abstractmethods__ = frozenset()


@contextmanager
def serve_modal(fake: FakeModal) -> Iterator[str]:
    """The control plane's URL on 127.0.0.1 (the command router beside it, on its own port), both
    servers built and run on their own thread's event loop."""
    loop = asyncio.new_event_loop()
    ready: list[tuple[list[grpclib.server.Server], int]] = []
    started = threading.Event()

    async def listen(server: grpclib.server.Server) -> int:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        await server.start(sock=listener)
        return int(listener.getsockname()[1])

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            # abstract methods were filled in above, after mypy's view of the classes
            control = grpclib.server.Server([_Servicer(fake)])  # type: ignore[abstract]
            router = grpclib.server.Server([_Router(fake)])  # type: ignore[abstract]
            port = await listen(control)
            fake.router_url = f"http://127.0.0.1:{await listen(router)}"
            fake.router_jwt = fake_jwt("router")
            ready.append(([control, router], port))
            started.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    servers, port = ready[0]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for server in servers:
            loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
