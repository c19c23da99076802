"""The host config's tool environments: where a session's placed tools run.

`host` runs functions a runtime executor holds (the executor registers with the environment's
name as its binding); `service` maps tool names to the host config's own tools (HTTP, MCP, REST
or an installed provider, the local sandbox's included); `brain` runs WebAssembly components the
operator names here, with the grants it allows. Sessions bind environments by name and place
tools in them (tools_app.environments).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import FieldProblem, StrictModel

__all__ = [
    "ENVIRONMENT_KINDS",
    "ENVIRONMENT_NAME",
    "GRANT_MODES",
    "ComponentLimitsConfig",
    "EnvironmentConfig",
    "EnvironmentKind",
]

ENVIRONMENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")  # the same shape as a binding alias
EnvironmentKind = Literal["host", "service", "brain"]
ENVIRONMENT_KINDS: tuple[EnvironmentKind, ...] = ("host", "service", "brain")
GRANT_MODES = ("read", "read-write")  # of a session's workspace directory
MAX_ENVIRONMENTS = 64  # per host config: every create request's bindings are looked up among them
MAX_COMPONENTS = 64  # per brain environment: each is checked (read and compiled) at startup
MAX_COMPONENT_SECONDS = 600  # a component call's deadline at most
MAX_COMPONENT_MEMORY = 4 << 30  # a component's linear memory at most (4 GiB: wasm32's whole space)
MAX_COMPONENT_WORKERS = 256  # worker processes of one environment running at once, at most
MAX_SPARE_WORKERS = 16  # idle workers of one environment waiting for calls, at most


class ComponentLimitsConfig(StrictModel):
    """What one component call may use: wall time, linear memory, fuel (instructions, roughly);
    how many calls run at once on this instance (`workers`), `tenant_workers` of them for one
    tenant, so one tenant's calls cannot take every worker (or the memory they reserve); and how
    many idle workers wait with the component loaded for the next calls (`spare_workers`)."""

    deadline_seconds: float = Field(default=30.0, gt=0, le=MAX_COMPONENT_SECONDS)
    memory_bytes: int = Field(default=64 << 20, ge=1 << 16, le=MAX_COMPONENT_MEMORY)
    fuel: int = Field(default=1_000_000_000, ge=1)
    workers: int = Field(default=8, ge=1, le=MAX_COMPONENT_WORKERS)
    tenant_workers: int = Field(default=4, ge=1, le=MAX_COMPONENT_WORKERS)
    spare_workers: int = Field(default=1, ge=0, le=MAX_SPARE_WORKERS)

    @model_validator(mode="after")
    def _tenant_share_within_workers(self) -> ComponentLimitsConfig:
        if self.tenant_workers > self.workers:
            raise FieldProblem("tenant_workers", "must be at most workers")
        return self


class EnvironmentConfig(StrictModel):
    """One environment the operator offers to `tenants`."""

    name: str
    kind: EnvironmentKind
    tenants: list[str] = Field(min_length=1)
    # service: tool name -> the name of a tool in the host config's `tools` that implements it
    services: dict[str, str] = Field(default_factory=dict)
    # brain: component files (paths on this server, never a tenant's), and the grants a session's
    # binding may request: {"workspace": ["read", "read-write"]}
    components: list[str] = Field(default_factory=list, max_length=MAX_COMPONENTS)
    grants: dict[Literal["workspace"], list[Literal["read", "read-write"]]] = Field(default_factory=dict)
    limits: ComponentLimitsConfig = Field(default_factory=ComponentLimitsConfig)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not ENVIRONMENT_NAME.fullmatch(value):
            raise ValueError("name must start with a letter: 1-32 of A-Z a-z 0-9 _ -")
        return value

    @model_validator(mode="after")
    def _kind_fields(self) -> EnvironmentConfig:
        if self.kind != "service" and self.services:
            raise FieldProblem("services", "belongs to kind service")
        if self.kind != "brain":
            for key in ("components", "grants"):
                if getattr(self, key):
                    raise FieldProblem(key, "belongs to kind brain")
        if self.kind == "brain" and not self.components:
            raise FieldProblem("components", "a brain environment names at least one component file")
        if self.kind == "service" and not self.services:
            raise FieldProblem("services", "a service environment maps at least one tool to a tool of `tools`")
        return self
