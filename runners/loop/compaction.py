"""Keep the context inside the model's window: summarise the oldest turns with a model call.

Estimates are in characters / 4, computed from native state only, so a restored session makes
the same decision at the same point. The summary is a `compaction` record (still append-only).
"""

from __future__ import annotations

from .messages import AssistantMessage, Message, ModelRequest, ToolResult, UserMessage
from .providers.base import compact_json

__all__ = [
    "COMPACTION_INSTRUCTIONS",
    "choose_first_kept_turn",
    "estimate_tokens",
    "needs_compaction",
    "summary_request",
]

# Characters per token: a deliberately rough estimate, fine for a trigger with headroom.
CHARS_PER_TOKEN = 4
# Compact when the next request would fill this share of the window: leaves room for the reply.
COMPACTION_TRIGGER_SHARE = 0.8
# After compaction the newest turns kept verbatim take at most this share of the window.
KEEP_RECENT_SHARE = 0.3
# The transcript sent for summarising stays under this share of the window.
TRANSCRIPT_SHARE = 0.5
# A single tool result is quoted up to this many characters in the transcript.
TOOL_RESULT_QUOTE = 2000

COMPACTION_INSTRUCTIONS = (
    "You summarize conversations between a user and an AI assistant so the assistant can continue "
    "without the full history. Keep facts, decisions, open tasks, names, numbers and tool outcomes. "
    "Write plain text, no preamble."
)
# What one image costs in context, in tokens: about what a 1,000-pixel-square image costs at
# OpenAI (high detail), Anthropic and Gemini; the estimate only decides when to compact.
IMAGE_TOKENS = 1600
# Key of a message's size in characters among its derived forms.
_CHARS = "compaction.chars"
_SUMMARY_REQUEST = "Summarize the conversation above for the assistant's future reference."


def estimate_tokens(request: ModelRequest) -> int:
    chars = len(request.instructions) + sum(
        len(compact_json(t.input_schema)) + len(t.description) for t in request.tools
    )
    return (chars + _message_chars(request.messages)) // CHARS_PER_TOKEN


def _message_chars(messages: tuple[Message, ...] | list[Message]) -> int:
    total = 0
    for message in messages:
        chars = message.derived.get(_CHARS)
        if not isinstance(chars, int):
            chars = message.derived[_CHARS] = _chars(message)
        total += chars
    return total


def _chars(message: Message) -> int:
    if isinstance(message, AssistantMessage):
        return len(message.text) + sum(len(compact_json(c.arguments)) + len(c.name) for c in message.tool_calls)
    if isinstance(message, UserMessage):
        return len(message.text) + len(message.media) * IMAGE_TOKENS * CHARS_PER_TOKEN
    return len(message.text)


def needs_compaction(request: ModelRequest, *, context_window: int) -> bool:
    return estimate_tokens(request) > context_window * COMPACTION_TRIGGER_SHARE


def choose_first_kept_turn(turns: list[list[Message]], *, context_window: int) -> int:
    """Index of the oldest turn kept verbatim; everything before it is summarised (≥ 1 turn)."""
    budget = context_window * KEEP_RECENT_SHARE * CHARS_PER_TOKEN
    kept = len(turns)
    used = 0
    while kept > 1:
        used += _message_chars(turns[kept - 1])
        if used > budget:
            break
        kept -= 1
    return kept


def render_transcript(summary: str | None, turns: list[list[Message]], *, limit: int) -> str:
    lines = [f"Earlier summary: {summary}"] if summary else []
    for messages in turns:
        for message in messages:
            if isinstance(message, UserMessage):
                lines.append(f"User: {message.text}")
            elif isinstance(message, ToolResult):
                status = "error" if message.is_error else "result"
                lines.append(f"Tool {message.name} {status}: {message.text[:TOOL_RESULT_QUOTE]}")
            else:
                if message.text:
                    lines.append(f"Assistant: {message.text}")
                lines.extend(f"Assistant called {c.name}({compact_json(c.arguments)})" for c in message.tool_calls)
    transcript = "\n".join(lines)
    return transcript[-limit:]  # over the limit, the newest part matters most


def summary_request(
    *, model: str, summary: str | None, turns: list[list[Message]], context_window: int
) -> ModelRequest:
    """The model request that summarises `turns` (and the earlier summary) for compaction."""
    limit = int(context_window * TRANSCRIPT_SHARE * CHARS_PER_TOKEN)
    transcript = render_transcript(summary, turns, limit=limit)
    return ModelRequest(
        model=model,
        instructions=COMPACTION_INSTRUCTIONS,
        tools=(),
        messages=(UserMessage(f"{transcript}\n\n{_SUMMARY_REQUEST}"),),
    )
