"""An SSE client for journeys: one raw loopback socket read on a thread, exact bytes kept.

httpx hides the framing and cannot be stopped from another thread; a raw socket can
(`shutdown()` wakes the reader), and tests can see exactly which bytes Brain wrote.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

__all__ = ["EventStream", "Frame", "raw_request"]

HEADERS_TIMEOUT_SECONDS = 10.0
WAIT_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE block as written by the server (without the blank line that ends it)."""

    raw: bytes
    id: str | None
    event: str | None
    data: dict[str, Any] | None

    @property
    def comment(self) -> bool:
        return self.raw.startswith(b":")


def _parse_frame(raw: bytes) -> Frame:
    fields: dict[str, str] = {}
    for line in raw.decode().split("\n"):
        name, _, value = line.partition(": ")
        if not line.startswith(":"):
            fields[name] = value
    data = json.loads(fields["data"]) if "data" in fields else None
    return Frame(raw=raw, id=fields.get("id"), event=fields.get("event"), data=data)


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split(" ")[1]), headers


def raw_request(url: str, request: bytes, *, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are and read the whole (non-chunked or chunked) response."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            head, separator, body = data.partition(b"\r\n\r\n")
            if separator:
                status, headers = _parse_head(head)
                if "content-length" in headers and len(body) >= int(headers["content-length"]):
                    return status, headers, body
                if headers.get("transfer-encoding") == "chunked":
                    payload, _, done = _dechunk(body)
                    if done:
                        return status, headers, payload
    head, _, body = data.partition(b"\r\n\r\n")
    status, headers = _parse_head(head)
    return status, headers, body


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


class EventStream:
    """GET /sessions/{id}/events with Accept: text/event-stream, parsed as bytes arrive."""

    def __init__(
        self,
        url: str,
        token: str,
        session_id: str,
        *,
        after: str | None = None,
        last_event_id: str | None = None,
        receive_buffer: int | None = None,
    ) -> None:
        path = f"/sessions/{session_id}/events"
        if after is not None:
            path += "?" + urlencode({"after": after})
        parts = urlsplit(url)
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {parts.netloc}",
            f"Authorization: Bearer {token}",
            "Accept: text/event-stream",
        ]
        if last_event_id is not None:
            lines.append(f"Last-Event-ID: {last_event_id}")
        self._request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        self._address = (parts.hostname, parts.port)
        self._receive_buffer = receive_buffer
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._changed = threading.Condition()
        self._body = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.frames: list[Frame] = []
        self.ended = False
        self.reset = False

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, *, read: bool = True) -> EventStream:
        """Connect and send the request; with `read`, wait for the response head."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self._receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
        sock.connect(self._address)
        sock.sendall(self._request)
        self._sock = sock
        if not read:  # a client that reads only the response head, then never again
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(1)
                if not chunk:
                    raise AssertionError("no response head")
                head += chunk
            self.status, self.headers = _parse_head(head[:-4])
            return self
        if read:
            self._thread.start()
            with self._changed:
                if not self._changed.wait_for(lambda: self.status or self.ended, HEADERS_TIMEOUT_SECONDS):
                    raise AssertionError("no response head")
        return self

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def __enter__(self) -> EventStream:
        return self if self._sock is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def socket(self) -> socket.socket:
        assert self._sock is not None
        return self._sock

    def read_unread(self, *, quiet_seconds: float = 5.0) -> tuple[int, str]:
        """Read what a stream opened with `read=False` still holds: (bytes, "eof"|"reset"|"open").

        "open" means the server kept the connection and went quiet for `quiet_seconds`.
        """
        sock = self.socket
        sock.settimeout(quiet_seconds)
        total = 0
        try:
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    return total, "eof"
                total += len(chunk)
        except ConnectionResetError:
            return total, "reset"
        except TimeoutError:
            return total, "open"

    # -- reading -----------------------------------------------------------------------------

    def _read(self) -> None:
        assert self._sock is not None
        buffer = b""
        chunked = False
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                if not self.status:
                    head, separator, rest = buffer.partition(b"\r\n\r\n")
                    if not separator:
                        continue
                    status, headers = _parse_head(head)
                    chunked = headers.get("transfer-encoding") == "chunked"
                    buffer = rest
                    with self._changed:
                        self.status, self.headers = status, headers
                        self._changed.notify_all()
                done = False
                if chunked:
                    payload, buffer, done = _dechunk(buffer)
                else:
                    payload, buffer = buffer, b""
                self._feed(payload)
                if done:
                    break
        except ConnectionResetError:
            self.reset = True
        except OSError:
            pass
        finally:
            with self._changed:
                self.ended = True
                self._changed.notify_all()

    def _feed(self, payload: bytes) -> None:
        if not payload:
            return
        with self._changed:
            self._body += payload
            if self.status == 200:
                while b"\n\n" in self._body:
                    raw, _, self._body = self._body.partition(b"\n\n")
                    self.frames.append(_parse_frame(raw))
            self._changed.notify_all()

    @property
    def body(self) -> bytes:
        """The response body of a non-200 answer."""
        with self._changed:
            self._changed.wait_for(lambda: self.ended or self._body, WAIT_SECONDS)
            return self._body

    def error(self) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                return json.loads(self.body)  # type: ignore[no-any-return]
            except ValueError:
                time.sleep(0.01)
        raise AssertionError(f"no JSON body: {self._body!r}")

    def events(self) -> list[dict[str, Any]]:
        with self._changed:
            return [frame.data for frame in self.frames if frame.data is not None]

    def retained(self) -> list[dict[str, Any]]:
        return [event for event in self.events() if "cursor" in event]

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = WAIT_SECONDS
    ) -> list[dict[str, Any]]:
        """Wait until `predicate(events so far)` holds; returns those events."""
        with self._changed:
            ok = self._changed.wait_for(lambda: predicate(self.events()) or self.ended, timeout)
            events = self.events()
        if not ok or not predicate(events):
            raise AssertionError(f"stream never matched; saw {[e['type'] for e in events]}")
        return events

    def wait_for_event(self, type_: str, timeout: float = WAIT_SECONDS, **fields: Any) -> list[dict[str, Any]]:
        def seen(events: list[dict[str, Any]]) -> bool:
            return any(_matches(event, type_, fields) for event in events)

        return self.wait_for(seen, timeout)

    def wait_ended(self, timeout: float = WAIT_SECONDS) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.ended, timeout)


def _matches(event: dict[str, Any], type_: str, fields: dict[str, Any]) -> bool:
    if event["type"] != type_:
        return False
    for name, value in fields.items():
        if name == "status":
            if event["data"].get("status") != value:
                return False
        elif event.get(name) != value:
            return False
    return True
