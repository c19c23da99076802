"""What fleet_app reads from the application object: whether it runs a fleet, and what routing
needs of it (the token cache, the executor relay, the host config's limits, the telemetry and the
fleet secret). The ASGI entry attaches the object to each scope (foundation.app_object);
brainsite's BrainApp satisfies this view, which mypy checks where BrainApp is defined."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from foundation.app_object import SCOPE_KEY, app_object_of

from .executor_routes import ExecutorLocator
from .gate import BearerCheck

__all__ = ["FleetAppObject", "FleetView", "RoutedAppObject", "brain_of", "fleet_key", "in_fleet_scope"]


class FleetView(Protocol):
    """What fleet_app reads of the app object's fleet (fleet_app.fleet's Fleet or SoloFleet)."""

    @property
    def is_fleet(self) -> bool: ...


class LimitsView(Protocol):
    @property
    def tenant_forwarded_streams(self) -> int: ...


class ConfigView(Protocol):
    @property
    def limits(self) -> LimitsView: ...


class ForwardCounter(Protocol):
    """What routing needs of foundation.telemetry.Telemetry."""

    def record_fleet_forward(self) -> None: ...


class FleetSecretView(Protocol):
    @property
    def key(self) -> bytes: ...


class SecretsView(Protocol):
    @property
    def fleet_secret(self) -> FleetSecretView | None: ...


class RoutedAppObject(Protocol):
    """What fleet_app.routing reads of the app object."""

    @property
    def tokens(self) -> BearerCheck: ...
    @property
    def relay(self) -> ExecutorLocator | None: ...
    @property
    def config(self) -> ConfigView: ...
    @property
    def telemetry(self) -> ForwardCounter: ...
    @property
    def secrets(self) -> SecretsView: ...


class FleetAppObject(RoutedAppObject, Protocol):
    @property
    def fleet(self) -> FleetView: ...


def brain_of(scope: Mapping[str, Any]) -> FleetAppObject:
    return cast(FleetAppObject, app_object_of(scope))


def in_fleet_scope(scope: object) -> bool:
    """Whether the server answering a request's scope runs a fleet; False outside a server (a
    WSGI test client's request has no application object)."""
    return isinstance(scope, dict) and SCOPE_KEY in scope and brain_of(scope).fleet.is_fleet


def fleet_key(brain: RoutedAppObject) -> bytes:
    """The fleet secret's key; an app object that routes always has one."""
    secret = brain.secrets.fleet_secret
    if secret is None or not secret.key:
        raise RuntimeError("the app object has leases but no fleet_secret")
    return secret.key
