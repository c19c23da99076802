"""Read a request body of any supported wire format into a wire-neutral `RequestView`.

Only the items after the last assistant message matter to the script: the new user text, or the
tool results the model asked for.
"""

from __future__ import annotations

import json
from typing import Any

from . import bedrock, google, mistral, pi_wire
from .images import image_error
from .script import RequestView, ToolResultView

__all__ = [
    "CODEX_WIRE",
    "WIRES",
    "find_header_error",
    "find_request_error",
    "find_wire",
    "parse_json_body",
    "request_model",
    "streams",
    "view_request",
]

CODEX_WIRE = "openai-codex-responses"  # the Responses wire of the ChatGPT backend
# Path suffix → wire format name (first match wins).
WIRES = {
    "/codex/responses": CODEX_WIRE,
    "/chat/completions": "openai-completions",
    "/responses": "openai-responses",
    "/messages": "anthropic-messages",
    "/converse-stream": bedrock.WIRE,
    ":streamGenerateContent": google.WIRE,
}


def find_wire(path: str) -> str | None:
    """The wire a model route speaks, from its path (query string removed)."""
    wire = next((name for suffix, name in WIRES.items() if path.endswith(suffix)), None)
    if wire == google.WIRE and "/publishers/google/models/" in path:
        return google.VERTEX_WIRE
    if wire == "openai-completions" and mistral.PATH_MARK in path:
        return mistral.WIRE
    if wire == "anthropic-messages" and pi_wire.PATH_MARK in path:
        return pi_wire.WIRE
    return wire


def request_model(wire: str, path: str, body: dict[str, Any]) -> str:
    """Bedrock names the model in the path; the others in the body."""
    if wire == bedrock.WIRE:
        return bedrock.model_from_path(path)
    if wire in google.WIRES:
        return google.model_from_path(path)
    return str(body.get("model", ""))


def streams(wire: str, body: dict[str, Any]) -> bool:
    """Whether the reply is a stream: the route says so for Bedrock, Gemini and Pi's messages, the
    body's flag elsewhere."""
    return wire in (bedrock.WIRE, pi_wire.WIRE) or wire in google.WIRES or bool(body.get("stream"))


def view_request(wire: str, body: dict[str, Any], *, body_size: int, model: str = "") -> RequestView:
    if wire == bedrock.WIRE:
        return bedrock.view_request(body, model=model, body_size=body_size)
    if wire in google.WIRES:
        return google.view_request(wire, body, model=model, body_size=body_size)
    if wire == pi_wire.WIRE:
        return pi_wire.view_request(body, body_size=body_size)
    if wire in ("openai-completions", mistral.WIRE):
        system, users, results, every_user = _view_chat(body)
    elif wire in ("openai-responses", CODEX_WIRE):
        system, users, results, every_user = _view_responses(body)
    else:
        system, users, results, every_user = _view_messages(body)
    return RequestView(
        wire=wire,
        model=str(body.get("model", "")),
        system=system,
        tool_names=_tool_names(body.get("tools") or []),
        user_texts=tuple(users),
        tool_results=tuple(results),
        body_size=body_size,
        reasoning=_asks_for_reasoning(wire, body),
        first_user_text=every_user[0] if every_user else "",
        user_message_count=len(every_user),
    )


def _asks_for_reasoning(wire: str, body: dict[str, Any]) -> bool:
    if wire == "openai-completions":
        return bool(body.get("reasoning_effort"))
    if wire in ("openai-responses", CODEX_WIRE):
        return bool(body.get("reasoning"))
    if wire == mistral.WIRE:
        return mistral.asks_for_reasoning(body)
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def find_request_error(wire: str, body: dict[str, Any]) -> str | None:
    """The structural checks the real APIs make, so a client bug fails here as it would there."""
    image = image_error(wire, body)
    if image:
        return image
    if wire == bedrock.WIRE:
        return bedrock.request_error(body)
    if wire in google.WIRES:
        return google.request_error(body)
    if wire == pi_wire.WIRE:
        return pi_wire.request_error(body)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model is required"
    if wire == "openai-completions":
        return _chat_error(body)
    if wire == mistral.WIRE:
        return mistral.request_error(body)
    if wire == CODEX_WIRE and (body.get("store") is not False or not isinstance(body.get("instructions"), str)):
        return "Store must be set to false and instructions are required"
    if wire in ("openai-responses", CODEX_WIRE):
        return _responses_error(body)
    return _messages_error(body)


