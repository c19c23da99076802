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

from ..errors import BrainFailure, ProviderFailure

try:
    import orjson
except ImportError:  # the stdlib gives the same results, only slower
    orjson = None  # type: ignore[assignment]  # the module or None, checked where used

_loads: Callable[[str], Any] = orjson.loads if orjson is not None else json.loads

__all__ = ["decode_event", "encode_body", "iter_sse"]


def encode_body(body: dict[str, Any]) -> bytes:
    """The request body as the SDK would send it (compact UTF-8 JSON, no NaN), encoded once."""
    if orjson is not None:
        try:
            return orjson.dumps(body)
        except TypeError:
            pass  # an integer beyond 64 bits or an odd type: let the stdlib decide
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise BrainFailure(f"request body is not JSON: {exc}") from exc


async def iter_sse(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) per server-sent event, as the SDKs' decoders split them.

    Data lines are joined with newlines; comments, `id` and `retry` are skipped; an event the
    stream ends without dispatching (no blank line after it) is dropped.
    """
    event = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if event or data:
                yield event, "\n".join(data)
            event, data = "", []
        elif line[0] == ":":
            continue
        else:
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value


def decode_event(provider: str, data: str) -> dict[str, Any]:
    """One event's JSON object; anything else means the provider broke its stream."""
    try:
        value = _loads(data)
    except ValueError as exc:  # orjson's and the stdlib's JSONDecodeError alike
        raise ProviderFailure(f"{provider}: malformed stream event: {exc}") from exc
    if not isinstance(value, dict):
        raise ProviderFailure(f"{provider}: malformed stream event: not a JSON object")
    return value
