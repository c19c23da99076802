"""Decide what the scripted model does with one request: rules, built-in directives, echo.

The input is a wire-neutral `RequestView` (see `views.py`); the output is a `Plan` that the wire
encoders render. Nothing here knows about HTTP or a provider's format.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Plan",
    "RequestView",
    "Rule",
    "Script",
    "ScriptedToolCall",
    "ToolResultView",
    "load_script",
    "parse_script",
]

# Words per streamed delta of an echoed or scripted reply: small enough that every reply arrives
# in several deltas, which is what the demo and the delta tests want to see.
DEFAULT_CHUNK_WORDS = 3
# Characters per token in the usage estimates; the usual rough figure for English text.
CHARS_PER_TOKEN = 4
# Longest excerpt of a tool result or conversation quoted back in a summary.
QUOTE_LIMIT = 200
# Longest excerpt of the prompt quoted in scripted reasoning.
REASONING_QUOTE = 60

# Names a rule's `usage` may give (each becomes the Plan's `<name>_tokens`).
USAGE_NAMES = frozenset({"input", "output", "cache_read", "cache_write", "reasoning"})
_FAIL_DIRECTIVE = re.compile(r"\[fail (\d{3})\]")
_SLOW_DIRECTIVE = re.compile(r"\[slow(?: (\d+))?\]")
# `call NAME {json}` on its own line asks for a tool call; several lines give parallel calls.
_CALL_DIRECTIVE = re.compile(r"^\s*call ([A-Za-z0-9_.\-]+)\s*(\{.*\})?\s*$", re.MULTILINE)
# Default pause of a `[slow]` reply between deltas.
DEFAULT_SLOW_DELAY_MS = 150


@dataclass(frozen=True, slots=True)
class ToolResultView:
    name: str
    text: str
    is_error: bool


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the script looks at: the items after the last assistant message, and some context."""

    wire: str
    model: str
    system: str
    tool_names: tuple[str, ...]
    user_texts: tuple[str, ...]
    tool_results: tuple[ToolResultView, ...]
    body_size: int
    reasoning: bool = False  # the request asks for reasoning / extended thinking
    first_user_text: str = ""  # of the whole conversation, for replies that show memory
    user_message_count: int = 0


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    """One scripted generation, or a failure instead of one."""

    chunks: tuple[str, ...] = ()
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    reasoning: str = ""  # sent first as a thinking block / reasoning item when non-empty
    delay_ms: int = 0
    stall: bool = False  # send the first delta, then nothing until the client goes away
    break_stream: bool = False  # send the first delta, then a mid-stream error event
    fail_status: int = 0  # answer with this HTTP error status instead of a stream
    fail_message: str = ""
    # Usage in parts that never overlap; each wire adds them up its own way (wire.py).
    input_tokens: int = 0  # uncached input
    output_tokens: int = 0  # visible output
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    # pi-messages: pi-ai's published event shape (the message inside `done`, `error`, `partial`).
    pi_nested_events: bool = False

    @property
    def text(self) -> str:
        return "".join(self.chunks)


@dataclass(frozen=True, slots=True)
class Rule:
    """`match` is a case-insensitive substring (or `regex`) of the newest user text.

    With `after_tool` the rule looks at tool result text instead; with `requires_tool` it only
    applies when the request offers that tool. A rule gives a reply text, tool calls, a failure
    status, a per-delta delay or a stall.
    """

    match: str = ""
    regex: str = ""
    after_tool: bool = False
    requires_tool: str = ""
    reply: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    status: int = 0
    message: str = "scripted failure"
    delay_ms: int = 0
    stall: bool = False
    usage: tuple[tuple[str, int], ...] = ()  # Plan usage fields the reply reports instead of estimates

    def matches(self, text: str, view: RequestView) -> bool:
        if self.requires_tool and self.requires_tool not in view.tool_names:
            return False
        if self.regex:
            return re.search(self.regex, text) is not None
        return self.match.lower() in text.lower()


