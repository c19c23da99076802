"""Wire schemas of the sessions API (openapi.json): strict, unknown fields rejected."""

from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import ConfigDict


class StrictSchema(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)


class ToolBindingIn(StrictSchema):
    alias: str
    executor: str | None = None
    operations: list[str] | None = None
    parameters: Any = None
    provider: str | None = None
    runtime: list[dict[str, Any]] | None = None


class SessionConfigIn(StrictSchema):
    model: str
    tools: list[str]
    instructions: str | None = None
    reasoning_effort: str | None = None
    bindings: list[ToolBindingIn] | None = None


class CredentialIn(StrictSchema):
    binding: str
    value: Any


class CreateSessionIn(StrictSchema):
    harness: str
    config: SessionConfigIn
    credentials: list[CredentialIn] | None = None


class InputIn(StrictSchema):
    type: str
    text: str | None = None
    key: str | None = None
    delivery: str | None = None
