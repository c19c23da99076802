"""Option models and checks the shipped providers share: strict pydantic at the configuration
edge, parameter schemas, operation selection. Imports no Django."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

from jsonschema import SchemaError
from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from foundation.tool_schemas import compile_schema, first_error
from runners.protocol import ToolDescriptor

from .base import DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS

__all__ = [
    "DEFAULT_OUTPUT_BYTES",
    "MAX_OPERATIONS",
    "MAX_OUTPUT_BYTES",
    "OPERATION_NAME",
    "CommonOptions",
    "Operation",
    "ParameterCheck",
    "StrictOptions",
    "UnknownOperation",
    "check_url",
    "parse_options",
    "parse_parameterless_options",
    "select_operations",
    "select_parameterless",
]

OPERATION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the names a model provider accepts for a tool
MAX_OPERATIONS = 128  # as the runtime bindings: at most 128 tools behind one alias
DEFAULT_OUTPUT_BYTES = 1 << 20  # spec (tools): max_output_bytes defaults to 1 MiB
MAX_OUTPUT_BYTES = 2 << 20  # spec (tools): up to 2 MiB
MAX_DETAIL = 300  # characters of a validation message shown to the client


class StrictOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _check_schema(schema: dict[str, object] | None, what: str) -> None:
    if schema is None:
        return
    try:
        compile_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{what} is not a valid JSON Schema: {str(exc.message)[:200]}") from None


def check_url(value: str) -> str:
    """An absolute http(s) URL without credentials or a fragment (as tool URLs in the host config)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"must be a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http or https URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain credentials")
    if parts.fragment or "#" in value:
        raise ValueError("must not contain a fragment")
    return value


class Operation(StrictOptions):
    """One operation's descriptor, as the operator writes it in the options."""

    name: str
    description: str = Field(min_length=1)
    input_schema: dict[str, object]
    output_schema: dict[str, object] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not OPERATION_NAME.fullmatch(value):
            raise ValueError("operation name must be 1-64 of A-Z a-z 0-9 _ -")
        return value

    @model_validator(mode="after")
    def _schemas(self) -> Operation:
        _check_schema(self.input_schema, f"operation {self.name!r}: input_schema")
        _check_schema(self.output_schema, f"operation {self.name!r}: output_schema")
        return self

    def descriptor(self) -> ToolDescriptor:
        value: ToolDescriptor = {"name": self.name, "description": self.description, "input_schema": self.input_schema}
        if self.output_schema is not None:
            value["output_schema"] = self.output_schema
        return value


class CommonOptions(StrictOptions):
    """What every shipped provider accepts: who may bind it, its deadline and output limit, and
    the JSON Schema its bindings' `parameters` must match (an object, by default)."""

    tenants: list[str] | None = None
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, ge=1, le=MAX_TIMEOUT_SECONDS)
    max_output_bytes: int = Field(default=DEFAULT_OUTPUT_BYTES, ge=1, le=MAX_OUTPUT_BYTES)
    parameters_schema: dict[str, object] | None = None

    @model_validator(mode="after")
    def _parameters_schema(self) -> CommonOptions:
        _check_schema(self.parameters_schema, "parameters_schema")
        return self


M = TypeVar("M", bound=BaseModel)
C = TypeVar("C", bound=CommonOptions)


def parse_options(model: type[M], options: Mapping[str, object]) -> M:
    """Options decoded strictly; ValueError naming the first option at fault."""
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(part) for part in first["loc"]) or "options"
        message = "unknown option" if first["type"] == "extra_forbidden" else first["msg"]
        raise ValueError(f"{location}: {message.removeprefix('Value error, ')}") from None


def parse_parameterless_options(model: type[C], options: Mapping[str, object], *, kind: str) -> C:
    """Options of a provider whose bindings take no parameters: a parameters_schema is refused."""
    settings = parse_options(model, options)
    if settings.parameters_schema is not None:
        raise ValueError(f"parameters_schema: {kind} bindings take no parameters")
    return settings


class ParameterCheck:
    """A binding's `parameters` checked against the provider's schema; absent parameters are
    checked as an empty object."""

    def __init__(self, schema: dict[str, object] | None) -> None:
        self._validator: Validator = compile_schema(schema if schema is not None else {"type": "object"})

    def check(self, parameters: object) -> None:
        problem = first_error(self._validator, {} if parameters is None else parameters)
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path)
            message = f"parameters{' at ' + where if where else ''}: {problem.message}"
            raise ValueError(message[:MAX_DETAIL])


class UnknownOperation(ValueError):
    """A binding names an operation its provider does not serve (the operation is at fault, not
    the parameters)."""


def select_operations(served: Mapping[str, ToolDescriptor], operations: Sequence[str]) -> list[ToolDescriptor]:
    """The descriptors of `operations` in the order asked (all served ones when empty);
    UnknownOperation for one not served, ValueError for a repeated one."""
    if not operations:
        return list(served.values())
    chosen: list[ToolDescriptor] = []
    for operation in operations:
        if operation not in served:
            known = ", ".join(served) or "none"
            message = f"unknown operation {str(operation)[:64]!r} (this provider serves: {known})"
            raise UnknownOperation(message[:MAX_DETAIL])
        if any(descriptor["name"] == operation for descriptor in chosen):
            raise ValueError(f"operation {operation!r} is listed twice")
        chosen.append(served[operation])
    return chosen


def select_parameterless(
    served: Mapping[str, ToolDescriptor], operations: Sequence[str], parameters: object, *, kind: str
) -> list[ToolDescriptor]:
    """`select_operations` for a provider whose bindings take no parameters (absent or {})."""
    if parameters not in (None, {}):
        raise ValueError(f"parameters: {kind} bindings take no parameters")
    return select_operations(served, operations)
