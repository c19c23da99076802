"""Wire schema bases and the components every app's routes share (Tool, Status, DateTime),
defined once. Request bodies reach these already decoded by brainsite.api's BodyParser, which
refuses lone surrogates, NaN and deep nesting before validation starts."""

from __future__ import annotations

from typing import Annotated, Any

from ninja import Schema
from pydantic import ConfigDict, WithJsonSchema

__all__ = ["DateTime", "StrictSchema", "Status", "Tool", "WireSchema"]

# RFC 3339 text, kept a str: the server writes it once and responses never re-parse it.
DateTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


class WireSchema(Schema):
    """A response body: exactly the contract's fields (`additionalProperties: false`)."""

    model_config = ConfigDict(extra="forbid")


class StrictSchema(Schema):
    """A request body: no coercion and no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Tool(StrictSchema):
    name: str
    description: str
    input_schema: Any
    output_schema: Any = None


class Status(WireSchema):
    status: str
