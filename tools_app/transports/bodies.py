"""Tool response bodies decoded from their Content-Encoding in bounded pieces.

httpx decodes gzip and deflate one received chunk at a time with no bound on the output: a
64 KiB chunk of a gzip bomb becomes 64 MiB at once, and two stacked encodings gigabytes. So the
HTTP, REST and MCP transports read the raw stream and decode it here, at most DECODED_PIECE
bytes per piece, and count the decoded pieces against max_output_bytes. Imports nothing from
Django or httpx.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterator
from typing import Any, Protocol

__all__ = [
    "ACCEPT_ENCODING",
    "BodyDecodingError",
    "BodyTooLarge",
    "decoded_body",
    "decoded_response",
    "wire_limit",
]

# What Brain asks tool services for: both decode with the standard library, in bounded pieces.
# br and zstd are not offered, and a body that comes with them anyway is refused.
ACCEPT_ENCODING = "gzip, deflate"
DECODED_PIECE = 64 * 1024
MAX_ENCODINGS = 3  # stacked codings in one Content-Encoding header
IDENTITY = frozenset({"", "identity"})


class BodyDecodingError(Exception):
    """An unsupported Content-Encoding, or bytes that are not what it names."""


class BodyTooLarge(Exception):
    """More bytes arrived on the wire than the body's limit allows."""


def wire_limit(limit: int) -> int:
    """Wire bytes allowed for a body whose decoded size is limited to `limit`: a little more,
    since gzip of incompressible data is slightly larger than the data. It stops a stream that
    decodes to nothing (empty deflate blocks) from keeping a call busy until its deadline."""
    return limit + limit // 64 + 4096


class _Inflate:
    """One zlib stage with bounded output. `fallback` is tried once if the first bytes fail
    (deflate arrives zlib-wrapped or raw; httpx accepts both)."""

    def __init__(self, name: str, wbits: int, fallback: int | None = None) -> None:
        self._name = name
        self._decompressor = zlib.decompressobj(wbits)
        self._fallback = fallback

    def feed(self, data: bytes) -> Iterator[bytes]:
        decompressor = self._decompressor
        while data and not decompressor.eof:
            try:
                piece = decompressor.decompress(data, DECODED_PIECE)
            except zlib.error as exc:
                if self._fallback is None:
                    raise BodyDecodingError(f"the {self._name} body is malformed: {exc}") from None
                self._decompressor = decompressor = zlib.decompressobj(self._fallback)
                self._fallback = None
                continue
            self._fallback = None
            data = decompressor.unconsumed_tail
            if piece:
                yield piece
        # zlib may hold decoded bytes it had no room for once the input is used up
        while not decompressor.eof:
            piece = decompressor.decompress(b"", DECODED_PIECE)
            if not piece:
                break
            yield piece
        # bytes after the end of the stream (unused_data) are ignored, as httpx does


def _stage(coding: str) -> _Inflate:
    if coding in ("gzip", "x-gzip"):
        return _Inflate(coding, zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return _Inflate(coding, zlib.MAX_WBITS, fallback=-zlib.MAX_WBITS)
    raise BodyDecodingError(f"unsupported Content-Encoding {coding[:40]!r}")


def _stages(content_encoding: str) -> list[_Inflate]:
    """Decoders in decoding order: the last coding listed was applied last."""
    codings = [part.strip().lower() for part in content_encoding.split(",")]
    codings = [coding for coding in codings if coding not in IDENTITY]
    if len(codings) > MAX_ENCODINGS:
        raise BodyDecodingError(f"more than {MAX_ENCODINGS} stacked Content-Encodings")
    return [_stage(coding) for coding in reversed(codings)]


def _through(stages: list[_Inflate], data: bytes) -> Iterator[bytes]:
    if not stages:
        yield data
        return
    for piece in stages[0].feed(data):
        yield from _through(stages[1:], piece)


async def decoded_body(raw: AsyncIterable[bytes], content_encoding: str, *, limit: int) -> AsyncGenerator[bytes]:
    """The decoded bytes of a raw body, in pieces of at most DECODED_PIECE bytes once encoded
    (an identity body keeps its chunks). The caller counts the pieces against `limit` and stops
    reading when it is over; this raises BodyTooLarge once the wire bytes pass wire_limit(limit)
    and BodyDecodingError for an unsupported coding or malformed bytes."""
    stages = _stages(content_encoding)
    allowed = wire_limit(limit)
    received = 0
    async for chunk in raw:
        if received > allowed:  # checked after a chunk is decoded: a reader may stop early
            raise BodyTooLarge(f"more than {allowed} bytes on the wire")
        received += len(chunk)
        for piece in _through(stages, chunk):
            yield piece
    if received > allowed:
        raise BodyTooLarge(f"more than {allowed} bytes on the wire")


class StreamedResponse(Protocol):
    """What decoded_response needs of an httpx or httpx2 response sent with stream=True."""

    @property
    def headers(self) -> Any: ...
    @property
    def is_stream_consumed(self) -> bool: ...
    @property
    def content(self) -> bytes: ...
    def aiter_raw(self) -> AsyncIterator[bytes]: ...


async def _already(content: bytes) -> AsyncIterator[bytes]:
    yield content


def decoded_response(response: StreamedResponse, *, limit: int) -> AsyncGenerator[bytes]:
    """decoded_body() of a streamed response. A response that arrived with its content in hand
    (an injected MockTransport's) was decoded by httpx already and is passed on as it is."""
    if response.is_stream_consumed:
        return decoded_body(_already(response.content), "", limit=limit)
    return decoded_body(response.aiter_raw(), response.headers.get("content-encoding", ""), limit=limit)
