"""A loopback TCP forwarder that can be shut like a network outage: while closed its port
refuses connections and the connections it carried are reset; the service behind it keeps
running with its state. Open it again and it listens on the same port."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

from tests.fixtures.server import free_port

ACCEPT_POLL_SECONDS = 0.05
BUFFER_BYTES = 65536


class TcpGate:
    def __init__(self, target_port: int, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def open(self) -> None:
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        listener.settimeout(ACCEPT_POLL_SECONDS)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def close(self) -> None:
        """Refuse new connections and reset the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._accepting is not None:
            self._accepting.join(timeout=5)
            self._accepting = None
        with self._lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            _reset(connection)

    @contextlib.contextmanager
    def shut(self) -> Iterator[None]:
        """Closed for the block, open again after it."""
        self.close()
        try:
            yield
        finally:
            self.open()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.target_port), timeout=5)
            except OSError:
                _reset(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    _reset(client)
                    _reset(upstream)
                    return
                self._connections.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(BUFFER_BYTES):
                sink.sendall(chunk)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            _reset(source)
            _reset(sink)


def _reset(connection: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), so the peer sees the connection fail at once."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        connection.close()
