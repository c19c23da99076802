"""Length-prefixed JSON frames between a component call and its worker process: a 4-byte
big-endian length, then that many bytes of one JSON object (orjson both ways)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any, BinaryIO

import orjson

__all__ = ["FrameError", "encode_frame", "read_frame", "read_frame_sync", "write_frame_sync"]

HEADER = struct.Struct(">I")


class FrameError(Exception):
    """A frame that is too long, cut short or not one JSON object."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = orjson.dumps(message)
    return HEADER.pack(len(body)) + body


def _decode(body: bytes) -> dict[str, Any]:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise FrameError(f"frame is not JSON: {error}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError("frame is not an object with a type")
    return message


def _length(header: bytes, *, limit: int) -> int:
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise FrameError(f"frame of {length} bytes exceeds {limit}")
    return int(length)


async def read_frame(reader: asyncio.StreamReader, *, limit: int) -> dict[str, Any]:
    """The next frame; FrameError when the stream ends or the frame is malformed."""
    try:
        length = _length(await reader.readexactly(HEADER.size), limit=limit)
        return _decode(await reader.readexactly(length))
    except asyncio.IncompleteReadError:
        raise FrameError("stream ended") from None


def read_frame_sync(stream: BinaryIO, *, limit: int) -> dict[str, Any]:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise FrameError("stream ended")
    length = _length(header, limit=limit)
    body = stream.read(length)
    if len(body) < length:
        raise FrameError("stream ended")
    return _decode(body)


def write_frame_sync(stream: BinaryIO, message: dict[str, Any]) -> None:
    stream.write(encode_frame(message))
    stream.flush()
