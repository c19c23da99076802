"""Raw provider streams: request bodies encoded once, server-sent events decoded with orjson.

The SDK still sends the request (base URL, auth, headers, retries, status errors); the stream it
hands back is read here line by line, without building a typed object per streamed event.
Provider-specific event handling stays in each transport.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from runners.protocol import JSONObject

from ..errors import BrainFailure, ProviderFailure

try:
    import orjson
except ImportError:  # the stdlib gives the same results, only slower
    orjson = None  # type: ignore[assignment]  # the module or None, checked where used

_loads: Callable[[bytes], Any] = orjson.loads if orjson is not None else json.loads

__all__ = ["decode_event", "encode_body", "iter_sse"]


def encode_body(body: JSONObject) -> bytes:
    """The request body as compact UTF-8 JSON, encoded once.

    Every value in a body came through the strict frame codec or a provider's own JSON, so there
    is no NaN for orjson to write as null; what orjson refuses is retried with the stdlib.
    """
    if orjson is not None:
        try:
            return orjson.dumps(body)
        except TypeError:
            pass  # an integer beyond 64 bits or an odd type: let the stdlib decide
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise BrainFailure(f"request body is not JSON: {exc}") from exc


async def iter_sse(response: httpx.Response) -> AsyncIterator[tuple[str, bytes]]:
    """(event, data) per server-sent event, as the SDKs' decoders split them.

    Lines end in CR, LF or CRLF; data lines are joined with LF; comments, `id` and `retry` are
    skipped; an event the stream ends without dispatching (no blank line after it) is dropped.
    Bytes throughout, so orjson reads the data without a text round trip.
    """
    event = ""
    data: list[bytes] = []
    pending = b""
    async for chunk in response.aiter_bytes():
        lines = (pending + chunk if pending else chunk).splitlines(keepends=True)
        # the last line may be incomplete, or end in a CR whose LF is in the next chunk
        pending = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            if not line:
                if event or data:
                    yield event, b"\n".join(data)
                event, data = "", []
            elif line[0] != 58:  # b":" starts a comment
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"data":
                    data.append(value)
                elif name == b"event":
                    event = value.decode("utf-8", "replace")
    if pending.rstrip(b"\r\n") == b"" and pending and (event or data):
        yield event, b"\n".join(data)  # the stream ended on a CR that was the event's blank line


def decode_event(provider: str, data: bytes) -> dict[str, Any]:
    """One event's JSON object; anything else means the provider broke its stream."""
    try:
        value = _loads(data)
    except ValueError as exc:  # orjson's and the stdlib's JSONDecodeError alike
        raise ProviderFailure(f"{provider}: malformed stream event: {exc}") from exc
    if not isinstance(value, dict):
        raise ProviderFailure(f"{provider}: malformed stream event: not a JSON object")
    return value
