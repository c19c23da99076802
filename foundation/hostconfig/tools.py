"""The host config's operator tools: one entry per tool, checked per transport."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from runners.protocol import ToolDescriptor

from ..rest_templates import RestTemplate, TemplateError, check_rest_template
from .base import FieldProblem, StrictModel, check_url

__all__ = ["TOOL_NAME", "TOOL_TRANSPORTS", "ToolBindingConfig"]

TOOL_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,63}$")  # used with fullmatch: `$` alone admits a trailing "\n"
MAX_APPROVAL_SECONDS = 7 * 86400  # a call waits at most a week for a person's decision
MAX_SCHEMA_PROBLEM = 200  # characters of a schema refusal quoted in a config error
TOOL_TRANSPORTS = ("http", "mcp", "provider", "rest")


class ToolBindingConfig(StrictModel):
    """One operator tool. `transport: provider` serves it through an installed tool provider's
    `operation` with `parameters` (no url); its description and input schema default to the
    provider's descriptor, filled in at startup (tools_app.provider_tools)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    url: str = ""
    tenants: list[str] = Field(min_length=1)
    token_env: str = ""
    transport: str = ""
    mcp_tool: str = ""
    # transport "rest": a plain REST request filled from the arguments (foundation.rest_templates)
    method: str = ""
    query: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None
    timeout_seconds: int = Field(default=300, ge=1, le=86400)
    max_output_bytes: int = Field(default=1 << 20, ge=1, le=2 << 20)
    inspect_session: bool = False
    # confirm before: each call waits for a person's decision (POST .../approvals/{id}) and is
    # an error result when rejected or when no decision arrives within approval_timeout_seconds
    require_approval: bool = False
    approval_timeout_seconds: int = Field(default=600, ge=1, le=MAX_APPROVAL_SECONDS)
    provider: str = ""
    operation: str = ""
    parameters: Any = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME.fullmatch(value):
            raise ValueError("name must match ^[a-zA-Z][a-zA-Z0-9_]{0,63}$")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value) if value else value

    @model_validator(mode="after")
    def _transport(self) -> ToolBindingConfig:
        if self.inspect_session and self.mcp_tool:
            raise FieldProblem("inspect_session", "cannot be combined with mcp_tool")
        transport = self.effective_transport
        if transport not in TOOL_TRANSPORTS:
            raise FieldProblem("transport", f"unknown transport {transport!r}")
        if transport == "provider":
            self._check_provider_fields()
        else:
            for key in ("provider", "operation", "parameters"):
                if getattr(self, key) not in (None, ""):
                    raise FieldProblem(key, "belongs to transport provider")
            for key in ("url", "description", "input_schema"):
                if getattr(self, key) in (None, ""):
                    raise FieldProblem(key, f"is required by transport {transport}")
        if transport == "mcp" and not self.mcp_tool:
            raise FieldProblem("mcp_tool", "is required by transport mcp")
        for key in ("input_schema", "output_schema"):
            schema = getattr(self, key)
            if schema is None:
                continue
            from ..tool_schemas import schema_problem  # jsonschema loads only when a config has tools

            problem = schema_problem(schema)
            if problem:
                raise FieldProblem(key, f"tool {self.name!r}: {problem[:MAX_SCHEMA_PROBLEM]}")
        self._check_rest(transport)
        return self

    def _check_rest(self, transport: str) -> None:
        if transport != "rest":
            for key in ("method", "query", "headers", "body"):
                if getattr(self, key) not in ("", {}, None):
                    raise FieldProblem(key, "is only for transport rest")
            return
        for key in ("mcp_tool", "inspect_session"):
            if getattr(self, key):
                raise FieldProblem(key, "cannot be combined with transport rest")
        template = self.rest_template()
        assert template is not None  # transport is rest
        properties = (self.input_schema or {}).get("properties")
        try:
            check_rest_template(template, properties if isinstance(properties, dict) else {})
        except TemplateError as exc:
            raise FieldProblem(exc.field, str(exc)) from None

    def _check_provider_fields(self) -> None:
        if not self.provider:
            raise FieldProblem("provider", "is required by transport provider: an installed provider's name")
        if not self.operation:
            raise FieldProblem("operation", "is required by transport provider")
        for key in ("url", "mcp_tool", "token_env"):
            if getattr(self, key):
                raise FieldProblem(key, "is not allowed with transport provider")
        if self.inspect_session:
            raise FieldProblem("inspect_session", "is not allowed with transport provider")

    @property
    def effective_transport(self) -> str:
        return self.transport or ("mcp" if self.mcp_tool else "http")

    def rest_template(self) -> RestTemplate | None:
        """The request of a `rest` binding (method GET unless named); None for other transports."""
        if self.effective_transport != "rest":
            return None
        return RestTemplate(
            method=self.method or "GET",
            url=self.url,
            query=tuple(self.query.items()),
            headers=tuple(self.headers.items()),
            body=self.body,
        )

    @property
    def provider_backed(self) -> bool:
        return self.effective_transport == "provider"

    def descriptor(self) -> ToolDescriptor:
        value: ToolDescriptor = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema or {"type": "object"},
        }
        if self.output_schema is not None:
            value["output_schema"] = self.output_schema
        return value
