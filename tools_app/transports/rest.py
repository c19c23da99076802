"""Declarative REST tools: fill the binding's request template from the arguments, send it as a
plain REST call and turn the answer into a tool result.

The egress policy is the HTTP tools' (http_sse.make_client: no redirects, proxies from the
environment, the header deadline, max_output_bytes counted on the decoded body while reading).
Imports nothing from Django.
"""

from __future__ import annotations

import base64
import contextlib

import httpx
import orjson

from foundation.rest_templates import TemplateError, fill_request
from runners.protocol import FrameError, decode_json

from .base import OutboundCall, TransportError
from .http_sse import PooledHttpTransport, body_chunks, media_type_of, too_large

__all__ = ["RestTransport"]

ACCEPT = "application/json, text/*;q=0.9, */*;q=0.8"
EXCERPT_BYTES = 512  # of a 4xx/5xx body, shown to the model beside the status
TEXT_TYPES = frozenset({"application/xml", "application/javascript", "application/x-www-form-urlencoded"})
# Failures that happen before any byte of the request leaves: the service cannot have acted.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol, httpx.ProxyError)


class RestTransport(PooledHttpTransport):
    """Plain REST calls filled from the binding's templates."""

    async def call(self, call: OutboundCall) -> object:
        if call.rest is None:
            raise TransportError("the binding has no REST request", reached=False, permanent=True)
        try:
            filled = fill_request(call.rest, call.arguments)
        except TemplateError as exc:
            raise TransportError(f"cannot build the request: {exc}", reached=False, permanent=True) from None
        headers = {"Accept": ACCEPT, **filled.headers}
        if filled.body is not None and not any(name.lower() == "content-type" for name in filled.headers):
            headers["Content-Type"] = "application/json"
        if call.token:
            headers["Authorization"] = f"Bearer {call.token}"
        if call.traceparent:
            headers["traceparent"] = call.traceparent
        client = self._pooled_client()
        try:
            request = client.build_request(filled.method, filled.url, content=filled.body, headers=headers)
            response = await self._send(request, call, answer="response")
            try:
                return await _result(response, call.max_output_bytes)
            finally:
                await response.aclose()
        except NOT_SENT as exc:
            raise TransportError(f"could not reach the service: {type(exc).__name__}", reached=False) from exc
        except httpx.InvalidURL as exc:
            raise TransportError("the filled URL is invalid", reached=False, permanent=True) from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"the request failed: {type(exc).__name__}", reached=True) from exc


async def _read(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in body_chunks(response, limit):
        body += chunk
        if len(body) > limit:
            raise too_large(limit)
    return bytes(body)


async def _excerpt(response: httpx.Response) -> str:
    """The start of an error body; one that cannot be decoded has none."""
    body = bytearray()
    with contextlib.suppress(TransportError):
        async for chunk in body_chunks(response, EXCERPT_BYTES):
            body += chunk
            if len(body) >= EXCERPT_BYTES:
                break
    text = bytes(body[:EXCERPT_BYTES]).decode("utf-8", errors="replace").strip()
    return f": {text}" if text else ""


async def _result(response: httpx.Response, limit: int) -> object:
    """The tool result of an answer: 2xx is the body, 4xx an error result (the service refused;
    nothing happened), anything else a TransportError with an unknown outcome."""
    status = response.status_code
    if 400 <= status < 500:
        return {"content": [{"type": "text", "text": f"HTTP {status}{await _excerpt(response)}"}], "is_error": True}
    if 300 <= status < 400:
        location = response.headers.get("location", "")
        raise TransportError(f"HTTP {status} redirect to {location[:200]!r} not followed", reached=True)
    if not 200 <= status < 300:
        raise TransportError(f"HTTP {status}{await _excerpt(response)}", reached=True)
    body = await _read(response, limit)
    if not body:
        return {"content": [{"type": "text", "text": f"HTTP {status} with no body"}]}
    media_type = media_type_of(response)
    if media_type == "application/json" or media_type.endswith("+json"):
        try:
            value = decode_json(body)
        except FrameError as exc:
            raise TransportError(f"the response is not valid JSON: {exc}", reached=True) from None
        text = orjson.dumps(value).decode()
        return {"content": [{"type": "text", "text": text}], "structured_content": value}
    if media_type.startswith("image/"):
        data = base64.b64encode(body).decode()
        return {"content": [{"type": "image", "data": data, "mime_type": media_type}]}
    if media_type.startswith("text/") or media_type in TEXT_TYPES or media_type.endswith("+xml") or not media_type:
        try:
            return {"content": [{"type": "text", "text": body.decode(response.charset_encoding or "utf-8")}]}
        except (UnicodeDecodeError, LookupError):
            if media_type:
                return {"content": [{"type": "text", "text": body.decode("utf-8", errors="replace")}]}
    return {"content": [{"type": "text", "text": f"HTTP {status}: {len(body)} bytes of {media_type or 'binary data'}"}]}
