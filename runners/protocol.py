"""RunnerFrame wire types shared by Brain and every harness runner.

Newline-delimited JSON on the child's stdin/stdout (adapters-harness). Stdlib only: runners
import this module without Django or any of the server's apps.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

__all__ = [
    "BRAIN_METHODS",
    "EVENT_NAMES",
    "MAX_FRAME",
    "MAX_TOOL_CALLS",
    "ERROR_CODES",
    "Frame",
    "FrameError",
    "NativeFile",
    "ToolDescriptor",
    "OpenParams",
    "ProviderOptions",
    "decode_frame",
    "encode_frame",
    "validate_native_files",
]

MAX_FRAME = 4 << 20  # spec: each line is capped at 4 MiB (MaxFrame = 4 << 20)
MAX_TOOL_CALLS = 32  # spec: up to 32 concurrent reverse tool calls per runner

# Requests Brain sends on stdin.
BRAIN_METHODS = frozenset({"open", "prompt", "steer", "interrupt", "checkpoint", "detach"})
# Events a runner may emit on stdout while a prompt runs.
EVENT_NAMES = frozenset({"assistant.delta", "assistant.message"})
# Error codes a runner may put in an error reply.
ERROR_CODES = frozenset({"provider_error", "brain_error"})

# RunnerFrame fields (Go struct RunnerFrame); anything else is a framing violation.
_FIELDS = frozenset({"attachment", "turn", "id", "method", "params", "result", "error", "event", "data"})
_STRING_FIELDS = ("attachment", "turn", "id", "method", "event")


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def encode_frame(frame: Frame) -> bytes:
    """One frame as a newline-terminated UTF-8 line."""
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and the peer's strict decoder rejects them
        line = json.dumps(frame, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise FrameError(f"frame is not JSON-serialisable: {exc}") from exc
    if len(line) >= MAX_FRAME:
        raise FrameError(f"frame of {len(line)} bytes exceeds {MAX_FRAME}")
    return line + b"\n"


def decode_frame(line: bytes) -> Frame:
    """Strictly decode one line: a JSON object with only RunnerFrame fields."""
    if len(line) > MAX_FRAME:
        raise FrameError(f"frame of {len(line)} bytes exceeds {MAX_FRAME}")
    try:
        # decode as UTF-8 ourselves: json.loads(bytes) would also accept UTF-16 and UTF-32
        value = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"frame is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise FrameError("frame is not a JSON object")
    unknown = value.keys() - _FIELDS
    if unknown:
        raise FrameError(f"unknown frame field {sorted(unknown)[0]!r}")
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
    return value  # type: ignore[return-value]  # checked field by field above


def validate_native_files(value: Any) -> list[NativeFile]:
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
