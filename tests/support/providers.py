"""Installed tool providers for the provider tests (loaded by dotted path, in-process or by a
real runbrain).

`ProbeProvider` operations:
  echo {text}     -> structured {identity, parameters, arguments, credential, progress sent}
  hang {}         -> never answers; writes `<marks>/<call_id>.started`, then `.cancelled` when
                     cancelled (the deadline or an interrupt)
  fail {reached}  -> ProviderError(reached)
  shape {}        -> a result that does not match its output schema
Options: the common ones plus `marks` (a directory) and `description` (of echo, to change it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from runners.protocol import ToolDescriptor
from tools_app.providers.base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider

PARAMETERS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "maxLength": 32}},
    "required": ["label"],
    "additionalProperties": False,
}
OPTION_KEYS = frozenset({"tenants", "timeout_seconds", "marks", "description"})


def _operations(description: str) -> dict[str, ToolDescriptor]:
    return {
        "echo": {
            "name": "echo",
            "description": description,
            "input_schema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
        "hang": {"name": "hang", "description": "Never answer.", "input_schema": {"type": "object"}},
        "fail": {
            "name": "fail",
            "description": "Fail.",
            "input_schema": {"type": "object", "properties": {"reached": {"type": "boolean"}}},
        },
        "shape": {
            "name": "shape",
            "description": "Answer off its schema.",
            "input_schema": {"type": "object"},
            "output_schema": {"type": "object", "required": ["count"]},
        },
    }


class ProbeProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, Any], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        unknown = set(options) - OPTION_KEYS
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]}: unknown option")
        self.marks = Path(options["marks"]) if "marks" in options else None
        self.served = _operations(options.get("description", "Echo text with the call's identity."))
        self.parameters_validator = Draft202012Validator(PARAMETERS_SCHEMA)
        self.closed = False

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: Any) -> list[ToolDescriptor]:
        errors = sorted(self.parameters_validator.iter_errors(parameters if parameters is not None else {}), key=str)
        if errors:
            raise ValueError(f"parameters: {errors[0].message}")
        for operation in operations:
            if operation not in self.served:
                raise ValueError(f"unknown operation {operation!r}")
        return [self.served[name] for name in (operations or self.served)]

    async def handle(self, call: ProviderCall) -> Any:
        if call.operation == "echo":
            call.progress({"stage": "echoing"})
            return {
                "content": [{"type": "text", "text": call.arguments["text"]}],
                "structured_content": {
                    "identity": {
                        "tenant": call.tenant,
                        "session_id": call.session_id,
                        "call_id": call.call_id,
                        "alias": call.alias,
                        "operation": call.operation,
                    },
                    "parameters": call.parameters,
                    "arguments": call.arguments,
                    "credential": call.credential,
                    "reads_session": call.session is not None,
                },
            }
        if call.operation == "hang":
            self._mark(call, "started")
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self._mark(call, "cancelled")
                raise
            return {"content": [{"type": "text", "text": "late"}]}
        if call.operation == "fail":
            raise ProviderError("the probe failed", reached=bool(call.arguments.get("reached")))
        return {"structured_content": {"total": 1}}

    def _mark(self, call: ProviderCall, what: str) -> None:
        if self.marks is not None:
            self.marks.mkdir(parents=True, exist_ok=True)
            (self.marks / f"{call.call_id}.{what}").write_text(call.alias)

    async def aclose(self) -> None:
        self.closed = True


class NotAProvider:
    """A class that does not implement the contract (refused at startup)."""
