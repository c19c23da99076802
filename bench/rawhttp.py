"""A deliberately small HTTP/1.1 client for load generation: keep-alive POSTs and SSE reads.

httpx spends more CPU per request than the server under test on a 2-core machine, which would
make the client the bottleneck. This speaks just enough HTTP for the benchmarks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = ["Connection", "SseReader"]

_TURN_ENDS = (b'"status":"idle"', b'"status":"failed"', b'"status":"interrupted"')


class Connection:
    """One keep-alive connection for sequential requests with JSON bodies."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port, self.token = host, port, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        self.writer.write(head.encode() + payload)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length, chunked = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await self.reader.readexactly(length)
        data = b""
        while True:
            size = int((await self.reader.readline()).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                return status, data
            data += chunk[:-2]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class SseReader:
    """An SSE stream; wakes waiters when the status ending their input's turn arrives."""

    def __init__(self, host: str, port: int, token: str, path: str) -> None:
        self.host, self.port, self.token, self.path = host, port, token, path
        self.waiters: dict[str, asyncio.Future[str]] = {}
        self.seen_idle: set[str] = set()
        self.seen_end: dict[str, str] = {}  # input id -> ending status, for turns nobody waits on yet
        self.task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        writer.write(
            (
                f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            ).encode()
        )
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        self.writer = writer
        self.task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        marker = b'"type":"session.status"'
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.startswith(b"data: ") and marker in line and any(end in line for end in _TURN_ENDS):
                    envelope = json.loads(line[6:])
                    input_id, status = envelope.get("input_id", ""), envelope["data"]["status"]
                    waiter = self.waiters.pop(input_id, None)
                    if waiter is not None:
                        waiter.set_result(status)
                    else:
                        self.seen_end[input_id] = status
                        if status == "idle":
                            self.seen_idle.add(input_id)
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            for waiter in self.waiters.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionError("the event stream ended"))
            self.waiters.clear()

    async def wait_end(self, input_id: str) -> str:
        """The status (idle, failed or interrupted) that ended the turn of `input_id`."""
        if input_id in self.seen_end:
            self.seen_idle.discard(input_id)
            return self.seen_end.pop(input_id)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiters[input_id] = future
        return await future

    async def wait_idle(self, input_id: str) -> None:
        status = await self.wait_end(input_id)
        if status != "idle":
            raise RuntimeError(f"turn {input_id} ended {status}")

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.writer.close()
