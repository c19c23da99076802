"""What sessions_app reads from the application object: the engine and the token cache. The ASGI
entry attaches the object to each scope (foundation.app_object); brainsite's BrainApp satisfies
this view, which mypy checks where BrainApp is defined."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from django.http import HttpRequest

from foundation.app_object import app_object_of, request_app_object

from .auth import TokenCache
from .runtime.engine import Engine

__all__ = ["SessionsAppObject", "brain_of", "request_brain"]


class SessionsAppObject(Protocol):
    @property
    def engine(self) -> Engine: ...

    @property
    def tokens(self) -> TokenCache: ...


def brain_of(scope: Mapping[str, Any]) -> SessionsAppObject:
    return cast(SessionsAppObject, app_object_of(scope))


def request_brain(request: HttpRequest) -> SessionsAppObject:
    return cast(SessionsAppObject, request_app_object(request))
