"""URL wiring: the front page, the admin and the API. Unknown routes answer with the spec's 404 envelope."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.urls import path

from brainsite.api import api, error_response, swagger_asset
from brainsite.home import home, to_admin, to_docs
from foundation.errors import InvalidRequest, NotFound

urlpatterns = [
    path("", home),
    path("admin", to_admin),  # APPEND_SLASH is off: the one slash people leave out
    path("admin/", admin.site.urls),
    path("docs/", to_docs),
    path("docs/<str:name>", swagger_asset, name="swagger-asset"),
    path("", api.urls),
]


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # DisallowedHost: a Host header not in ALLOWED_HOSTS (settings derive them from `listen`)
    message = "host not allowed" if isinstance(exception, DisallowedHost) else "bad request"
    return error_response(request, InvalidRequest(message))


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, NotFound("not found"))


def handler500(request: HttpRequest) -> HttpResponse:
    from foundation.errors import BrainError

    return error_response(request, BrainError())
