"""A loopback Modal control plane over gRPC: grpclib serving Modal's own generated service base
(`modal_proto.api_grpc.ModalClientBase`), with the calls a create makes up to the sandbox itself;
every other method answers UNIMPLEMENTED."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpclib.server
from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_grpc, api_pb2

TOKEN_ID = "ak-test-0123456789"
TOKEN_SECRET = "as-test-0123456789"


@dataclass
class FakeModal:
    calls: list[str] = field(default_factory=list)
    sandboxes: dict[str, Any] = field(default_factory=dict)
    created: list[Any] = field(default_factory=list)
    requests: dict[str, Any] = field(default_factory=dict)  # the last request of each method


def fake_jwt() -> str:
    """An unsigned JWT that expires in an hour (the SDK reads only its `exp`)."""
    parts = [{"alg": "none", "typ": "JWT"}, {"exp": int(time.time()) + 3600, "sub": "fake"}]
    encoded = [base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode() for part in parts]
    return ".".join([*encoded, "c2ln"])


class _Servicer(api_grpc.ModalClientBase):
    def __init__(self, fake: FakeModal) -> None:
        self.fake = fake

    def _authorized(self, stream: Any) -> None:
        metadata = stream.metadata
        if metadata.get("x-modal-token-id") != TOKEN_ID or metadata.get("x-modal-token-secret") != TOKEN_SECRET:
            raise GRPCError(Status.UNAUTHENTICATED, "invalid token")

    async def _answer(self, stream: Any, name: str, reply: Any) -> Any:
        request = await stream.recv_message()
        self._authorized(stream)
        self.fake.calls.append(name)
        self.fake.requests[name] = request
        await stream.send_message(reply(request))
        return request

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

    async def SandboxCreate(self, stream: Any) -> None:  # noqa: N802
        sandbox_id = f"sb-{len(self.fake.created) + 1}"
        request = await self._answer(
            stream, "SandboxCreate", lambda request: api_pb2.SandboxCreateResponse(sandbox_id=sandbox_id)
        )
        self.fake.created.append(request)
        self.fake.sandboxes[sandbox_id] = None  # running: no result yet


def _unimplemented(name: str) -> Any:
    async def answer(self: _Servicer, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, f"{name} is not in the fake")

    return answer


# Every method of Modal's service not written above answers UNIMPLEMENTED (what the SDK's own
# `modal._utils.grpc_testing.patch_mock_servicer` does; it walks dir() of the class, which fails
# under pytest here, so the abstract methods are filled in directly).
for _name in _Servicer.__abstractmethods__:
    setattr(_Servicer, _name, _unimplemented(_name))
_Servicer.__abstractmethods__ = frozenset()


@contextmanager
def serve_modal(fake: FakeModal) -> Iterator[str]:
    """The fake on 127.0.0.1, its server built and run on its own thread's event loop."""
    loop = asyncio.new_event_loop()
    ready: list[tuple[grpclib.server.Server, int]] = []
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            # abstract methods were filled in above, after mypy's view of the class
            server = grpclib.server.Server([_Servicer(fake)])  # type: ignore[abstract]
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            await server.start(sock=listener)
            ready.append((server, listener.getsockname()[1]))
            started.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    server, port = ready[0]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
