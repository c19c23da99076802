"""A threaded loopback HTTP server for the provider fakes, and running a sandbox command for real
on this machine (what a provider's daemon does inside its sandbox)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Handler = Callable[[BaseHTTPRequestHandler, str, str, bytes], None]


def run_like_a_daemon(argv: list[str], *, timeout: float = 60.0) -> tuple[int, str, str]:
    """The command run as the provider would: its exit status, stdout and stderr."""
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return completed.returncode, completed.stdout, completed.stderr


def send_json(request: BaseHTTPRequestHandler, status: int, body: object) -> None:
    payload = json.dumps(body).encode()
    request.send_response(status)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(payload)))
    request.end_headers()
    request.wfile.write(payload)


def drop_connection(request: BaseHTTPRequestHandler) -> None:
    """The request was read, the answer is lost: the connection closes without a byte."""
    request.close_connection = True
    request.connection.shutdown(2)


@contextmanager
def serve(handler: Handler) -> Iterator[str]:
    """`handler(request, method, path, body)` on 127.0.0.1; yields the base URL."""

    class _Request(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _dispatch(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            handler(self, self.command, self.path, self.rfile.read(length) if length else b"")

        do_GET = do_POST = do_DELETE = do_PUT = _dispatch  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Request)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