@dataclass(frozen=True, slots=True)
class Script:
    rules: tuple[Rule, ...] = ()
    echo_prefix: str = "You said: "
    chunk_words: int = DEFAULT_CHUNK_WORDS
    delay_ms: int = 0
    pi_nested_events: bool = False  # script `"pi_events": "nested"`

    def plan(self, view: RequestView) -> Plan:
        """Rules first, then built-in directives, then the default echo or tool summary."""
        plan = self._plan(view)
        return _replace(plan, pi_nested_events=True) if self.pi_nested_events else plan

    def _plan(self, view: RequestView) -> Plan:
        if "summariz" in view.system.lower():
            return self._finish(view, self._summary_text(view), ())
        if view.tool_results and not view.user_texts:
            subject = "\n".join(result.text for result in view.tool_results)
            for rule in self.rules:
                if rule.after_tool and rule.matches(subject, view):
                    return self._from_rule(view, rule, subject)
            return self._finish(view, _summarise_tool_results(view.tool_results), ())
        text = view.user_texts[-1] if view.user_texts else ""
        for rule in self.rules:
            if not rule.after_tool and rule.matches(text, view):
                return self._from_rule(view, rule, text)
        return self._from_directives(view, text)

    def _from_rule(self, view: RequestView, rule: Rule, subject: str) -> Plan:
        if rule.status:
            return Plan(fail_status=rule.status, fail_message=rule.message)
        calls = rule.tool_calls
        found = re.search(rule.regex, subject) if rule.regex else None
        if found is not None:  # a model reads values (a sandbox handle) from what it was shown
            calls = tuple(
                ScriptedToolCall(name=call.name, arguments=_fill_groups(call.arguments, found)) for call in calls
            )
        plan = self._finish(view, _fill_placeholders(rule.reply, view), calls)
        return _replace(plan, delay_ms=rule.delay_ms or plan.delay_ms, stall=rule.stall, **dict(rule.usage))

    def _from_directives(self, view: RequestView, text: str) -> Plan:
        failure = _FAIL_DIRECTIVE.search(text)
        if failure:
            return Plan(fail_status=int(failure.group(1)), fail_message=f"scripted HTTP {failure.group(1)}")
        calls = tuple(
            ScriptedToolCall(name=match.group(1), arguments=json.loads(match.group(2) or "{}"))
            for match in _CALL_DIRECTIVE.finditer(text)
        )
        if calls:
            names = ", ".join(call.name for call in calls)
            reply = f"Calling {names}."
        else:
            reply = self.echo_prefix + text
        if view.tool_results:
            reply = _summarise_tool_results(view.tool_results) + " " + reply
        plan = self._finish(view, reply, calls)
        slow = _SLOW_DIRECTIVE.search(text)
        return _replace(
            plan,
            delay_ms=int(slow.group(1) or DEFAULT_SLOW_DELAY_MS) if slow else plan.delay_ms,
            stall="[stall]" in text,
            break_stream="[break]" in text,
        )

    def _summary_text(self, view: RequestView) -> str:
        text = view.user_texts[-1] if view.user_texts else ""
        return f"Summary of the earlier conversation ({len(text)} characters): {text[:QUOTE_LIMIT]}"

    def _finish(self, view: RequestView, text: str, calls: tuple[ScriptedToolCall, ...]) -> Plan:
        unoffered = [call.name for call in calls if call.name not in view.tool_names]
        if unoffered:
            # A real model only calls tools the request offered: say so instead of calling.
            text = _unoffered_reply(unoffered, view.tool_names)
            calls = ()
        chunks = _split_words(text, self.chunk_words)
        arguments_size = sum(len(json.dumps(call.arguments)) for call in calls)
        subject = view.user_texts[-1] if view.user_texts else "the tool results"
        return Plan(
            chunks=chunks,
            tool_calls=calls,
            reasoning=f"Considering {subject[:REASONING_QUOTE]}" if view.reasoning else "",
            delay_ms=self.delay_ms,
            input_tokens=max(1, math.ceil(view.body_size / CHARS_PER_TOKEN)),
            output_tokens=max(1, math.ceil((len(text) + arguments_size) / CHARS_PER_TOKEN)),
        )


