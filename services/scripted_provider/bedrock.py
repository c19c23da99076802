"""The Bedrock Converse wire: `POST /model/{modelId}/converse-stream`, answered as an AWS event stream.

Reads Converse request bodies into a `RequestView`, checks them as Bedrock does, and renders a
`Plan` as the binary event-stream messages botocore parses (`messageStart`, `contentBlockStart`,
`contentBlockDelta`, `contentBlockStop`, `messageStop`, `metadata`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from .eventstream import encode_event, encode_exception
from .framing import IdSource, Step, pieces, signature
from .script import Plan, RequestView, ToolResultView

__all__ = [
    "CONTENT_TYPE",
    "WIRE",
    "error_body",
    "error_headers",
    "error_event",
    "model_from_path",
    "render_stream",
    "request_error",
    "view_request",
]

WIRE = "bedrock-converse-stream"
CONTENT_TYPE = "application/vnd.amazon.eventstream"
# HTTP status → the modelled error Bedrock names in `x-amzn-ErrorType`.
_ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}


def model_from_path(path: str) -> str:
    """`/model/us.anthropic.claude%3A0/converse-stream` → `us.anthropic.claude:0`."""
    _prefix, _, rest = path.partition("/model/")
    return unquote(rest.rsplit("/", 1)[0])


def view_request(body: dict[str, Any], *, model: str, body_size: int) -> RequestView:
    system = "\n".join(str(block.get("text", "")) for block in body.get("system") or [] if isinstance(block, dict))
    names: dict[str, str] = {}
    users: list[str] = []
    results: list[ToolResultView] = []
    every_user: list[str] = []
    for message in body.get("messages") or []:
        blocks = [block for block in message.get("content") or [] if isinstance(block, dict)]
        if message.get("role") == "assistant":
            users, results = [], []
            for block in blocks:
                if "toolUse" in block:
                    names[str(block["toolUse"].get("toolUseId"))] = str(block["toolUse"].get("name"))
            continue
        for block in blocks:
            if "text" in block:
                users.append(str(block["text"]))
                every_user.append(users[-1])
            elif "toolResult" in block:
                result = block["toolResult"]
                call_id = str(result.get("toolUseId"))
                text = "".join(str(part.get("text", "")) for part in result.get("content") or [])
                results.append(ToolResultView(names.get(call_id, call_id), text, result.get("status") == "error"))
    tools = (body.get("toolConfig") or {}).get("tools") or []
    return RequestView(
        wire=WIRE,
        model=model,
        system=system,
        tool_names=tuple(str(tool.get("toolSpec", {}).get("name")) for tool in tools),
        user_texts=tuple(users),
        tool_results=tuple(results),
        body_size=body_size,
        reasoning=_asks_for_reasoning(body),
        first_user_text=every_user[0] if every_user else "",
        user_message_count=len(every_user),
    )


def _asks_for_reasoning(body: dict[str, Any]) -> bool:
    fields = body.get("additionalModelRequestFields") or {}
    thinking = fields.get("thinking")
    return bool(fields.get("reasoning_effort")) or (isinstance(thinking, dict) and thinking.get("type") == "enabled")


def request_error(body: dict[str, Any]) -> str | None:
    """Bedrock's validation: alternating roles, non-empty content, results answering calls."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "A conversation must start with a user message."
    thinking = _asks_for_reasoning(body) and "thinking" in (body.get("additionalModelRequestFields") or {})
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if index and role == messages[index - 1].get("role"):
            return "A conversation must alternate between user and assistant roles."
        if not isinstance(content, list) or not content:
            return f"messages.{index}.content: The content field in the Message object is empty."
        for block in content:
            if "text" in block and not block["text"]:
                return f"messages.{index}: The text field in the ContentBlock object is blank."
            if "toolResult" in block and block["toolResult"].get("toolUseId") not in open_calls:
                return (
                    "The toolUse blocks in the previous turn do not match the toolResult blocks "
                    f"({block['toolResult'].get('toolUseId')})."
                )
        if role == "assistant":
            open_calls = {str(block["toolUse"].get("toolUseId")) for block in content if "toolUse" in block}
            if thinking and open_calls and "reasoningContent" not in content[0]:
                return (
                    f"messages.{index}.content.0: Expected `thinking` or `redacted_thinking` "
                    "when thinking is enabled and the message uses tools."
                )
    return None


def render_stream(plan: Plan, ids: IdSource) -> list[Step]:
    steps = [Step(encode_event("messageStart", {"role": "assistant"}))]
    index = 0
    if plan.reasoning:
        for delta in ({"text": plan.reasoning}, {"signature": signature(plan.reasoning)}):
            payload = {"contentBlockIndex": index, "delta": {"reasoningContent": delta}}
            steps.append(Step(encode_event("contentBlockDelta", payload)))
        steps.append(Step(encode_event("contentBlockStop", {"contentBlockIndex": index})))
        index += 1
    if plan.chunks:
        for text in plan.chunks:
            payload = {"contentBlockIndex": index, "delta": {"text": text}}
            steps.append(Step(encode_event("contentBlockDelta", payload), is_text_delta=True))
        steps.append(Step(encode_event("contentBlockStop", {"contentBlockIndex": index})))
        index += 1
    for call in plan.tool_calls:
        start = {"toolUse": {"toolUseId": ids.next("tooluse"), "name": call.name}}
        steps.append(Step(encode_event("contentBlockStart", {"contentBlockIndex": index, "start": start})))
        for piece in pieces(json.dumps(call.arguments)):
            payload = {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}
            steps.append(Step(encode_event("contentBlockDelta", payload)))
        steps.append(Step(encode_event("contentBlockStop", {"contentBlockIndex": index})))
        index += 1
    steps.append(Step(encode_event("messageStop", {"stopReason": "tool_use" if plan.tool_calls else "end_turn"})))
    # Bedrock counts cache reads and writes apart from input (and reports them only where a model
    # caches), reasoning inside output.
    output = plan.output_tokens + plan.reasoning_tokens
    usage = {"inputTokens": plan.input_tokens, "outputTokens": output}
    if plan.cache_read_tokens or plan.cache_write_tokens:
        usage["cacheReadInputTokens"] = plan.cache_read_tokens
        usage["cacheWriteInputTokens"] = plan.cache_write_tokens
    usage["totalTokens"] = plan.input_tokens + output + plan.cache_read_tokens + plan.cache_write_tokens
    steps.append(Step(encode_event("metadata", {"usage": usage, "metrics": {"latencyMs": 1}})))
    return steps


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"message": message}


def error_headers(status: int) -> dict[str, str]:
    """botocore reads the error code from this header (rest-json protocol)."""
    return {"x-amzn-ErrorType": _ERROR_TYPES.get(status, "InternalServerException" if status >= 500 else "Error")}


def error_event(message: str) -> bytes:
    return encode_exception("modelStreamErrorException", message)
