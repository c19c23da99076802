"""Wire schemas of the sessions API (openapi.json): strict, unknown fields rejected."""

from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import ConfigDict, model_validator


def _reject_lone_surrogates(value: Any) -> None:
    # JSON may escape half of a UTF-16 pair ("\ud800"); such a string cannot be written as
    # UTF-8 to the event log or the database, so it is a bad request, not a server error.
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise ValueError("strings must be valid Unicode (no lone surrogates)") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_lone_surrogates(key)
            _reject_lone_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _reject_lone_surrogates(item)


class StrictSchema(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        _reject_lone_surrogates(data)
        return data


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
