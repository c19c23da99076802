"""A response body read up to a bound of decoded bytes: `identity`, `gzip` and `deflate` are
decoded here in bounded pieces (zlib's `max_length`), so a gzip bomb stops at the bound after a
few KiB of input instead of being inflated whole. Pure; the caller feeds the wire bytes."""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["BodyError", "BoundedBody"]

PIECE = 64 * 1024  # decoded bytes produced per zlib call: memory per step stays this small
# a body whose wire bytes pass the bound by this factor without decoding to as much is refused:
# compressed text never grows, and empty deflate blocks would otherwise be read forever
WIRE_SLACK = 1 + 1 / 64


class BodyError(ValueError):
    """A body that cannot be decoded (unknown encoding, corrupt data)."""


class BoundedBody:
    """Decoded bytes of one response, at most `limit`; `truncated` once more was sent."""

    def __init__(self, content_encoding: str, *, limit: int) -> None:
        encoding = content_encoding.strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise BodyError(f"the page was sent with content encoding {encoding[:40]!r}, which is not decoded")
        gzip = encoding in ("gzip", "x-gzip")
        self._inflater: Any = zlib.decompressobj(zlib.MAX_WBITS | 16) if gzip else None  # zlib's Decompress
        self._deflate_pending = encoding == "deflate"
        self._limit = limit
        self._wire = 0
        self._parts: list[bytes] = []
        self._size = 0
        self.truncated = False

    @property
    def full(self) -> bool:
        return self.truncated or self._size >= self._limit

    def feed(self, data: bytes) -> None:
        """Take wire bytes; once the bound is reached the rest is dropped and `truncated` set."""
        if self.full:
            self.truncated = self.truncated or bool(data)
            return
        self._wire += len(data)
        if self._deflate_pending:
            # "deflate" is zlib-wrapped by the RFC but raw deflate from many servers: the first
            # byte tells (a zlib header's low nibble is 8, the deflate method)
            self._deflate_pending = False
            wbits = zlib.MAX_WBITS if data[:1] and data[0] & 0x0F == 8 else -zlib.MAX_WBITS
            self._inflater = zlib.decompressobj(wbits)
        if self._inflater is None:
            self._keep(data)
        else:
            self._inflate(data)
        if not self.full and self._wire > self._limit * WIRE_SLACK:
            raise BodyError("the page's compressed body is larger than what it decodes to")

    def _inflate(self, data: bytes) -> None:
        pending = data
        try:
            while pending and not self.full:
                out = self._inflater.decompress(pending, min(PIECE, self._limit - self._size + 1))
                self._keep(out)
                pending = self._inflater.unconsumed_tail
                if self._inflater.eof:
                    break
        except zlib.error:
            raise BodyError("the page's compressed body is corrupt") from None

    def _keep(self, data: bytes) -> None:
        room = self._limit - self._size
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        if data:
            self._parts.append(data)
            self._size += len(data)

    def finish(self) -> bytes:
        """The decoded bytes (at most `limit`)."""
        if self._inflater is not None and not self.full:
            try:
                self._keep(self._inflater.flush(max(self._limit - self._size + 1, 1)))
            except zlib.error:
                raise BodyError("the page's compressed body is corrupt") from None
        return b"".join(self._parts)
