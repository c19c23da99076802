"""Wire schemas of the sessions API, named as the contract's components (openapi.json):
strict request bodies, and response bodies that handlers returning a dict are checked against.
Imported only by sessions_app.api and the URL wiring."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, WithJsonSchema, model_validator

__all__ = [
    "Checkpoint",
    "CreateSession",
    "CredentialInput",
    "Event",
    "EventList",
    "Input",
    "SendAccepted",
    "Session",
    "SessionConfig",
    "SessionList",
    "Status",
    "Tool",
    "ToolBinding",
]

# RFC 3339 text, kept a str: the server writes it once and responses never re-parse it.
DateTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


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


class WireSchema(Schema):
    """A response body: exactly the contract's fields (`additionalProperties: false`)."""

    model_config = ConfigDict(extra="forbid")


class StrictSchema(Schema):
    """A request body: no coercion, no unknown fields, valid Unicode throughout."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        _reject_lone_surrogates(data)
        return data


class Tool(StrictSchema):
    name: str
    description: str
    input_schema: Any
    output_schema: Any = None


class ToolBinding(StrictSchema):
    alias: str
    executor: str | None = None
    operations: list[str] | None = None
    parameters: Any = None
    provider: str | None = None
    runtime: list[Tool] | None = None


class SessionConfig(StrictSchema):
    model: str
    tools: list[str]
    instructions: str | None = None
    reasoning_effort: str | None = None
    bindings: list[ToolBinding] | None = None


class CredentialInput(StrictSchema):
    binding: str
    value: Any


class CreateSession(StrictSchema):
    harness: str
    config: SessionConfig
    credentials: list[CredentialInput] | None = None


class Input(StrictSchema):
    """`user.message` or `user.interrupt`. A `delivery` outside the enum is 400, but the
    reserved "steer" is in it so that services can answer 422 `unsupported` (spec)."""

    type: Literal["user.message", "user.interrupt"]
    text: str | None = None
    key: str | None = None
    delivery: Literal["queue", "steer"] | None = None


class Checkpoint(WireSchema):
    id: str
    offset: int
    time: DateTime


class Session(WireSchema):
    id: str
    harness: str
    config: SessionConfig
    status: str
    created_at: DateTime
    updated_at: DateTime
    descriptors: list[Tool]
    checkpoint: Checkpoint | None = None
    credential_bindings: list[str] | None = None


class SessionList(WireSchema):
    sessions: list[Session]


class Event(WireSchema):
    id: str
    type: str
    time: DateTime
    data: Any
    input_id: str | None = None
    cursor: str | None = None


class EventList(WireSchema):
    events: list[Event]
    next_cursor: str


class Status(WireSchema):
    status: str


def _one_of(schema: dict[str, Any]) -> None:
    # A send answers exactly one of the two shapes, which the contract spells `oneOf`;
    # pydantic spells every union `anyOf`.
    schema["oneOf"] = schema.pop("anyOf")


# 202 of a send: the recorded user.message Event, or Status for an interrupt.
SendAccepted = Annotated[Event | Status, Field(json_schema_extra=_one_of)]
