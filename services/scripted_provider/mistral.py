"""Mistral's chat wire: `POST …/mistral/…/chat/completions` (the `mistral/` part tells it from OpenAI's).

Checks bodies as Mistral does (no fields it does not know, nine-character tool call ids, tool
messages answering the preceding calls) and renders a `Plan` as Mistral streams it: `thinking`
content chunks first when `prompt_mode` is `reasoning` or `reasoning_effort` is `high`, text
deltas, each tool call whole in one delta, and usage on the last chunk (no `stream_options`
needed).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from .framing import IdSource, Step, sse
from .script import Plan

__all__ = ["WIRE", "asks_for_reasoning", "call_id", "error_body", "error_event", "render_stream", "request_error"]

WIRE = "mistral-conversations"
PATH_MARK = "/mistral/"
_CALL_ID = re.compile(r"[A-Za-z0-9]{9}")
# Top-level fields of Mistral's chat request; anything else is refused as the API refuses it.
_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "tools",
        "tool_choice",
        "prompt_mode",
        "reasoning_effort",
        "temperature",
        "top_p",
        "max_tokens",
        "random_seed",
        "response_format",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "safe_prompt",
        "parallel_tool_calls",
        "stop",
        "prediction",
    }
)

# Mistral's `reasoning_effort` values.
_REASONING_EFFORTS = ("none", "high")


def asks_for_reasoning(body: dict[str, Any]) -> bool:
    return body.get("prompt_mode") == "reasoning" or body.get("reasoning_effort") == "high"


def call_id(ids: IdSource) -> str:
    """Nine letters or digits, as Mistral's own call ids are."""
    number = ids.next("c").split("_", 1)[1]
    return "c" + number.zfill(8)


def request_error(body: dict[str, Any]) -> str | None:
    extra = sorted(set(body) - _FIELDS)
    if extra:
        return f"body.{extra[0]}: Extra inputs are not permitted"
    if body.get("reasoning_effort", "none") not in _REASONING_EFFORTS:
        return f"body.reasoning_effort: Input should be {' or '.join(map(repr, _REASONING_EFFORTS))}"
    open_calls: set[str] = set()
    for index, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        if role == "assistant":
            open_calls = set()
            for call in message.get("tool_calls") or []:
                if not _CALL_ID.fullmatch(str(call.get("id"))):
                    return f"Tool call id was {call.get('id')} but must be a-z, A-Z, 0-9, with a length of 9."
                open_calls.add(str(call.get("id")))
        elif role == "tool" and message.get("tool_call_id") not in open_calls:
            return f"messages.{index}: tool message does not answer a preceding tool call"
        elif role not in ("system", "user", "assistant", "tool"):
            return f"messages.{index}.role: unknown role {role!r}"
    return None


def render_stream(plan: Plan, model: str, ids: IdSource) -> list[Step]:
    completion_id, created = ids.next("cmpl").replace("_", ""), int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [choice],
                **extra,
            }
        )

    steps = [Step(chunk({"role": "assistant", "content": ""}))]
    if plan.reasoning:
        half = len(plan.reasoning) // 2
        for piece in (plan.reasoning[:half], plan.reasoning[half:]):
            thinking = [{"type": "thinking", "thinking": [{"type": "text", "text": piece}]}]
            steps.append(Step(chunk({"content": thinking})))
    steps += [Step(chunk({"content": text}), is_text_delta=True) for text in plan.chunks]
    for index, call in enumerate(plan.tool_calls):
        head = {
            "id": call_id(ids),
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            "index": index,
        }
        steps.append(Step(chunk({"tool_calls": [head]})))
    prompt = plan.input_tokens + plan.cache_read_tokens + plan.cache_write_tokens
    completion = plan.output_tokens + plan.reasoning_tokens
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    steps.append(Step(chunk({"content": ""}, "tool_calls" if plan.tool_calls else "stop", usage=usage)))
    steps.append(Step(b"data: [DONE]\n\n"))
    return steps


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "rate_limited" if status == 429 else "invalid_request_error" if status < 500 else "internal_server_error"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": str(status)}


def error_event(message: str) -> bytes:
    return sse(error_body(500, message))
