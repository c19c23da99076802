"""BRAIN_TLS without BRAIN_PROXY_SSL_HEADER: the TLS-terminating proxy forwards every request over
plain HTTP, so the Django stack counts each one as HTTPS (HSTS, the CSRF origin). Only settings install it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

__all__ = ["tls_terminated_middleware"]

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


@sync_and_async_middleware
def tls_terminated_middleware(get_response: GetResponse) -> GetResponse:
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponseBase:
            _count_as_https(request)
            response = cast(Awaitable[HttpResponseBase], get_response(request))
            return await response

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponseBase:
        _count_as_https(request)
        return cast(HttpResponseBase, get_response(request))

    return sync_middleware


def _count_as_https(request: HttpRequest) -> None:
    # HttpRequest.scheme falls back to the ASGI scope's scheme, or the WSGI environ's
    if isinstance(request, ASGIRequest):
        cast(dict[str, object], request.scope)["scheme"] = "https"
    else:
        request.META["wsgi.url_scheme"] = "https"
