"""The host config's limits: the spec's bounds and the per-tenant shares of shared pools."""

from __future__ import annotations

from pydantic import Field, model_validator

from .base import FieldProblem, StrictModel

__all__ = ["Limits"]


class Limits(StrictModel):
    active: int = Field(default=16, ge=1)
    loaded: int = Field(default=1024, ge=1)
    queue: int = Field(default=16, ge=1, le=1024)
    input_bytes: int = Field(default=65536, ge=1, le=1 << 20)
    session_bytes: int = Field(default=1 << 30, ge=16 << 20)
    subscribers: int = Field(default=128, ge=1)
    subscriber_events: int = Field(default=128, ge=1)
    subscriber_bytes: int = Field(default=2 << 20, ge=4096)
    # Beyond the spec's limits, per-tenant shares of pools all tenants draw on:
    # runtime executors one tenant may hold (of the server's 4,096, tools_app.executors)
    tenant_executors: int = Field(default=1024, ge=1, le=4096)
    # an executor no session has bound is closed this long after its registration
    unbound_executor_seconds: int = Field(default=600, ge=1, le=86400)
    # requests from one client address whose bodies are still arriving (slow uploads); behind a
    # proxy every client shares its address, so raise it there
    receiving_per_address: int = Field(default=32, ge=1, le=65536)
    # in a fleet, streams (SSE event streams, executor command streams) one tenant may hold open
    # through one instance to other instances (of its 1,024 forwarded streams, fleet_app.transport)
    tenant_forwarded_streams: int = Field(default=256, ge=1, le=1024)

    @model_validator(mode="after")
    def _loaded_at_least_active(self) -> Limits:
        if self.loaded < self.active:
            raise FieldProblem("loaded", "must be at least active")
        return self
