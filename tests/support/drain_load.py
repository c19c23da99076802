"""Client load through a balancer while an instance drains: reads, sends and event-page reads on
threads of their own, and SSE streams read on raw sockets, each request tallied by how it ended.

A request answered 2xx is answered; a 503 or 429 is retried (after RETRY_PAUSE_SECONDS, the same
request, a send with its idempotency key) until a 2xx or RETRY_SECONDS. A send refused because a
stop interrupted the session's turn (409: resume it first) resumes the session, as a client
does after a restart, and is sent again (counted as resumed). A connection that broke
before the whole answer came (reset, closed without an answer, a timeout) is cut and not retried.
A stream may end (it is reopened after its last event id) but only cleanly, after a complete
event: a stream that breaks, or ends in the middle of an event, is cut.
"""

from __future__ import annotations

import itertools
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

__all__ = ["Load", "Tally"]

RETRY_PAUSE_SECONDS = 0.2
RETRY_SECONDS = 30.0  # a retryable answer that no retry resolves within this is unresolved
REQUEST_TIMEOUT_SECONDS = 15.0  # spec: the client's timeout
STREAM_READ_SECONDS = 30.0  # longer than the server's 15 s keep-alive comments
PAGE_LIMIT = 20
INTERRUPTED = "resume the interrupted session"  # the 409 of a send to a session a stop interrupted


@dataclass
class Tally:
    requests: int = 0  # requests made (a retry is the same request), streams opened included
    answered: int = 0  # answered 2xx in the end
    retried: int = 0  # 503/429 answers that a retry followed
    resumed: int = 0  # sends refused for an interrupted session, sent again after POST /resume
    streams: int = 0  # streams opened (answered 200)
    streams_ended: int = 0  # streams the server ended cleanly (each reopened)
    stream_events: int = 0
    cut: list[str] = field(default_factory=list)  # what broke, one line each
    unresolved: list[str] = field(default_factory=list)  # no 2xx: an other status, or retries ran out
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def note(self, kind: str, line: str) -> None:
        with self.lock:
            getattr(self, kind).append(line)

    def report(self) -> str:
        return (
            f"requests {self.requests}, answered 2xx {self.answered}, retried 503/429 {self.retried}, "
            f"resumed {self.resumed}, "
            f"cut {len(self.cut)}, unresolved {len(self.unresolved)}; streams {self.streams} "
            f"(ended cleanly {self.streams_ended}, {self.stream_events} events)"
        )


