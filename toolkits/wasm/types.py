"""The values of a component call: what it is granted, how far it may go, how it ended."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "GUEST_WORKSPACE",
    "MAX_EMIT_TEXT_BYTES",
    "MAX_OUTPUT_BYTES",
    "ComponentError",
    "ComponentLimits",
    "ComponentOutcome",
    "EmitCallback",
    "WorkspaceGrant",
]

# Where the granted workspace appears inside the component (WASI pre-open).
GUEST_WORKSPACE = "/workspace"
# A call's extension events follow the one rule of toolkits.events (kind, encoded size, count),
# which the parent applies to the parsed data. The worker relays one event's JSON text of at most
# this many bytes: a bound of its frames, not the rule (whitespace the encoding drops counts here).
MAX_EMIT_TEXT_BYTES = 256 * 1024
# A tool's output reaches the model's context and the journal: 1 MiB is already far beyond
# what a model can use, and bounds the worker's frame.
MAX_OUTPUT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorkspaceGrant:
    path: Path  # host directory, already created by the caller (per-session workspace)
    mode: Literal["read", "read-write"]


@dataclass(frozen=True, slots=True)
class ComponentLimits:
    deadline_s: float  # wall-clock deadline of the call (loading the component included)
    memory_bytes: int  # linear memory cap (all memories of the component's store together)
    fuel: int  # instruction fuel


@dataclass(frozen=True, slots=True)
class ComponentOutcome:
    status: Literal["ok", "error", "timeout", "cancelled"]
    output: Any | None  # parsed JSON output when status == "ok"
    error: str | None  # one readable line otherwise


# Commits one extension event (kind, data: any JSON value) and returns once it is committed. An
# Exception it raises refuses the event: the component's emit returns that message as its `err`.
EmitCallback = Callable[[str, Any], Awaitable[None]]


class ComponentError(Exception):
    """A component file that cannot be used: missing, not a component, or not the tool world."""
