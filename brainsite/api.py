"""The NinjaAPI: routers of each app, health routes, and every error as the spec's envelope."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.renderers import BaseRenderer

from brainsite.errors import BrainError, InvalidRequest, NotFound, Unauthorized, error_envelope
from brainsite.logs import logger
from persistence_app.api import router as persistence_router
from sessions_app.api import router as sessions_router
from sessions_app.auth import BearerAuth
from tools_app.api import router as tools_router

from . import health


class OrjsonRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return orjson.dumps(data)


api = NinjaAPI(title="Brain", version="current", renderer=OrjsonRenderer(), docs_url=None, openapi_url="/openapi.json")
api.add_router("", sessions_router, auth=BearerAuth())
api.add_router("", tools_router, auth=BearerAuth())
api.add_router("", persistence_router, auth=BearerAuth())
api.add_router("", health.router)


def request_id(request: HttpRequest) -> str:
    return getattr(request, "scope", {}).get("brain_request_id", "")


def error_response(request: HttpRequest, error: BrainError) -> HttpResponse:
    body = error_envelope(error, request_id(request))
    response = HttpResponse(body, status=error.status, content_type="application/json")
    for name, value in error.headers().items():
        response[name] = value
    return response


@api.exception_handler(BrainError)
def on_brain_error(request: HttpRequest, exc: BrainError) -> HttpResponse:
    return error_response(request, exc)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    # ninja answers 422; the spec wants 400 invalid_request naming the field.
    first = exc.errors[0] if exc.errors else {}
    location = ".".join(str(part) for part in first.get("loc", ())[1:] if part != "body") or "body"
    message = first.get("msg", "invalid request").removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    return error_response(request, InvalidRequest(f"{location}: {message}"))


@api.exception_handler(AuthenticationError)
def on_authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(request, Unauthorized("missing or invalid bearer token"))


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, NotFound("not found"))


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    error = BrainError(str(exc))
    error.status = exc.status_code
    error.code = "invalid_request" if exc.status_code < 500 else "brain_error"
    return error_response(request, error)


@api.exception_handler(Exception)
def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.error("request failed", exc_info=exc, extra={"request_id": request_id(request), "path": request.path})
    return error_response(request, BrainError())
