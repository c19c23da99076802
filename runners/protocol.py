"""RunnerFrame wire types shared by Brain and every harness runner, and the frame codec.

Newline-delimited JSON on the child's stdin/stdout (adapters-harness). Frames are encoded and
decoded with orjson when it is installed and with the stdlib otherwise; both paths accept exactly
the same values (`encode_json` / `decode_json`). No Django or server app: runners import this.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, NoReturn, NotRequired, TypedDict

from runners.accounting import MODEL_REQUEST

try:
    import orjson
except ImportError:  # runners may run where orjson is absent: the stdlib codec below takes over
    orjson = None  # type: ignore[assignment]  # the module or None, checked once at import

__all__ = [
    "BRAIN_METHODS",
    "END_TURN",
    "EVENT_NAMES",
    "MAX_DEPTH",
    "MAX_FRAME",
    "MAX_TOOL_CALLS",
    "ERROR_CODES",
    "ContentPart",
    "DeltaData",
    "ErrorBody",
    "Frame",
    "FrameError",
    "JSONObject",
    "MessageData",
    "NativeFile",
    "PromptResult",
    "ToolCallParams",
    "ToolCallResult",
    "ToolDescriptor",
    "OpenParams",
    "ProviderOptions",
    "UsageData",
    "decode_frame",
    "decode_json",
    "encode_frame",
    "encode_json",
    "validate_native_files",
]

MAX_FRAME = 4 << 20  # spec: each line is capped at 4 MiB (MaxFrame = 4 << 20)
MAX_TOOL_CALLS = 32  # spec: up to 32 concurrent reverse tool calls per runner
# Containers nested deeper than this (the frame object is level 1) are refused on both sides:
# well under orjson's encoder limit (254) and the stdlib's recursion limit, so the rule decides,
# never whichever library happens to run.
MAX_DEPTH = 128
# The integers orjson can encode; the stdlib codec enforces the same range so both sides agree.
MIN_INTEGER = -(1 << 63)
MAX_INTEGER = (1 << 64) - 1

# Requests Brain sends on stdin.
BRAIN_METHODS = frozenset({"open", "prompt", "steer", "interrupt", "checkpoint", "detach"})
# Events a runner may emit on stdout while a prompt runs (`model.request`: runners/accounting.py).
EVENT_NAMES = frozenset({"assistant.delta", "assistant.message", MODEL_REQUEST})
# A key Brain may add to a tool.call reply's result: the model's turn ends once the runner has
# the result (the tool showed the user something and waits for their next message). A runner
# records the results it has, makes no further model call in this turn and settles the prompt;
# a runner that ignores it stays conformant.
END_TURN = "end_turn"
# Error codes a runner may put in an error reply.
ERROR_CODES = frozenset({"provider_error", "brain_error"})

# RunnerFrame fields (Go struct RunnerFrame); anything else is a framing violation.
_FIELDS = frozenset({"attachment", "turn", "id", "method", "params", "result", "error", "event", "data"})
_STRING_FIELDS = ("attachment", "turn", "id", "method", "event")
# An integer literal outside [MIN_INTEGER, MAX_INTEGER] has at least 19 digits; orjson would
# silently turn it into a float, so such lines are decided by the exact (stdlib) path.
# (bytes.translate and a substring search run at memory speed; a regex is ten times slower)
_DIGITS_AS_ZEROS = bytes(48 if 48 <= byte <= 57 else 46 for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19
# Only a \uD800-\uDFFF escape can produce a lone surrogate (raw ones are not UTF-8).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Non-finite floats by repr, named as the stdlib spells the literals it would (wrongly) accept.
_CONSTANTS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_ENCODE_ERROR = "frame is not JSON-serialisable: "
_DECODE_ERROR = "frame is not JSON: "


class FrameError(ValueError):
    """A line that is not a valid RunnerFrame: broken framing, fatal for the host."""


class Frame(TypedDict, total=False):
    attachment: str
    turn: str
    id: str
    method: str
    params: Any
    result: Any
    error: dict[str, str]
    event: str
    data: Any


class ProviderOptions(TypedDict, total=False):
    api_key: str
    base_url: str
    api: str


class ToolDescriptor(TypedDict, total=False):
    name: str
    description: str
    input_schema: Any
    output_schema: Any


class OpenParams(TypedDict):
    session_id: str
    dir: str
    config: dict[str, Any]
    tools: list[ToolDescriptor]
    provider: ProviderOptions


class NativeFile(TypedDict):
    path: str
    size: int
    append_only: bool


# The params, results and event data of each frame (the table in adapters-harness). A JSON
# object whose members the reader narrows one by one is a JSONObject.
JSONObject = dict[str, object]


class ErrorBody(TypedDict):
    """An error reply's `error`: code is one of ERROR_CODES."""

    code: str
    message: str


