"""Loopback servers for the web tools' tests.

`PageServer` serves pages (HTML, plain text, a gzip bomb, redirects) and counts every TCP
connection it accepts, so a test shows that a refused URL made no connection at all.
`SearchFake` answers as Brave (`GET /res/v1/web/search`) and Tavily (`POST /search`) do, but
only to requests in their documented shape with the expected key: anything else is a 400 or
401 naming what was wrong. Both record what they received.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.fixtures.ports import free_port
from tests.support.gzip_bomb import gzip_zeros

__all__ = ["PAGE_HTML", "PageServer", "RecordingResolver", "RecordingTransport", "SearchFake"]

PAGE_HTML = (
    "<html><head><title>Loopback page</title><script>var hidden = 'SCRIPT-TEXT';</script></head><body>"
    "<nav><a href='/'>Home</a></nav><article><h1>The loopback page</h1>"
    "<p>Brain fetched this paragraph from a page served on the loopback interface.</p>"
    "<p>A second paragraph, so the page has a body worth extracting.</p></article></body></html>"
)
BIG_TEXT_BYTES = 3 << 20  # past the 2 MiB upstream cap
LONG_HTML_PARAGRAPHS = 4000  # about 300 KiB of text: past the 128 KiB output cap, under 2 MiB


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.accepts = 0
        self.requests: list[dict[str, Any]] = []
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stopped reading at its bound resets the connection: expected here

    def get_request(self) -> tuple[socket.socket, Any]:
        connection = super().get_request()
        self.accepts += 1
        return connection


class _Base(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # the base class's name
        pass

    def _record(self, body: bytes = b"") -> None:
        self.server.requests.append(
            {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
        )

    def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)


class _Pages(_Base):
    def do_GET(self) -> None:  # noqa: N802  # http.server's handler name
        self._record()
        path, _, query = self.path.partition("?")
        arguments = parse_qs(query)
        if path == "/page":
            self._send(200, PAGE_HTML.encode(), "text/html; charset=utf-8")
        elif path == "/host":
            self._send(200, f"Host: {self.headers['Host']}".encode(), "text/plain")
        elif path == "/redirect":
            self._send(302, b"", "text/plain", Location=arguments["to"][0])
        elif path == "/loop":
            self._send(302, b"", "text/plain", Location="/loop")
        elif path == "/big":
            self._send(200, b"x" * BIG_TEXT_BYTES, "text/plain")
        elif path == "/long":
            paragraph = "<p>Paragraph {} of a long page with words.</p>"
            paragraphs = "".join(paragraph.format(n) for n in range(LONG_HTML_PARAGRAPHS))
            self._send(200, f"<html><body><article>{paragraphs}</article></body></html>".encode(), "text/html")
        elif path == "/image":
            self._send(200, b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png")
        elif path == "/bomb":
            self._bomb()
        else:
            self._send(404, b"<html><body><p>no such page</p></body></html>", "text/html")

    def _bomb(self) -> None:
        """1 GiB of zeros as gzip text, sent chunked as it is made (a few MiB on the wire)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for piece in gzip_zeros():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client stopped reading at its bound: what the test wants


class _Running:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server(("127.0.0.1", free_port()), handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def accepts(self) -> int:
        return self.server.accepts

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.server.requests

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PageServer(_Running):
    def __init__(self) -> None:
        super().__init__(_Pages)


SEARCH_KEY = "search-test-key-0123456789"
RESULTS = [
    {"title": f"Result <strong>{n}</strong>", "url": f"https://example.org/{n}", "snippet": f"Snippet {n} &amp; more"}
    for n in range(12)
]


class _Search(_Base):
    def do_GET(self) -> None:  # noqa: N802
        self._record()
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        problems = []
        if parts.path != "/res/v1/web/search":
            problems.append(f"path {parts.path}")
        if self.headers.get("Accept") != "application/json":
            problems.append("Accept must be application/json")
        if "q" not in query or "count" not in query:
            problems.append("q and count are required")
        if self.headers.get("Authorization"):
            problems.append("Brave takes the key in X-Subscription-Token, not Authorization")
        if problems:
            self._send(400, json.dumps({"problems": problems}).encode(), "application/json")
        elif self.headers.get("X-Subscription-Token") != SEARCH_KEY:
            self._send(401, b'{"error": "bad token"}', "application/json")
        else:
            count = int(query["count"][0])
            results = [{"title": r["title"], "url": r["url"], "description": r["snippet"]} for r in RESULTS[:count]]
            web = {"type": "search", "results": results}
            body = {"type": "search", "query": {"original": query["q"][0]}, "web": web}
            self._send(200, json.dumps(body).encode(), "application/json")

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._record(raw)
        problems = []
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
            problems.append("body must be JSON")
        if self.path != "/search":
            problems.append(f"path {self.path}")
        if not self.headers.get("Content-Type", "").startswith("application/json"):
            problems.append("Content-Type must be application/json")
        if not isinstance(body.get("query"), str) or not isinstance(body.get("max_results"), int):
            problems.append("query and max_results are required")
        if "api_key" in body:
            problems.append("the key goes in the Authorization header")
        if problems:
            self._send(400, json.dumps({"problems": problems}).encode(), "application/json")
        elif self.headers.get("Authorization") != f"Bearer {SEARCH_KEY}":
            self._send(401, b'{"detail": {"error": "Unauthorized"}}', "application/json")
        else:
            results = [
                {"title": r["title"], "url": r["url"], "content": r["snippet"], "score": 0.5}
                for r in RESULTS[: body["max_results"]]
            ]
            answer = {"query": body["query"], "results": results, "response_time": 0.1}
            self._send(200, json.dumps(answer).encode(), "application/json")


class SearchFake(_Running):
    key = SEARCH_KEY

    def __init__(self) -> None:
        super().__init__(_Search)


def started(kind: type[_Running]) -> Iterator[Any]:
    running = kind()  # type: ignore[call-arg]  # PageServer and SearchFake take no arguments
    try:
        yield running
    finally:
        running.stop()


class RecordingResolver:
    """A resolver with fixed answers per name that records every lookup."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.lookups: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[Any]:
        import ipaddress

        self.lookups.append((host, port))
        return [ipaddress.ip_address(answer) for answer in self.answers.get(host, [])]


class RecordingTransport(httpx.AsyncBaseTransport):
    """Records every request the fetcher would send; sends only those to 127.0.0.1 (the test's
    servers) and fails any other without dialing, so a wrong refusal can never leave the host."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._inner = httpx.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(str(request.url))
        if request.url.host != "127.0.0.1":
            raise httpx.ConnectError("the test transport dials loopback only", request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        pass  # shared by every fetch of a test; closed by close()

    async def close(self) -> None:
        await self._inner.aclose()
