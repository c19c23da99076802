"""Serves the django-ninja API straight from ASGI.

Django's ASGIHandler hops to a worker thread several times per request (sync signal receivers,
sync middleware, `response.close`), which caps a turn's latency and the server's throughput.
The API needs none of it: views are async, auth is a bearer token, and there are no cookies.
The admin keeps the full Django stack.
"""

from __future__ import annotations

import inspect
from io import BytesIO
from typing import cast

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponseBase
from django.urls import Resolver404, get_resolver

from brainsite.api import error_response
from foundation.asgi import Receive, Scope, Send
from foundation.errors import BrainError, InvalidRequest, NotFound
from foundation.logs import logger

__all__ = ["ApiHandler"]


class ApiHandler:
    def __init__(self, urlconf: str = "brainsite.api_urls") -> None:
        self.resolver = get_resolver(urlconf)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._read_body(receive)
        if body is None:
            return  # the client went away
        request = ASGIRequest(scope, BytesIO(body))
        response = await self._respond(request)
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": getattr(response, "content", b"")})

    async def _respond(self, request: ASGIRequest) -> HttpResponseBase:
        try:
            match = self.resolver.resolve(request.path_info)
        except Resolver404:
            return error_response(request, NotFound("not found"))
        cast(dict[str, object], request.scope)["brain_route"] = match.route  # labels the request's metrics
        request.resolver_match = match  # path parameters for auth that needs them (executor credentials)
        try:
            response: HttpResponseBase = match.func(request, *match.args, **match.kwargs)
            if inspect.isawaitable(response):  # ninja's operations are async; its openapi view is not
                response = await response
        except Exception as exc:  # ninja renders view errors; this guards the wiring itself
            logger.error("request failed", exc_info=exc, extra={"request_id": request.scope["brain_request_id"]})
            return error_response(request, BrainError())
        if response.status_code == 405:
            return error_response(request, _method_not_allowed())
        return response

    @staticmethod
    async def _read_body(receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body = message.get("body", b"")
            chunks.append(body if isinstance(body, bytes) else b"")
            if not message.get("more_body"):
                return b"".join(chunks)


def _method_not_allowed() -> BrainError:
    error = InvalidRequest("method not allowed on this route")
    error.status = 405
    return error
