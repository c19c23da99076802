"""A loopback HTTP forwarder that loses the answer to every PUT and DELETE: the request reaches the server
behind it, which carries it out, and the client's connection is closed without a response (the
fault of a network that dropped the answer)."""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.fixtures.server import free_port

BUFFER_BYTES = 65536


class LossyProxy:
    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self.dropped = 0  # answers to PUTs and DELETEs the server gave and the client never got
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            state = {"put": False}
            threading.Thread(target=self._requests, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, state), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, state: dict[str, bool]) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(BUFFER_BYTES):
                if data.startswith((b"PUT ", b"DELETE ")):  # urllib3 sends one request at a time per connection
                    state["put"] = True
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _answers(self, upstream: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(BUFFER_BYTES):
                interim = data.startswith(b"HTTP/1.1 100")  # `Expect: 100-continue`: the body is still to come
                if state["put"] and not interim:  # the server answered: it was carried out; lose the answer
                    with self._lock:
                        self.dropped += 1
                    break
                client.sendall(data)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the other thread's recv; close alone would not
            with contextlib.suppress(OSError):
                sock.close()
