"""Encode AWS event-stream messages (`application/vnd.amazon.eventstream`), as Bedrock streams them.

A message is a prelude (total length, headers length, CRC32 of those 8 bytes), typed headers,
the payload and a CRC32 of everything before it; all integers big-endian. Only string headers are
needed here.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

__all__ = ["encode_event", "encode_exception", "encode_message"]

# Header value type 7 is a UTF-8 string with a 2-byte length (spec: AWS event stream encoding).
_STRING_HEADER = 7
# Prelude (4 + 4 + 4) and the trailing message CRC (4).
_PRELUDE_BYTES = 12
_CRC_BYTES = 4


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded_headers = b"".join(_encode_header(name, value) for name, value in headers.items())
    total = _PRELUDE_BYTES + len(encoded_headers) + len(payload) + _CRC_BYTES
    prelude = struct.pack(">II", total, len(encoded_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded_headers + payload
    return message + struct.pack(">I", zlib.crc32(message))


def encode_event(event_type: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, json.dumps(payload, separators=(",", ":")).encode())


def encode_exception(exception_type: str, message: str) -> bytes:
    """A modelled error in the stream; SDKs raise it from the event iterator."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def _encode_header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", _STRING_HEADER, len(raw_value)) + raw_value
