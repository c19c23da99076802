"""The server's front door: `GET /` names where to go (the API docs, the contract, the admin,
health), and the slashes people get wrong redirect. Outside the API's OpenAPI contract."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponsePermanentRedirect, JsonResponse

__all__ = ["home", "to_admin", "to_docs"]

LINKS = {
    "docs": "/docs",  # Swagger UI, served by the server itself
    "openapi": "/openapi.json",
    "admin": "/admin/",
    "health": "/health/ready",
}
PAGE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Brain</title></head>
<body>
<h1>Brain</h1>
<p>An agent session server. Clients use its API with a bearer token.</p>
<ul>
<li><a href="/docs">API documentation</a> (Swagger UI)</li>
<li><a href="/openapi.json">OpenAPI contract</a></li>
<li><a href="/admin/">Admin</a></li>
<li><a href="/health/ready">Readiness</a></li>
</ul>
</body>
</html>
"""


async def home(request: HttpRequest) -> HttpResponse:
    """A page of links for a browser, the same links as JSON for anything else (curl, scripts)."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    if "text/html" in request.headers.get("Accept", ""):
        return HttpResponse(PAGE, content_type="text/html; charset=utf-8")
    return JsonResponse({"name": "brain", **LINKS})


async def to_admin(request: HttpRequest) -> HttpResponse:
    return HttpResponsePermanentRedirect("/admin/")


async def to_docs(request: HttpRequest) -> HttpResponse:
    return HttpResponsePermanentRedirect("/docs")
