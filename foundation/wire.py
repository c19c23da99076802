"""Wire schema bases and the components every app's routes share (Tool, Status, DateTime),
defined once. Request bodies reach these already decoded by brainsite.api's BodyParser, which
refuses lone surrogates, NaN and deep nesting before validation starts."""

from __future__ import annotations

from typing import Annotated

from ninja import Path, Schema
from pydantic import ConfigDict, WithJsonSchema

from .session_ids import SESSION_ID_PATTERN

__all__ = ["SESSION_ID_PATTERN", "DateTime", "SessionId", "StrictSchema", "Status", "Tool", "WireSchema"]

# RFC 3339 text, kept a str: the server writes it once and responses never re-parse it.
DateTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]

# The path parameter `id` (the contract's name). Its pattern is published, not validated:
# services answer a malformed id with 404 like an unknown one (foundation.session_ids).
SessionId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": SESSION_ID_PATTERN}), Path(description="Opaque session ID.")
]


class WireSchema(Schema):
    """A response body: exactly the contract's fields (`additionalProperties: false`)."""

    model_config = ConfigDict(extra="forbid")


class StrictSchema(Schema):
    """A request body: no coercion and no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Tool(StrictSchema):
    name: str
    description: str
    input_schema: object  # any JSON; published as an open schema
    output_schema: object = None


class Status(WireSchema):
    status: str