class PromptResult(TypedDict, total=False):
    """The result of `prompt`: `{}`, or `{"interrupted": true}` when a turn was stopped."""

    interrupted: bool


class ToolCallParams(TypedDict):
    """A runner's reverse `tool.call`: the runner's own call id (TOOL_CALL_ID), tool, arguments;
    for a placed tool (config.placement) the environment the harness chose and the canonical
    input, unwrapped from any selector the model saw."""

    id: str
    name: str
    arguments: JSONObject
    environment: NotRequired[str]


class ContentPart(TypedDict, total=False):
    type: str
    text: str


class ToolCallResult(TypedDict, total=False):
    """Brain's reply to a `tool.call` (the tool result; END_TURN may be added)."""

    content: list[ContentPart]
    structured_content: object
    is_error: bool
    unknown_outcome: bool
    end_turn: bool


class DeltaData(TypedDict):
    """`assistant.delta` (live only): a piece of the text being generated."""

    text: str


class UsageData(TypedDict):
    input: int
    output: int


class MessageData(TypedDict):
    """`assistant.message` (retained): one whole generation."""

    text: str
    usage: UsageData
    stop_reason: str


# The JSON rules ------------------------------------------------------------------------------
#
# Both codecs accept exactly: objects with string keys, arrays, strings without lone surrogates,
# integers in [MIN_INTEGER, MAX_INTEGER], finite floats, true/false/null, nested at most
# MAX_DEPTH deep. The stdlib codec is the reference; the orjson codec is a fast path that defers
# to it whenever orjson fails or cannot tell (so error messages are identical too).


class _Codec(NamedTuple):
    name: str
    encode: Callable[[object], bytes]  # compact UTF-8 JSON, no newline; raises FrameError
    decode: Callable[[bytes], Any]  # raises FrameError


class _NotJson(ValueError):
    """A value outside the JSON rules; the message is the same from either codec."""


