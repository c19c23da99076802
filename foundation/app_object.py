"""The request → application object accessor. The ASGI entry puts the application object in each
scope under SCOPE_KEY; an app reads it through a typed view of its own (a Protocol naming only the
attributes that app uses), so no app imports the wiring that builds it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest

__all__ = ["SCOPE_KEY", "app_object_of", "request_app_object"]

SCOPE_KEY = "brain"  # the ASGI scope entry that carries the application object


def app_object_of(scope: Mapping[str, object]) -> object:
    """The application object the ASGI entry attached to a scope."""
    app: object = scope[SCOPE_KEY]
    return app


def request_app_object(request: HttpRequest) -> object:
    """app_object_of() for a view's request (always an ASGIRequest under Brain's ASGI entry)."""
    return app_object_of(cast(ASGIRequest, request).scope)
