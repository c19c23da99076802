"""What persistence_app reads from the application object: the engine and the archive (None
without persistence). The ASGI entry attaches the object to each scope (foundation.app_object);
brainsite's BrainApp satisfies this view, which mypy checks where BrainApp is defined."""

from __future__ import annotations

from typing import Protocol, cast

from django.http import HttpRequest

from foundation.app_object import request_app_object

from .archiving import ArchiveService, LiveSessions

__all__ = ["PersistenceAppObject", "request_brain"]


class PersistenceAppObject(Protocol):
    @property
    def engine(self) -> LiveSessions: ...

    @property
    def archive(self) -> ArchiveService | None: ...


def request_brain(request: HttpRequest) -> PersistenceAppObject:
    return cast(PersistenceAppObject, request_app_object(request))
