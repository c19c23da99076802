"""A TCP balancer in front of Brain instances, as a simple cloud balancer behaves: it asks each
instance's `/health/ready` every CHECK_SECONDS, sends each new client connection to the next
ready instance (round robin), and tries another only when the connection is refused. A client
connection stays with its instance for its life (keep-alive requests included), so an instance
that stops must say so (`Connection: close`, readiness 503) before it stops listening.

Runs its own event loop in a thread: `start()`, `url`, `stop()`. Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from dataclasses import dataclass, field

__all__ = ["CHECK_SECONDS", "Balancer"]

CHECK_SECONDS = 0.3
CHECK_TIMEOUT_SECONDS = 1.0  # a health check that takes longer counts as not ready
# A loopback connect is accepted by the kernel at once (a closed listener refuses at once), so only
# this process's own starved loop makes one slow: wait as a cloud balancer does (nginx: 60 s).
CONNECT_SECONDS = 15.0
PIPE_BYTES = 64 * 1024
START_SECONDS = 10.0


@dataclass
class Counts:
    connections: int = 0  # client connections accepted
    refused: int = 0  # connects to an instance refused, retried on another
    unrouted: int = 0  # client connections closed for want of a ready instance
    failed: int = 0  # connects that failed otherwise (timeout, reset): the client's connection closed
    routed: dict[str, int] = field(default_factory=dict)  # backend -> connections sent there


class Balancer:
    def __init__(self, backends: list[str], *, check_seconds: float = CHECK_SECONDS) -> None:
        self.backends = list(backends)  # "host:port" of each instance
        self.check_seconds = check_seconds
        self.ready: dict[str, bool] = dict.fromkeys(self.backends, False)
        self.counts = Counts()
        self.port = 0
        self._turn = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._piping: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="balancer", daemon=True)
        self._thread.start()
        if not self._started.wait(START_SECONDS):
            raise RuntimeError("the test balancer did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(START_SECONDS)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)  # a stream writer closed late asks the thread for its loop
        try:
            self._loop.run_until_complete(self._serve())
            pending = asyncio.all_tasks(self._loop)  # connections still piped: closed with the loop
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        checks = asyncio.ensure_future(self._check_forever())
        await self._check_all()
        self._started.set()
        async with server:
            await self._stopping.wait()
            checks.cancel()
            server.close()

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.check_seconds)
            await self._check_all()

    async def _check_all(self) -> None:
        answers = await asyncio.gather(*(self._check(backend) for backend in self.backends))
        self.ready.update(zip(self.backends, answers, strict=True))

    @staticmethod
    async def _check(backend: str) -> bool:
        host, _, port = backend.rpartition(":")
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                reader, writer = await asyncio.open_connection(host, int(port))
                try:
                    writer.write(f"GET /health/ready HTTP/1.1\r\nHost: {backend}\r\nConnection: close\r\n\r\n".encode())
                    status = await reader.readline()
                finally:
                    writer.close()
        except (OSError, TimeoutError):
            return False
        return status.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 "))

    def _order(self) -> list[str]:
        """The ready instances, starting with the next one's turn."""
        ready = [backend for backend in self.backends if self.ready.get(backend)]
        if not ready:
            return []
        first = next(self._turn) % len(ready)
        return ready[first:] + ready[:first]

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._piping.add(task)
            task.add_done_callback(self._piping.discard)
        self.counts.connections += 1
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        failed = False
        for backend in self._order():
            host, _, port = backend.rpartition(":")
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    upstream = await asyncio.open_connection(host, int(port))
            except ConnectionRefusedError:
                self.counts.refused += 1  # the one failure a balancer retries: nothing was sent
                self.ready[backend] = False
                continue
            except (OSError, TimeoutError):
                self.counts.failed += 1
                failed = True
                break
            self.counts.routed[backend] = self.counts.routed.get(backend, 0) + 1
            break
        if upstream is None:
            if not failed:
                self.counts.unrouted += 1
            client_writer.close()
            return
        backend_reader, backend_writer = upstream
        await asyncio.gather(
            _pipe(client_reader, backend_writer), _pipe(backend_reader, client_writer), return_exceptions=True
        )
        for writer in (client_writer, backend_writer):
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then pass the half-close on; a reset closes the other side at once."""
    try:
        while chunk := await reader.read(PIPE_BYTES):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()
    finally:
        with contextlib.suppress(OSError):
            await writer.drain()
