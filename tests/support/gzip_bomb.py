"""A tool service that answers with a gzip bomb: a few KiB on the wire that decode to 1 GiB of
zeros. The bomb is made piece by piece while it is sent, so neither form is ever held whole.

`BombService` serves HTTP JSON (POST /json), SSE (POST /sse) and REST (GET /rest) tools, and
wraps the MCP test server (/mcp) so that a tools/call is answered with the bomb while the
session's setup is the real server's (without `?layers=` it is the plain MCP test server).
`?layers=2` stacks a second gzip (`gzip, gzip`); /json?empty=1 sends 64 MiB of gzip that
decodes to nothing; /mcp?hang_delete=1 never answers a DELETE.
Every request it receives is recorded (method, path, Mcp-Session-Id, JSON-RPC method), so it
also shows which MCP sessions a client ended (DELETE).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import orjson

from tests.tools.mcp_server import build_app

BOMB_BYTES = 1 << 30  # what the body decodes to
_PIECE = 1 << 20
_ZEROS = bytes(_PIECE)
_GZIP_HEADER_BYTES = 10
_FINAL_EMPTY_BLOCK = b"\x03\x00"  # BFINAL, fixed Huffman, end of block
_EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"  # not final, stored, length 0
EMPTY_BLOCKS_BYTES = 64 << 20  # what /json?empty=1 sends: all of it decodes to nothing


def _zeros_member() -> tuple[bytes, bytes]:
    """The gzip header and the deflate bytes of one MiB of zeros after a full flush: a full
    flush resets the dictionary, so every further MiB compresses to the same bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    first = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first[:_GZIP_HEADER_BYTES], first[_GZIP_HEADER_BYTES:]


_HEADER, _MEBIBYTE = _zeros_member()


def gzip_zeros(total: int = BOMB_BYTES) -> Iterator[bytes]:
    """A valid gzip stream of `total` zero bytes (a multiple of 1 MiB), about 1 KiB per MiB."""
    pieces = total // _PIECE
    yield _HEADER
    crc = 0
    for _ in range(pieces):
        yield _MEBIBYTE
    for _ in range(pieces):  # only a reader that took it all gets here
        crc = zlib.crc32(_ZEROS, crc)
    yield _FINAL_EMPTY_BLOCK + struct.pack("<II", crc, total & 0xFFFFFFFF)


def gzip_over(inner: Iterator[bytes]) -> Iterator[bytes]:
    """Another gzip layer over a stream, compressed as it is read."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    for chunk in inner:
        out = compressor.compress(chunk)
        if out:
            yield out
    yield compressor.flush()


def gzip_of_nothing(total: int = EMPTY_BLOCKS_BYTES) -> Iterator[bytes]:
    """A valid gzip stream of about `total` bytes that decodes to nothing: empty stored blocks."""
    yield _HEADER
    block = _EMPTY_STORED_BLOCK * (_PIECE // len(_EMPTY_STORED_BLOCK))
    for _ in range(total // len(block)):
        yield block
    yield _FINAL_EMPTY_BLOCK + struct.pack("<II", 0, 0)


def bomb(layers: int) -> tuple[str, Iterator[bytes]]:
    """The Content-Encoding and the body of a bomb with `layers` gzip layers (1 or 2)."""
    body = gzip_zeros()
    for _ in range(layers - 1):
        body = gzip_over(body)
    return ", ".join(["gzip"] * layers), body


@dataclass
class Seen:
    method: str
    path: str
    mcp_session: str | None
    rpc_method: str | None = None  # of a JSON-RPC request POSTed to /mcp


@dataclass
class BombService:
    received: list[Seen] = field(default_factory=list)
    mcp: Any = field(default_factory=lambda: build_app(json_response=True))

    def deletes(self) -> list[Seen]:
        return [seen for seen in self.received if seen.method == "DELETE"]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.mcp(scope, receive, send)  # lifespan of the MCP app
            return
        headers = dict(scope["headers"])
        session = headers.get(b"mcp-session-id")
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen = Seen(scope["method"], scope["path"], session.decode() if session else None, _rpc_method(raw))
        self.received.append(seen)
        query = parse_qs(scope["query_string"].decode())
        layers = int(query.get("layers", ["1"])[0])
        path = scope["path"]
        if path in ("/json", "/rest"):
            await _send_bomb(send, "application/json", layers, empty="empty" in query)
        elif path == "/sse":
            await _send_bomb(send, "text/event-stream", layers)
        elif path == "/mcp" and "layers" in query and scope["method"] == "POST" and _is_tool_call(raw):
            await _send_bomb(send, "application/json", layers)
        elif path == "/mcp" and scope["method"] == "DELETE" and "hang_delete" in query:
            await receive()  # never answered: until the client goes away
        elif path == "/mcp":
            await self.mcp(scope, _replay(raw, receive), send)
        else:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})


def _rpc_method(raw: bytes) -> str | None:
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else None


def _is_tool_call(raw: bytes) -> bool:
    return _rpc_method(raw) == "tools/call"


def _replay(raw: bytes, receive: Any) -> Any:
    """The request body again, then the connection's own messages (its disconnect)."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replayed


async def _send_bomb(send: Any, content_type: str, layers: int, *, empty: bool = False) -> None:
    encoding, body = ("gzip", gzip_of_nothing()) if empty else bomb(layers)
    headers = [(b"content-type", content_type.encode()), (b"content-encoding", encoding.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for chunk in body:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
