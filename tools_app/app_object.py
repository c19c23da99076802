"""What tools_app reads from the application object: the tool registry and path, the runtime executors and
a session's saved config. The ASGI entry attaches the object to each scope
(foundation.app_object); brainsite's BrainApp satisfies this view, which mypy checks where
BrainApp is defined. The session side is a Protocol too: tools_app never imports sessions_app."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from django.http import HttpRequest

from foundation.app_object import app_object_of, request_app_object

from .executors import ExecutorHub
from .registry import ToolRegistry
from .tool_path import ToolPath

__all__ = ["ToolsAppObject", "brain_of", "request_brain"]


class SavedSession(Protocol):
    @property
    def config(self) -> Mapping[str, Any]: ...


class LoadedSession(Protocol):
    @property
    def record(self) -> SavedSession: ...


class SessionLookup(Protocol):
    async def get_actor(self, tenant: str, session_id: str, /) -> LoadedSession: ...


class ToolsAppObject(Protocol):
    @property
    def engine(self) -> SessionLookup: ...

    @property
    def registry(self) -> ToolRegistry: ...

    @property
    def tool_path(self) -> ToolPath: ...

    @property
    def executors(self) -> ExecutorHub: ...

    async def saved_session_config(self, tenant: str, session_id: str, /) -> Mapping[str, Any] | None:
        """A session's saved config from the database, without loading it (None: no such session)."""
        ...


def brain_of(scope: Mapping[str, object]) -> ToolsAppObject:
    return cast(ToolsAppObject, app_object_of(scope))


def request_brain(request: HttpRequest) -> ToolsAppObject:
    return cast(ToolsAppObject, request_app_object(request))