def _unoffered_reply(unoffered: list[str], offered: tuple[str, ...]) -> str:
    listed = ", ".join(offered) if offered else "none"
    return f"I cannot call {', '.join(unoffered)}: it was not offered to me (offered tools: {listed})."


def _fill_placeholders(reply: str, view: RequestView) -> str:
    """Rule replies may quote the conversation: {first_user_text}, {last_user_text}, {user_message_count}."""
    values = {
        "{first_user_text}": view.first_user_text,
        "{last_user_text}": view.user_texts[-1] if view.user_texts else "",
        "{user_message_count}": str(view.user_message_count),
    }
    for placeholder, value in values.items():
        reply = reply.replace(placeholder, value)
    return reply


def _fill_groups(value: Any, found: re.Match[str]) -> Any:
    """A rule's tool-call arguments with `{group1}`, `{group2}` … in their strings replaced by
    the groups its `regex` captured."""
    if isinstance(value, str):
        for number, group in enumerate(found.groups(), start=1):
            value = value.replace(f"{{group{number}}}", group or "")
        return value
    if isinstance(value, dict):
        return {key: _fill_groups(item, found) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill_groups(item, found) for item in value]
    return value


def _replace(plan: Plan, **changes: Any) -> Plan:
    values = {name: getattr(plan, name) for name in plan.__dataclass_fields__}
    values.update(changes)
    return Plan(**values)


def _summarise_tool_results(results: tuple[ToolResultView, ...]) -> str:
    parts = []
    for result in results:
        verb = "failed with" if result.is_error else "returned"
        parts.append(f"Tool {result.name} {verb}: {result.text[:QUOTE_LIMIT]}")
    return " ".join(parts)


def _split_words(text: str, words_per_chunk: int) -> tuple[str, ...]:
    """Split keeping every character, so the chunks join back to exactly `text`."""
    pieces = re.findall(r"\S+\s*|\s+", text)
    return tuple("".join(pieces[start : start + words_per_chunk]) for start in range(0, len(pieces), words_per_chunk))


def _parse_rule(raw: dict[str, Any]) -> Rule:
    unknown = set(dict(raw.get("usage", {}))) - USAGE_NAMES
    if unknown:
        raise ValueError(f"unknown usage names {sorted(unknown)}")
    calls = tuple(
        ScriptedToolCall(name=str(call["name"]), arguments=dict(call.get("arguments", {})))
        for call in raw.get("tool_calls", ())
    )
    return Rule(
        match=str(raw.get("match", "")),
        regex=str(raw.get("regex", "")),
        after_tool=bool(raw.get("after_tool", False)),
        requires_tool=str(raw.get("requires_tool", "")),
        reply=str(raw.get("reply", "")),
        tool_calls=calls,
        status=int(raw.get("status", 0)),
        message=str(raw.get("message", "scripted failure")),
        delay_ms=int(raw.get("delay_ms", 0)),
        stall=bool(raw.get("stall", False)),
        usage=tuple((f"{name}_tokens", int(count)) for name, count in dict(raw.get("usage", {})).items()),
    )


def parse_script(raw: dict[str, Any]) -> Script:
    return Script(
        rules=tuple(_parse_rule(rule) for rule in raw.get("rules", ())),
        echo_prefix=str(raw.get("echo_prefix", "You said: ")),
        chunk_words=max(1, int(raw.get("chunk_words", DEFAULT_CHUNK_WORDS))),
        delay_ms=int(raw.get("delay_ms", 0)),
        pi_nested_events=raw.get("pi_events", "flat") == "nested",
    )


def load_script(path: str | None) -> Script:
    if path is None:
        return Script()
    return parse_script(json.loads(Path(path).read_text(encoding="utf-8")))
