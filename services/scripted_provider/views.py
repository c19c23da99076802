"""Read a request body of any supported wire format into a wire-neutral `RequestView`.

Only the items after the last assistant message matter to the script: the new user text, or the
tool results the model asked for.
"""

from __future__ import annotations

import json
from typing import Any

from .script import RequestView, ToolResultView

__all__ = ["WIRES", "parse_json_body", "view_request"]

# Path suffix → wire format name.
WIRES = {
    "/chat/completions": "openai-completions",
    "/responses": "openai-responses",
    "/messages": "anthropic-messages",
}


def view_request(wire: str, body: dict[str, Any], *, body_size: int) -> RequestView:
    if wire == "openai-completions":
        system, users, results = _view_chat(body)
    elif wire == "openai-responses":
        system, users, results = _view_responses(body)
    else:
        system, users, results = _view_messages(body)
    return RequestView(
        wire=wire,
        model=str(body.get("model", "")),
        system=system,
        tool_names=_tool_names(body.get("tools") or []),
        user_texts=tuple(users),
        tool_results=tuple(results),
        body_size=body_size,
    )


def _tool_names(tools: list[Any]) -> tuple[str, ...]:
    names = []
    for tool in tools:
        if isinstance(tool, dict):
            function = tool.get("function")
            names.append(str(function.get("name") if isinstance(function, dict) else tool.get("name")))
    return tuple(names)


def _text_of(content: Any) -> str:
    """Join the text parts of a content value (a string or a list of typed parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part
        )
    return ""


def _view_chat(body: dict[str, Any]) -> tuple[str, list[str], list[ToolResultView]]:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = "\n".join(_text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            users, results = [], []
            for call in message.get("tool_calls") or []:
                names[str(call.get("id"))] = str(call.get("function", {}).get("name"))
        elif role == "user":
            users.append(_text_of(message.get("content")))
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            text = _text_of(message.get("content"))
            results.append(ToolResultView(names.get(call_id, call_id), text, text.startswith("Error:")))
    return system, users, results


def _view_responses(body: dict[str, Any]) -> tuple[str, list[str], list[ToolResultView]]:
    system = str(body.get("instructions") or "")
    items = body.get("input")
    if isinstance(items, str):
        return system, [items], []
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
            users, results = [], []
        elif kind == "message" and role == "assistant":
            users, results = [], []
        elif kind == "message" and role in ("system", "developer"):
            system += _text_of(item.get("content"))
        elif kind == "message" and role == "user":
            users.append(_text_of(item.get("content")))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            text = _text_of(item.get("output"))
            results.append(ToolResultView(names.get(call_id, call_id), text, text.startswith("Error:")))
    return system, users, results


def _view_messages(body: dict[str, Any]) -> tuple[str, list[str], list[ToolResultView]]:
    system = _text_of(body.get("system"))
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": _text_of(content)}]
        if message.get("role") == "assistant":
            users, results = [], []
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    names[str(block.get("id"))] = str(block.get("name"))
            continue
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                users.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id"))
                text = _text_of(block.get("content"))
                results.append(ToolResultView(names.get(call_id, call_id), text, bool(block.get("is_error"))))
    return system, users, results


def parse_json_body(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw or b"{}")
    if not isinstance(value, dict):
        raise ValueError("request body must be a JSON object")
    return value
