"""The NinjaAPI: routers of each app, health routes, every error as the spec's envelope, the
contract at GET /openapi.json, and Swagger UI at /docs served from ninja's package (no CDN)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import ninja
import orjson
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.openapi.docs import DocsBase
from ninja.openapi.schema import REF_TEMPLATE, OpenAPISchema
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from pydantic import ConfigDict

from foundation.errors import BrainError, InvalidRequest, NotFound, Unauthorized, error_envelope
from foundation.json_types import JSONObject
from foundation.logs import logger
from persistence_app.api import router as persistence_router
from sessions_app.api import router as sessions_router
from sessions_app.auth import BearerAuth
from tools_app.api import EmitAuth, ExecutorAuth
from tools_app.api import router as tools_router
from tools_app.schemas import Call, Command, ToolEvent, ToolResult

from . import health

__all__ = ["ErrorDetail", "ErrorResponse", "api", "error_response", "swagger_asset"]

# The contract's name for the bearer scheme; ninja names a scheme after its auth class.
SECURITY_SCHEMES = {BearerAuth.__name__: "bearer", ExecutorAuth.__name__: "bearer", EmitAuth.__name__: "bearer"}
# The contract's text, with the fleet's 503 (a cluster block only) added to the list: its status
# and envelope are the contract's `default` response, so the wire contract is unchanged.
ERRORS_DESCRIPTION = (
    "Error. 400 invalid_request; 401 missing/invalid Bearer token; 403 forbidden; 404 not_found; "
    "409 conflict or cursor_unavailable; 413 body limit; 422 unsupported; 429 overloaded (Retry-After: 1); "
    "500 brain_error; 503 unavailable (Retry-After: 1), in a fleet only: the session's owner cannot be "
    "reached or its lease is lapsing or moving, this instance has not joined the fleet, or the fleet's "
    "database is unreachable; retry the same request (a send with its idempotency key) through any "
    "instance. X-Request-ID is present on every response."
)
# Swagger UI files shipped in ninja's package, by name, with their media types.
SWAGGER_ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-init.js": "text/javascript",
    "favicon.png": "image/png",
}
SWAGGER_DIRECTORY = Path(ninja.__file__).parent / "static" / "ninja"
# Components no operation's body refers to: the executor SSE `data:` and tool event data.
PUBLISHED_SCHEMAS: tuple[type[Schema], ...] = (Command, Call, ToolResult, ToolEvent)


class ErrorDetail(Schema):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str


class ErrorResponse(Schema):
    """The envelope of every error (foundation.errors.error_envelope writes it)."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail
    request_id: str


class OrjsonRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: object, *, response_status: int) -> bytes:
        return orjson.dumps(data)


class LocalSwagger(DocsBase):
    """ninja's Swagger page without Django templates or a CDN: assets come from `swagger_asset`."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: object) -> HttpResponse:
        settings = {"url": self.get_openapi_url(api, kwargs), "layout": "BaseLayout", "deepLinking": True}
        # `</` inside a script element would end it early.
        settings_json = json.dumps(settings).replace("<", "\\u003c")
        base = request.path.rstrip("/")
        page = (
            "<!DOCTYPE html>\n<html>\n<head>\n"
            f'<link type="text/css" rel="stylesheet" href="{base}/swagger-ui.css">\n'
            f'<link rel="icon" type="image/png" href="{base}/favicon.png">\n'
            f"<title>{api.title}</title>\n</head>\n<body>\n"
            f'<script type="application/json" id="swagger-settings">{settings_json}</script>\n'
            '<div id="swagger-ui"></div>\n'
            f'<script src="{base}/swagger-ui-bundle.js"></script>\n'
            f'<script src="{base}/swagger-ui-init.js"></script>\n'
            "</body>\n</html>\n"
        )
        return HttpResponse(page, content_type="text/html; charset=utf-8")


MAX_JSON_DEPTH = 64  # request bodies nest far less; deeper ones are 400, never a RecursionError


class BodyParser(Parser):
    """Request bodies decoded by orjson, the library the event log encodes with (no lone
    surrogates, NaN or infinities), and bounded in depth. Failures become ninja's 400."""

    def parse_body(self, request: HttpRequest) -> JSONObject:
        try:
            value = orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            if "surrogate" in str(exc):
                raise InvalidRequest("body: strings must be valid Unicode (no lone surrogates)") from exc
            raise InvalidRequest(f"body is not valid JSON: {exc}") from exc
        if _depth_exceeds(value, MAX_JSON_DEPTH):
            raise InvalidRequest(f"body nests deeper than {MAX_JSON_DEPTH} levels")
        return cast(JSONObject, value)