class Load:
    """`clients` request threads and `streams` stream threads over `session_ids`, through `url`."""

    def __init__(
        self, url: str, token: str, session_ids: list[str], *, clients: int = 6, streams: int = 2, seed: int = 0
    ) -> None:
        self.url, self.token, self.session_ids = url, token, session_ids
        self.tally = Tally()
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._sockets_lock = threading.Lock()
        self._counter = itertools.count()
        self._threads = [
            threading.Thread(target=self._client, args=(random.Random(seed + n),), daemon=True) for n in range(clients)
        ]
        self._threads += [
            threading.Thread(target=self._stream, args=(session_ids[n % len(session_ids)],), daemon=True)
            for n in range(streams)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> Tally:
        self._stopping.set()
        with self._sockets_lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a stream's blocked read
                except OSError:
                    pass
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT_SECONDS + RETRY_SECONDS)
        return self.tally

    # -- requests --------------------------------------------------------------------------

    def _client(self, rng: random.Random) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
            while not self._stopping.is_set():
                self._one(client, rng.choice(self.session_ids), rng.choice(("read", "page", "send")))
                time.sleep(rng.uniform(0.0, 0.02))

    def _one(self, client: httpx.Client, session_id: str, kind: str) -> None:
        target = f"/sessions/{session_id}/events"
        if kind == "read":
            self._request(lambda: client.get(f"/sessions/{session_id}"), f"GET /sessions/{session_id}")
        elif kind == "page":
            self._request(lambda: client.get(target, params={"limit": PAGE_LIMIT}), f"GET {target}")
        else:
            body = {"type": "user.message", "text": f"m-{next(self._counter)}", "key": secrets.token_hex(8)}
            self._request(
                lambda: client.post(target, json=body),
                f"POST {target}",
                recover=lambda: client.post(f"/sessions/{session_id}/resume"),
            )

    def _request(
        self, make: Callable[[], httpx.Response], what: str, recover: Callable[[], httpx.Response] | None = None
    ) -> None:
        self.tally.add(requests=1)
        began = time.monotonic()
        while True:
            try:
                response = make()
                interrupted = recover is not None and response.status_code == 409 and INTERRUPTED in response.text
                if interrupted and recover is not None:
                    self.tally.add(resumed=1)
                    recover()  # 200, or 409 when another client resumed it first
            except httpx.HTTPError as exc:
                self.tally.note("cut", f"{what}: {type(exc).__name__}: {exc}")
                return
            if 200 <= response.status_code < 300:
                self.tally.add(answered=1)
                return
            retryable = interrupted or response.status_code in (429, 503)
            if not retryable or time.monotonic() - began > RETRY_SECONDS:
                self.tally.note("unresolved", f"{what}: {response.status_code} {response.text[:200]}")
                return
            if not interrupted:
                self.tally.add(retried=1)
            time.sleep(RETRY_PAUSE_SECONDS)

    # -- streams ---------------------------------------------------------------------------

    def _stream(self, session_id: str) -> None:
        last_id = ""
        while not self._stopping.is_set():
            self.tally.add(requests=1)
            began = time.monotonic()
            while True:
                outcome = self._stream_once(session_id, last_id)
                if isinstance(outcome, str) or outcome.status not in (429, 503):
                    break
                if time.monotonic() - began > RETRY_SECONDS:
                    break
                self.tally.add(retried=1)
                time.sleep(RETRY_PAUSE_SECONDS)
            if self._stopping.is_set():
                return
            what = f"stream of {session_id} after {last_id or 'the start'}"
            if isinstance(outcome, str):
                self.tally.note("cut", f"{what}: {outcome}")
                time.sleep(RETRY_PAUSE_SECONDS)
                continue
            if outcome.status != 200:
                self.tally.note("unresolved", f"{what}: {outcome.status}")
                last_id = ""  # a cursor refused (409) is not retried: the stream starts over
                time.sleep(RETRY_PAUSE_SECONDS)
                continue
            self.tally.add(answered=1, streams=1, streams_ended=1, stream_events=len(outcome.ids))
            last_id = outcome.ids[-1] if outcome.ids else last_id
            time.sleep(RETRY_PAUSE_SECONDS)  # an SSE client's reconnection delay

    def _stream_once(self, session_id: str, last_id: str) -> _Stream | str:
        """One stream until the server ends it: its status and event ids, or what broke."""
        parts = urlsplit(self.url)
        request = (
            f"GET /sessions/{session_id}/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {self.token}\r\nAccept: text/event-stream\r\n"
            + (f"Last-Event-ID: {last_id}\r\n" if last_id else "")
            + "\r\n"
        ).encode()
        try:
            sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=STREAM_READ_SECONDS)
        except OSError as exc:
            return f"connect: {exc}"
        with self._sockets_lock:
            self._sockets.add(sock)
        try:
            sock.sendall(request)
            return _read_stream(sock)
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            with self._sockets_lock:
                self._sockets.discard(sock)
            sock.close()


@dataclass
class _Stream:
    status: int
    ids: list[str]


def _read_stream(sock: socket.socket) -> _Stream | str:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return "closed without an answer" if not buffer else "closed in the middle of the answer's head"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    chunked = b"transfer-encoding: chunked" in head.lower()
    if not chunked:  # an error answer with a Content-Length: read whole, then done
        return _Stream(status, [])
    payload = b""
    while True:
        decoded, rest, done = _dechunk(rest)
        payload += decoded
        if done:
            break
        chunk = sock.recv(65536)
        if not chunk:
            return f"broken after {len(payload)} bytes (no last chunk)"
        rest += chunk
    if status != 200:
        return _Stream(status, [])
    if payload and not payload.endswith(b"\n\n"):
        return f"ended in the middle of an event: {payload[-80:]!r}"
    ids = [line[4:].decode() for line in payload.split(b"\n") if line.startswith(b"id: ")]
    return _Stream(status, ids)


def _dechunk(buffer: bytes) -> tuple[bytes, bytes, bool]:
    """Decode complete chunks; returns (payload, undecoded rest, whether the last chunk came)."""
    payload = b""
    while True:
        size_line, separator, rest = buffer.partition(b"\r\n")
        if not separator:
            return payload, buffer, False
        size = int(size_line.split(b";")[0], 16)
        if len(rest) < size + 2:
            return payload, buffer, False
        payload += rest[:size]
        buffer = rest[size + 2 :]
        if size == 0:
            return payload, buffer, True
