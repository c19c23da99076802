"""Pi's message wire as gateways for Pi clients speak it: `POST …/radius/…/messages`.

The body is `{"model", "context", "options"}` with Pi messages (`user`, `assistant`, `toolResult`)
and Pi tools; the reply is SSE of Pi's assistant-message events (`start`, `thinking_*`, `text_*`,
`toolcall_*`, then `done` with usage and the `responseId`, or `error`), flat or, with the
script's `"pi_events": "nested"`, in pi-ai's published shape. Checks bodies as a gateway
does: no unknown fields, tool results answering the preceding calls, base64 images only.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from .framing import IdSource, Step, pieces, signature, sse
from .script import Plan, RequestView, ToolResultView

__all__ = ["WIRE", "error_body", "error_event", "render_stream", "request_error", "view_request"]

WIRE = "pi-messages"
PATH_MARK = "/radius/"
_FIELDS = frozenset({"model", "context", "options"})
_CONTEXT_FIELDS = frozenset({"systemPrompt", "messages", "tools"})
_OPTIONS = frozenset({"reasoning", "sessionId", "maxTokens", "temperature", "toolChoice", "cacheRetention"})
_LEVELS = frozenset({"minimal", "low", "medium", "high", "xhigh"})
_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def _context(body: dict[str, Any]) -> dict[str, Any]:
    context = body.get("context")
    return context if isinstance(context, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", "")) for part in content or [] if isinstance(part, dict) and part.get("type") == "text"
    )


def view_request(body: dict[str, Any], *, body_size: int) -> RequestView:
    context = _context(body)
    users: list[str] = []
    results: list[ToolResultView] = []
    every_user: list[str] = []
    for message in context.get("messages") or []:
        role = message.get("role")
        if role == "assistant":
            users, results = [], []
        elif role == "user":
            users.append(_text(message.get("content")))
            every_user.append(users[-1])
        elif role == "toolResult":
            text = _text(message.get("content"))
            results.append(ToolResultView(str(message.get("toolName")), text, bool(message.get("isError"))))
    options = body.get("options") if isinstance(body.get("options"), dict) else {}
    return RequestView(
        wire=WIRE,
        model=str(body.get("model", "")),
        system=str(context.get("systemPrompt") or ""),
        tool_names=tuple(str(tool.get("name")) for tool in context.get("tools") or [] if isinstance(tool, dict)),
        user_texts=tuple(users),
        tool_results=tuple(results),
        body_size=body_size,
        reasoning=bool(options and options.get("reasoning")),
        first_user_text=every_user[0] if every_user else "",
        user_message_count=len(every_user),
    )


def request_error(body: dict[str, Any]) -> str | None:
    extra = sorted(set(body) - _FIELDS) or sorted(set(_context(body)) - _CONTEXT_FIELDS)
    options = body.get("options")
    if extra:
        return f"unknown field {extra[0]!r}"
    if not isinstance(body.get("model"), str) or not body["model"] or not isinstance(body.get("context"), dict):
        return "model and context are required"
    if not isinstance(options, dict) or set(options) - _OPTIONS:
        return "options must be an object of known options"
    if "reasoning" in options and options["reasoning"] not in _LEVELS:
        return f"options.reasoning: {options['reasoning']!r} is not a thinking level"
    open_calls: set[str] = set()
    for index, message in enumerate(_context(body).get("messages") or []):
        role = message.get("role")
        if not isinstance(message.get("timestamp"), int):
            return f"context.messages.{index}.timestamp is required"
        if role == "assistant":
            content = message.get("content") or []
            open_calls = {str(b.get("id")) for b in content if isinstance(b, dict) and b.get("type") == "toolCall"}
        elif role == "toolResult":
            if message.get("toolCallId") not in open_calls:
                return f"context.messages.{index}: no tool call {message.get('toolCallId')!r} to answer"
        elif role == "user":
            problem = _image_error(message.get("content"))
            if problem:
                return f"context.messages.{index}: {problem}"
        else:
            return f"context.messages.{index}.role: unknown role {role!r}"
    return None


def _image_error(content: Any) -> str | None:
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "image":
            try:
                valid = bool(base64.b64decode(str(part.get("data")), validate=True))
            except (binascii.Error, ValueError):
                valid = False
            if not valid or part.get("mimeType") not in _IMAGE_TYPES:
                return "an image needs base64 data and an image mimeType"
    return None


def render_stream(plan: Plan, ids: IdSource, *, request_id: str) -> list[Step]:
    """Flat events by default (the message's fields on the event, as some gateways send them);
    with `plan.pi_nested_events` pi-ai's published shape: each event's `partial` message so far,
    the whole message in `done.message`."""
    nested = plan.pi_nested_events
    content: list[dict[str, Any]] = []
    message: dict[str, Any] = {"role": "assistant", "content": content, "api": WIRE, "timestamp": 0}

    def event(fields: dict[str, Any], *, flat: dict[str, Any] | None = None, is_text_delta: bool = False) -> Step:
        extra = {"partial": json.loads(json.dumps(message))} if nested else (flat or {})
        return Step(sse({**fields, **extra}), is_text_delta=is_text_delta)

    steps = [event({"type": "start"})]
    if plan.reasoning:
        index = len(content)
        content.append({"type": "thinking", "thinking": ""})
        steps.append(event({"type": "thinking_start", "contentIndex": index}))
        for piece in pieces(plan.reasoning):
            content[index]["thinking"] += piece
            steps.append(event({"type": "thinking_delta", "contentIndex": index, "delta": piece}))
        content[index]["thinkingSignature"] = signature(plan.reasoning)
        flat = {"contentSignature": content[index]["thinkingSignature"]}
        steps.append(event({"type": "thinking_end", "contentIndex": index, "content": plan.reasoning}, flat=flat))
    if plan.text:
        index = len(content)
        content.append({"type": "text", "text": ""})
        steps.append(event({"type": "text_start", "contentIndex": index}))
        for text in plan.chunks:
            content[index]["text"] += text
            steps.append(event({"type": "text_delta", "contentIndex": index, "delta": text}, is_text_delta=True))
        steps.append(event({"type": "text_end", "contentIndex": index, "content": plan.text}))
    for call in plan.tool_calls:
        call_id, index = ids.next("call"), len(content)
        content.append({"type": "toolCall", "id": call_id, "name": call.name, "arguments": {}})
        steps.append(
            event({"type": "toolcall_start", "contentIndex": index}, flat={"id": call_id, "toolName": call.name})
        )
        for piece in pieces(json.dumps(call.arguments)):
            steps.append(event({"type": "toolcall_delta", "contentIndex": index, "delta": piece}))
        content[index]["arguments"] = call.arguments
        steps.append(event({"type": "toolcall_end", "contentIndex": index, "toolCall": dict(content[index])}))
    output = plan.output_tokens + plan.reasoning_tokens  # Pi counts the reasoning in the output
    usage = {
        "input": plan.input_tokens,
        "output": output,
        "cacheRead": plan.cache_read_tokens,
        "cacheWrite": plan.cache_write_tokens,
        "totalTokens": plan.input_tokens + output + plan.cache_read_tokens + plan.cache_write_tokens,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    reason = "toolUse" if plan.tool_calls else "stop"
    done: dict[str, Any] = {"type": "done", "reason": reason}
    if nested:
        done["message"] = {**message, "usage": usage, "stopReason": reason, "responseId": request_id}
    else:
        done.update(usage=usage, responseId=request_id)
    steps.append(Step(sse(done)))
    return steps


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "rate_limit_error" if status == 429 else "invalid_request_error" if status < 500 else "api_error"
    return {"error": {"type": kind, "message": message}}


def error_event(message: str, *, nested: bool = False) -> bytes:
    if nested:
        error = {"role": "assistant", "content": [], "api": WIRE, "stopReason": "error", "errorMessage": message}
        return sse({"type": "error", "reason": "error", "error": error})
    return sse({"type": "error", "reason": "error", "errorMessage": message, "usage": None})