def _depth_exceeds(value: object, limit: int) -> bool:
    """Whether `value` nests deeper than `limit`; iterative, so any depth is safe to check."""
    level: list[object] = [value]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        children: list[object] = []
        for item in level:
            if isinstance(item, dict):
                children.extend(child for child in item.values() if isinstance(child, dict | list))
            elif isinstance(item, list):
                children.extend(child for child in item if isinstance(child, dict | list))
        level = children
    return False


class BrainAPI(NinjaAPI):
    @functools.cached_property
    def _documents(self) -> dict[tuple[str | None, tuple[tuple[str, object], ...]], OpenAPISchema]:
        return {}

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, object] | None = None
    ) -> OpenAPISchema:
        """The document, built once per prefix: routes never change after startup."""
        key = (path_prefix, tuple(sorted((path_params or {}).items())))
        document = self._documents.get(key)
        if document is None:
            document = self._documents[key] = self._build_openapi_schema(path_prefix, path_params)
        return document

    def _build_openapi_schema(self, path_prefix: str | None, path_params: dict[str, object] | None) -> OpenAPISchema:
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        _publish_errors_and_security(document)
        published: tuple[type[Schema], ...] = (ErrorResponse, *PUBLISHED_SCHEMAS)
        for model in published:
            _publish_component(document, model)
        return document


def _publish_component(document: OpenAPISchema, model: type[Schema]) -> None:
    schema = model.model_json_schema(ref_template=REF_TEMPLATE)
    document["components"]["schemas"].update(schema.pop("$defs", {}), **{model.__name__: schema})


def _publish_errors_and_security(document: OpenAPISchema) -> None:
    """What a route cannot declare to ninja: every authenticated operation may answer the error
    envelope (the contract's `default` response), the bearer scheme carries the contract's name,
    and public operations say `security: []`."""
    components = document["components"]
    schemes = components.get("securitySchemes", {})
    components["securitySchemes"] = {SECURITY_SCHEMES.get(name, name): scheme for name, scheme in schemes.items()}
    default = {
        "description": ERRORS_DESCRIPTION,
        "content": {"application/json": {"schema": {"$ref": REF_TEMPLATE.format(model="ErrorResponse")}}},
    }
    for operations in document["paths"].values():
        for operation in operations.values():
            security = [
                {SECURITY_SCHEMES.get(name, name): scopes for name, scopes in requirement.items()}
                for requirement in operation.get("security", [])
            ]
            operation["security"] = security
            if security:
                operation["responses"]["default"] = default


api = BrainAPI(
    title="Brain",
    version="current",
    description="HTTP API for the Brain agent session server.",
    renderer=OrjsonRenderer(),
    parser=BodyParser(),
    docs=LocalSwagger(),
    docs_url="/docs",
    openapi_url="/openapi.json",
)
api.add_router("", sessions_router, auth=BearerAuth())
api.add_router("", tools_router, auth=BearerAuth())
api.add_router("", persistence_router, auth=BearerAuth())
api.add_router("", health.router)


async def swagger_asset(request: HttpRequest, name: str) -> HttpResponse:
    """GET /docs/<name>: one of Swagger UI's files, read off the loop (the bundle is ~1.4 MB)."""
    content_type = SWAGGER_ASSETS.get(name)
    if content_type is None:
        return error_response(request, NotFound("not found"))
    content = await asyncio.to_thread((SWAGGER_DIRECTORY / name).read_bytes)
    response = HttpResponse(content, content_type=content_type)
    response["Cache-Control"] = "public, max-age=3600"
    return response


def request_id(request: HttpRequest) -> str:
    scope: Mapping[str, object] = getattr(request, "scope", {})
    return str(scope.get("brain_request_id", ""))


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
    if isinstance(exc.__cause__, InvalidRequest):  # a body BodyParser refused, with its reason
        return error_response(request, exc.__cause__)
    error = BrainError(str(exc))
    error.status = exc.status_code
    error.code = "invalid_request" if exc.status_code < 500 else "brain_error"
    return error_response(request, error)


@api.exception_handler(Exception)
def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.error("request failed", exc_info=exc, extra={"request_id": request_id(request), "path": request.path})
    return error_response(request, BrainError())
