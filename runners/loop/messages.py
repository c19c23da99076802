"""Provider-neutral conversation values shared by the loop, native state and the providers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from runners.media import Media
from runners.protocol import JSONObject

__all__ = [
    "AssistantMessage",
    "Generation",
    "Message",
    "ModelRequest",
    "Replay",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
]


def _derived() -> dict[str, object]:
    """Forms derived from a message once and reused on every later request that carries it
    (a transport's request items, the compaction size estimate), keyed by who derived them.
    Never compared or shown; the message itself stays immutable."""
    derived: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)
    return derived


class Replay(TypedDict, total=False):
    """Provider-native items of one generation, sent back verbatim on the transport that made
    them: Anthropic content blocks, OpenAI Responses items, Gemini parts, Bedrock blocks."""

    transport: str
    blocks: list[JSONObject]
    items: list[JSONObject]
    parts: list[JSONObject]


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    derived: dict[str, object] = _derived()
    media: tuple[Media, ...] = ()  # images after the text (runners.media: data: or https URLs)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: JSONObject
    environment: str = ""  # a placed tool's, named on dispatch only (never in the context)


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One generation as it goes back into the context.

    `replay` holds provider-native items that must be sent back verbatim on the same transport
    (Anthropic thinking blocks, OpenAI encrypted reasoning items); other transports ignore it.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    replay: Replay | None = None
    derived: dict[str, object] = _derived()


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    name: str
    text: str
    is_error: bool = False
    derived: dict[str, object] = _derived()
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
    replay: Replay | None = None

    def as_message(self) -> AssistantMessage:
        return AssistantMessage(text=self.text, tool_calls=self.tool_calls, replay=self.replay)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: JSONObject


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one call; built from native state only."""

    model: str  # the provider's own model id (after the first "/")
    instructions: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    reasoning_effort: str = "off"
    cache_key: str | None = None  # prompt cache routing key where the provider supports one
