"""`structured_output`: `show_structured_output`, a table, an info block or a form shown to the
user. The payload is validated strictly; a valid one is recorded as a retained
`structured_output` event in the session's log and the model's turn ends with the call's result.
A form's answers arrive as the next user message (a normal `user.message`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from foundation.tool_schemas import compile_schema, first_error
from runners.protocol import ToolDescriptor

from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, parse_parameterless_options, select_parameterless

__all__ = ["STRUCTURED_OUTPUT_EVENT", "StructuredOutputProvider"]

STRUCTURED_OUTPUT_EVENT = "structured_output"
MAX_TEXT = 4000  # characters of one title, body, label or value
MAX_ROWS = 200  # rows of a table a person reads at once
MAX_COLUMNS = 20
MAX_ACTIONS = 5
MAX_DETAIL = 300

_TEXT = {"type": "string", "maxLength": MAX_TEXT}
_LABEL = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
_CELL = {"type": ["string", "number", "boolean", "null"]}
_ACTIONS = {
    "type": "array",
    "maxItems": MAX_ACTIONS,
    "items": {
        "type": "object",
        "properties": {"label": _LABEL, "type": {"enum": ["primary", "secondary"]}, "value": _TEXT},
        "required": ["label", "type", "value"],
        "additionalProperties": False,
    },
}
_OPTION = {
    "type": "object",
    "properties": {"label": _LABEL, "value": _TEXT},
    "required": ["label"],
    "additionalProperties": False,
}
_QUESTION = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
        "label": _LABEL,
        "type": {"enum": ["text", "select", "multiselect"]},
        "options": {"type": "array", "minItems": 2, "maxItems": 5, "items": _OPTION},
        "default": {"type": ["string", "array"], "items": _TEXT, "maxLength": MAX_TEXT},
    },
    "required": ["id", "label", "type"],
    "additionalProperties": False,
    "if": {"properties": {"type": {"enum": ["select", "multiselect"]}}},
    "then": {"required": ["options"]},
    "else": {"not": {"required": ["options"]}},
}
_COMMON = {"output_type": True, "title": _TEXT, "description": _TEXT}
PAYLOAD_SCHEMAS: dict[str, dict[str, object]] = {
    "summary_table": {
        "type": "object",
        "properties": {
            **_COMMON,
            "columns": {"type": "array", "minItems": 1, "maxItems": MAX_COLUMNS, "items": _LABEL},
            "rows": {"type": "array", "minItems": 1, "maxItems": MAX_ROWS},
            "actions": _ACTIONS,
        },
        "required": ["rows"],
        "additionalProperties": False,
        # with columns, each row is one cell per column; without, each row is {label, value}
        "if": {"required": ["columns"]},
        "then": {"properties": {"rows": {"items": {"type": "array", "items": _CELL}}}},
        "else": {
            "properties": {
                "rows": {
                    "items": {
                        "type": "object",
                        "properties": {"label": _LABEL, "value": _CELL},
                        "required": ["label", "value"],
                        "additionalProperties": False,
                    }
                }
            }
        },
    },
    "info": {
        "type": "object",
        "properties": {**_COMMON, "body": _TEXT},
        "required": ["title"],
        "anyOf": [{"required": ["body"]}, {"required": ["description"]}],
        "additionalProperties": False,
    },
    "form": {
        "type": "object",
        "properties": {
            **_COMMON,
            "questions": {"type": "array", "minItems": 1, "maxItems": 5, "items": _QUESTION},
        },
        "required": ["questions"],
        "additionalProperties": False,
    },
}
_VALIDATORS = {kind: compile_schema(schema) for kind, schema in PAYLOAD_SCHEMAS.items()}

OPERATIONS: dict[str, ToolDescriptor] = {
    "show_structured_output": {
        "name": "show_structured_output",
        "description": "Show the user a summary_table (rows of {label, value}, or columns with rows of cells; "
        "optional actions), an info block (title and body) or a form (1-5 questions of type text, select or "
        "multiselect; select questions have 2-5 options). Your turn ends after this call: the user's answer "
        "arrives as their next message.",
        "input_schema": {
            "type": "object",
            "properties": {
                "output_type": {"enum": list(PAYLOAD_SCHEMAS)},
                "title": {"type": "string"},
                "description": {"type": "string"},
                "body": {"type": "string"},
                "columns": {"type": "array", "items": {"type": "string"}},
                "rows": {"type": "array"},
                "actions": {"type": "array"},
                "questions": {"type": "array"},
            },
            "required": ["output_type"],
        },
    }
}


def payload_problem(payload: dict[str, Any]) -> str | None:
    """Why `payload` is not a valid structured output (None when it is)."""
    validator = _VALIDATORS.get(payload.get("output_type", ""))
    if validator is None:
        return f"output_type must be one of {', '.join(PAYLOAD_SCHEMAS)}"
    problem = first_error(validator, payload)
    if problem is None:
        rows = payload.get("rows") or ()
        columns = payload.get("columns")
        if columns is not None and any(len(row) != len(columns) for row in rows):
            return "rows: each row needs exactly one cell per column"
        return None
    where = "/".join(str(part) for part in problem.absolute_path)
    return f"invalid {payload['output_type']}{' at ' + where if where else ''}: {problem.message}"[:MAX_DETAIL]


class StructuredOutputProvider(ToolProvider):
    turn_events: ClassVar[frozenset[str]] = frozenset({STRUCTURED_OUTPUT_EVENT})

    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_parameterless_options(CommonOptions, options, kind="structured output")

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        return select_parameterless(OPERATIONS, operations, parameters, kind="structured output")

    async def handle(self, call: ProviderCall) -> object:
        if call.effects is None:
            raise ProviderError("this tool cannot show output here", reached=False)
        payload = call.arguments
        problem = payload_problem(payload)
        if problem is not None:
            return {"content": [{"type": "text", "text": problem}], "is_error": True}
        call.effects.record(STRUCTURED_OUTPUT_EVENT, {"call_id": call.call_id, **payload})
        call.effects.end()
        answer = (
            "The form is shown to the user; their answers arrive as their next message."
            if payload["output_type"] == "form"
            else f"The {payload['output_type']} is shown to the user."
        )
        return {"content": [{"type": "text", "text": answer + " Your turn ends here."}]}
