"""What one tool call ends in: the model-visible result, its outcome, and the strict check of a
tool's raw result object. Pure values and checks; imports no Django, runtime or transport."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict

import orjson
from jsonschema.protocols import Validator

from foundation.errors import Overloaded
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import first_error

__all__ = [
    "MAX_ERROR_DETAIL",
    "CallCancelled",
    "CallResult",
    "InvalidResult",
    "Invocation",
    "Outcome",
    "check_result",
    "checked_invocation",
    "detail",
    "error_result",
]

RESULT_FIELDS = frozenset({"content", "is_error", "structured_content", "unknown_outcome"})
CONTENT_FIELDS = {"text": frozenset({"type", "text"}), "image": frozenset({"type", "data", "mime_type"})}
MAX_ERROR_DETAIL = 300  # characters of a validation or tool message shown to the model


class CallResult(TypedDict, total=False):
    """The model-visible result of one call (openapi `Result`, the `result` of a tool.result)."""

    content: list[dict[str, str]]
    structured_content: Any  # the tool's JSON value, as the output schema allows
    is_error: bool
    unknown_outcome: bool


class Outcome(StrEnum):
    """How a call ended, recorded beside its result (tool.result `outcome`)."""

    OK = "ok"
    ERROR = "error"  # known not to have happened, or the tool reported a failure
    TIMEOUT = "timeout"  # the deadline passed; the remote outcome is unknown
    CANCELLED = "cancelled"  # an interrupt or close stopped it
    UNKNOWN = "unknown"  # it may have run; its result cannot be established
    # a placed tool's input its schema refuses: nothing was executed
    INVALID_INPUT = "invalid_input"
    # a placed tool's successful output its output schema refuses: the model sees an error instead
    INVALID_OUTPUT = "invalid_output"


@dataclass(frozen=True, slots=True)
class Invocation:
    result: CallResult
    outcome: Outcome
    # events the call records in the session's log before its tool.result (a provider's
    # `turn_events`), and whether the model's turn ends once the runner has this result
    events: tuple[tuple[str, object], ...] = ()
    end_turn: bool = False

    @classmethod
    def failed(cls, message: str, *, outcome: Outcome = Outcome.ERROR) -> Invocation:
        unknown = outcome in (Outcome.TIMEOUT, Outcome.UNKNOWN, Outcome.CANCELLED)
        return cls(error_result(message, unknown_outcome=unknown), outcome)


class CallCancelled(Exception):
    """The call was cancelled (interrupt, close) after its request went to the service."""


class InvalidResult(Exception):
    pass


def error_result(message: str, *, unknown_outcome: bool = False) -> CallResult:
    result: CallResult = {"content": [{"type": "text", "text": message}], "is_error": True}
    if unknown_outcome:
        result["unknown_outcome"] = True
    return result


def detail(message: str) -> str:
    """`message` cut to what the model is shown of a tool's or a validator's words."""
    return message if len(message) <= MAX_ERROR_DETAIL else message[: MAX_ERROR_DETAIL - 1] + "…"


async def checked_invocation(raw: object, output: Validator | None, name: str, *, schemas: SchemaWorkers) -> Invocation:
    """A tool's raw result object, strictly checked (an invalid one is an unknown outcome).
    Checked against an output schema on `schemas`' threads, within the validation budgets: the
    tenant's schema and the tool's value (up to max_output_bytes) decide the cost, never the
    event loop's."""
    try:
        if output is None:
            result = check_result(raw, output)
        else:
            result = await schemas.run(lambda: check_result(raw, output))
    except InvalidResult as exc:
        return Invocation.failed(detail(f"tool {name!r} returned an invalid result: {exc}"), outcome=Outcome.UNKNOWN)
    except Overloaded as exc:
        return Invocation.failed(
            detail(f"tool {name!r} returned a result that could not be checked: {exc.message}"),
            outcome=Outcome.UNKNOWN,
        )
    if not result.get("is_error"):
        return Invocation(result, Outcome.OK)
    return Invocation(result, Outcome.UNKNOWN if result.get("unknown_outcome") else Outcome.ERROR)


def _check_content(content: object) -> list[dict[str, str]]:
    if not isinstance(content, list):
        raise InvalidResult("content must be an array")
    for index, item in enumerate(content):
        kind = item.get("type") if isinstance(item, dict) else None
        fields = CONTENT_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            raise InvalidResult(f"content[{index}] has an unknown type")
        if item.keys() != fields or not all(isinstance(item[key], str) for key in fields):
            raise InvalidResult(f"content[{index}] must have exactly the string fields {', '.join(sorted(fields))}")
        if item["type"] == "image":
            try:
                base64.b64decode(item["data"], validate=True)
            except (binascii.Error, ValueError):
                raise InvalidResult(f"content[{index}].data is not base64") from None
    return content


def check_result(value: object, output: Validator | None) -> CallResult:
    """The tool's result, strictly checked; a structured-only result gets a JSON text block."""
    if not isinstance(value, dict):
        raise InvalidResult("the result must be a JSON object")
    unknown = value.keys() - RESULT_FIELDS
    if unknown:
        raise InvalidResult(f"unknown result field {sorted(unknown)[0]!r}")
    for key in ("is_error", "unknown_outcome"):
        if key in value and not isinstance(value[key], bool):
            raise InvalidResult(f"{key} must be a boolean")
    raw_content = value.get("content")
    content = _check_content(raw_content) if raw_content is not None else None
    structured = value.get("structured_content")
    if not content and structured is None:
        raise InvalidResult("the result has neither content nor structured_content")
    is_error = value.get("is_error") is True
    if structured is not None and not is_error and output is not None:
        problem = first_error(output, structured)
        if problem is not None:
            raise InvalidResult(f"structured_content does not match output_schema: {problem.message}")
    result: CallResult = {"content": content or [{"type": "text", "text": orjson.dumps(structured).decode()}]}
    if structured is not None:
        result["structured_content"] = structured
    if is_error:
        result["is_error"] = True
        if value.get("unknown_outcome") is True:
            result["unknown_outcome"] = True
    return result
