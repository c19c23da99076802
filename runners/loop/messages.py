"""Provider-neutral conversation values shared by the loop, native state and the providers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AssistantMessage",
    "Generation",
    "Message",
    "ModelRequest",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
]


def _derived() -> Any:
    """Forms derived from a message once and reused on every later request that carries it
    (a transport's request items, the compaction size estimate), keyed by who derived them.
    Never compared or shown; the message itself stays immutable."""
    return field(default_factory=dict, init=False, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    derived: dict[str, Any] = _derived()


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One generation as it goes back into the context.

    `replay` holds provider-native items that must be sent back verbatim on the same transport
    (Anthropic thinking blocks, OpenAI encrypted reasoning items); other transports ignore it.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    replay: dict[str, Any] | None = None
    derived: dict[str, Any] = _derived()


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    name: str
    text: str
    is_error: bool = False
    derived: dict[str, Any] = _derived()
    end_turn: bool = False  # Brain asked to end the model's turn with this result (not persisted)


Message = UserMessage | AssistantMessage | ToolResult


@dataclass(frozen=True, slots=True)
class Usage:
    input: int = 0
    output: int = 0


@dataclass(frozen=True, slots=True)
class Generation:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str  # "stop" | "tool_use" | "length" | "content_filter" | "refusal" | provider's own
    usage: Usage
    replay: dict[str, Any] | None = None

    def as_message(self) -> AssistantMessage:
        return AssistantMessage(text=self.text, tool_calls=self.tool_calls, replay=self.replay)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one call; built from native state only."""

    model: str  # the provider's own model id (after the first "/")
    instructions: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    reasoning_effort: str = "off"
    cache_key: str | None = None  # prompt cache routing key where the provider supports one
