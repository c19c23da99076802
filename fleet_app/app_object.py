"""What fleet_app reads from the application object: its fleet (or the solo stand-in). The ASGI
entry attaches the object to each scope (foundation.app_object); brainsite's BrainApp satisfies
this view, which mypy checks where BrainApp is defined."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from foundation.app_object import SCOPE_KEY, app_object_of

from .fleet import Fleet, SoloFleet

__all__ = ["FleetAppObject", "brain_of", "fleet_of_scope"]


class FleetAppObject(Protocol):
    @property
    def fleet(self) -> Fleet | SoloFleet: ...


def brain_of(scope: Mapping[str, Any]) -> FleetAppObject:
    return cast(FleetAppObject, app_object_of(scope))


def fleet_of_scope(scope: object) -> Fleet | SoloFleet:
    """The fleet of the server answering a request's scope; the solo stand-in outside a server
    (a WSGI test client's request has no application object)."""
    if isinstance(scope, dict) and SCOPE_KEY in scope:
        return brain_of(scope).fleet
    return SoloFleet()