def find_header_error(wire: str, headers: dict[str, str]) -> str | None:
    """The headers a wire cannot do without (answered with a 401, as the real services do)."""
    if wire == CODEX_WIRE:
        if not headers.get("chatgpt-account-id") or headers.get("openai-beta") != "responses=experimental":
            return "the ChatGPT backend wants chatgpt-account-id and OpenAI-Beta: responses=experimental"
    elif wire in (mistral.WIRE, pi_wire.WIRE) and not headers.get("authorization", "").startswith("Bearer "):
        return "a Bearer key is required"
    return None


def _chat_error(body: dict[str, Any]) -> str | None:
    open_calls: set[str] = set()
    for message in body.get("messages") or []:
        if message.get("role") == "assistant":
            open_calls = {str(call.get("id")) for call in message.get("tool_calls") or []}
        elif message.get("role") == "tool":
            if message.get("tool_call_id") not in open_calls:
                return f"tool message {message.get('tool_call_id')!r} does not answer a preceding tool call"
    return None


def _responses_error(body: dict[str, Any]) -> str | None:
    items = body.get("input")
    calls = {str(i.get("call_id")) for i in items or [] if isinstance(i, dict) and i.get("type") == "function_call"}
    for item in items if isinstance(items, list) else []:
        if item.get("type") == "function_call_output" and item.get("call_id") not in calls:
            return f"No tool call found for function call output with call_id {item.get('call_id')}."
    return None


def _messages_error(body: dict[str, Any]) -> str | None:
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages") or []
    thinking = _asks_for_reasoning("anthropic-messages", body)
    for index, message in enumerate(messages):
        if index and message.get("role") == messages[index - 1].get("role"):
            return f"messages.{index}: roles must alternate between user and assistant"
        content = message.get("content")
        if not content:
            return f"messages.{index}: content must be non-empty"
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        kinds = [block.get("type") for block in content]
        if thinking and "tool_use" in kinds and kinds[0] not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{kinds[0]}`"
            )
    return None


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
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part)
    return ""


def _view_chat(body: dict[str, Any]) -> tuple[str, list[str], list[ToolResultView], list[str]]:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = "\n".join(_text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    every_user: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            users, results = [], []
            for call in message.get("tool_calls") or []:
                names[str(call.get("id"))] = str(call.get("function", {}).get("name"))
        elif role == "user":
            users.append(_text_of(message.get("content")))
            every_user.append(users[-1])
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            text = _text_of(message.get("content"))
            results.append(ToolResultView(names.get(call_id, call_id), text, text.startswith("Error:")))
    return system, users, results, every_user


def _view_responses(body: dict[str, Any]) -> tuple[str, list[str], list[ToolResultView], list[str]]:
    system = str(body.get("instructions") or "")
    items = body.get("input")
    if isinstance(items, str):
        return system, [items], [], [items]
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    every_user: list[str] = []
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
            every_user.append(users[-1])
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            text = _text_of(item.get("output"))
            results.append(ToolResultView(names.get(call_id, call_id), text, text.startswith("Error:")))
    return system, users, results, every_user


def _view_messages(body: dict[str, Any]) -> tuple[str, list[str], list[ToolResultView], list[str]]:
    system = _text_of(body.get("system"))
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    every_user: list[str] = []
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
                every_user.append(users[-1])
            elif block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id"))
                text = _text_of(block.get("content"))
                results.append(ToolResultView(names.get(call_id, call_id), text, bool(block.get("is_error"))))
    return system, users, results, every_user


def parse_json_body(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw or b"{}")
    if not isinstance(value, dict):
        raise ValueError("request body must be a JSON object")
    return value