def _check_value(value: object) -> None:
    """Walk `value` (iteratively: depth is bounded by the rule, not by the C stack)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise _NotJson("lone surrogate in a string")
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if not MIN_INTEGER <= item <= MAX_INTEGER:
                raise _NotJson("integer out of the 64-bit range")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _NotJson(f"{_CONSTANTS[repr(item)]} is not JSON")
        elif isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise _NotJson(f"nested deeper than {MAX_DEPTH} levels")
            for key, member in item.items():
                if not isinstance(key, str):
                    raise _NotJson("object keys must be strings")
                stack.append((key, depth))
                stack.append((member, depth + 1))
        elif isinstance(item, list | tuple):
            if depth > MAX_DEPTH:
                raise _NotJson(f"nested deeper than {MAX_DEPTH} levels")
            stack.extend((member, depth + 1) for member in item)
        else:
            raise _NotJson(f"Object of type {type(item).__name__} is not JSON serializable")


def _too_deep(value: object) -> bool:
    """Containers only, level by level: the cheap check for values orjson read or wrote."""
    level = [value]
    depth = 1
    while level:
        if depth > MAX_DEPTH:
            return True
        nested: list[object] = []
        for item in level:
            members: Iterable[object] = (
                item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else ()
            )
            nested.extend([member for member in members if isinstance(member, dict | list | tuple)])
        level = nested
        depth += 1
    return False


def _might_nest_too_deep(line: bytes) -> bool:
    return line.count(b"[") + line.count(b"{") > MAX_DEPTH


def _reject_constant(name: str) -> NoReturn:
    raise _NotJson(f"{name} is not JSON")


def _checked_int(text: str) -> int:
    if len(text) > 21:  # longer than any in-range literal; int() would refuse past 4300 digits anyway
        raise _NotJson("integer out of the 64-bit range")
    value = int(text)
    if not MIN_INTEGER <= value <= MAX_INTEGER:
        raise _NotJson("integer out of the 64-bit range")
    return value


def _checked_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses as Infinity, which JSON cannot carry
        raise _NotJson(f"{_CONSTANTS[repr(value)]} is not JSON")
    return value


def _encode_stdlib(value: object) -> bytes:
    try:
        _check_value(value)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise FrameError(_ENCODE_ERROR + str(exc)) from None


def _decode_stdlib(line: bytes) -> Any:
    try:
        # decode as UTF-8 ourselves: json.loads(bytes) would also accept UTF-16 and UTF-32
        text = line.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant, parse_int=_checked_int, parse_float=_checked_float)
    except RecursionError:
        raise FrameError(f"{_DECODE_ERROR}nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and the rules above
        raise FrameError(_DECODE_ERROR + str(exc)) from None
    if _SURROGATE_ESCAPE.search(text) or _might_nest_too_deep(line):
        try:
            _check_value(value)
        except _NotJson as exc:
            raise FrameError(_DECODE_ERROR + str(exc)) from None
    return value


def _encode_orjson(value: object) -> bytes:
    try:
        line: bytes = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME)
    except TypeError:  # out-of-range integer, lone surrogate, odd key or type, recursion
        return _encode_stdlib(value)  # refuses too, with the reference message
    if b"null" in line:  # orjson writes NaN and Infinity as null
        try:
            _check_value(value)
        except _NotJson as exc:
            raise FrameError(_ENCODE_ERROR + str(exc)) from None
    elif _might_nest_too_deep(line) and _too_deep(value):  # written, but never read back
        raise FrameError(f"{_ENCODE_ERROR}nested deeper than {MAX_DEPTH} levels")
    return line


def _decode_orjson(line: bytes) -> Any:
    if _LONG_DIGIT_RUN in line.translate(_DIGITS_AS_ZEROS):
        return _decode_stdlib(line)  # orjson reads an out-of-range integer as a float
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _decode_stdlib(line)  # refuses too, with the reference message
    if _might_nest_too_deep(line) and _too_deep(value):
        raise FrameError(f"{_DECODE_ERROR}nested deeper than {MAX_DEPTH} levels")
    return value


STDLIB_CODEC = _Codec("stdlib", _encode_stdlib, _decode_stdlib)
ORJSON_CODEC = _Codec("orjson", _encode_orjson, _decode_orjson) if orjson is not None else None
_CODEC = ORJSON_CODEC or STDLIB_CODEC


def encode_json(value: object) -> bytes:
    """`value` as compact UTF-8 JSON under the frame rules; FrameError if it breaks one."""
    return _CODEC.encode(value)


def decode_json(data: bytes) -> Any:
    """Strict UTF-8 JSON under the frame rules; FrameError for anything else."""
    if not isinstance(data, bytes | bytearray):
        raise FrameError(f"{_DECODE_ERROR}{type(data).__name__} is not bytes")
    return _CODEC.decode(bytes(data))


# Frames --------------------------------------------------------------------------------------


def _check_frame(value: object) -> None:
    if not isinstance(value, dict):
        raise FrameError("frame is not a JSON object")
    unknown = value.keys() - _FIELDS
    if unknown:
        raise FrameError(f"unknown frame field {sorted(unknown, key=str)[0]!r}")
    for name in _STRING_FIELDS:
        if name in value and not isinstance(value[name], str):
            raise FrameError(f"frame field {name!r} must be a string")
    if not isinstance(value.get("attachment"), str):
        raise FrameError("frame has no attachment")
    error = value.get("error")
    if error is not None and not (
        isinstance(error, dict)
        and isinstance(error.get("code"), str)
        and isinstance(error.get("message", ""), str)
        and error.keys() <= {"code", "message"}
    ):
        raise FrameError("frame error must be {code, message}")


def encode_frame(frame: Frame) -> bytes:
    """One frame as a newline-terminated UTF-8 line; refuses what `decode_frame` would refuse."""
    _check_frame(frame)
    line = _CODEC.encode(frame)
    if len(line) >= MAX_FRAME:
        raise FrameError(f"frame of {len(line)} bytes exceeds {MAX_FRAME}")
    return line + b"\n"


def decode_frame(line: bytes) -> Frame:
    """Strictly decode one line: a JSON object with only RunnerFrame fields."""
    if isinstance(line, bytes | bytearray) and len(line) > MAX_FRAME:
        raise FrameError(f"frame of {len(line)} bytes exceeds {MAX_FRAME}")
    value = decode_json(line)
    _check_frame(value)
    return value  # type: ignore[no-any-return]  # checked field by field above


def validate_native_files(value: object) -> list[NativeFile]:
    """Check a checkpoint result: relative, normalised paths with integer sizes."""
    if not isinstance(value, list):
        raise FrameError("checkpoint result must be a list")
    files: list[NativeFile] = []
    seen: set[str] = set()
    for item in value:
        if not isinstance(item, dict) or not item.keys() <= {"path", "size", "append_only"}:
            raise FrameError("checkpoint entry must be {path, size, append_only}")
        path, size = item.get("path"), item.get("size")
        if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
            raise FrameError(f"checkpoint path {path!r} must be relative")
        if any(part in ("", ".", "..") for part in path.split("/")):
            raise FrameError(f"checkpoint path {path!r} must be normalised")
        if path in seen:
            raise FrameError(f"checkpoint path {path!r} listed twice")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FrameError(f"checkpoint size for {path!r} must be a non-negative integer")
        append_only = item.get("append_only", False)
        if not isinstance(append_only, bool):
            raise FrameError("append_only must be a boolean")
        seen.add(path)
        files.append({"path": path, "size": size, "append_only": append_only})
    return files
