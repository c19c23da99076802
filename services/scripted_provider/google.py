"""The Gemini wire: `POST …/models/{model}:streamGenerateContent?alt=sse`, for the Gemini API and Vertex AI.

Reads `generateContent` bodies into a `RequestView`, checks them as Gemini does, and renders a `Plan`
as SSE chunks of `GenerateContentResponse`. Like Gemini, function calls come whole (no streamed
arguments) and without ids, and a reasoning reply carries a `thoughtSignature` that must come back.
"""

from __future__ import annotations

import base64
from typing import Any

from .framing import Step, signature, sse
from .script import Plan, RequestView, ToolResultView

__all__ = [
    "VERTEX_WIRE",
    "WIRE",
    "WIRES",
    "error_body",
    "error_event",
    "model_from_path",
    "render_stream",
    "request_error",
    "view_request",
]

WIRE = "google-generative-ai"
VERTEX_WIRE = "google-vertex"  # the same format under `…/publishers/google/models/…`
WIRES = (WIRE, VERTEX_WIRE)
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def _get(value: dict[str, Any], camel: str) -> Any:
    """Gemini accepts proto field names in either spelling (`functionCall` / `function_call`)."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return value.get(camel, value.get(snake))


def model_from_path(path: str) -> str:
    """`/v1beta/models/gemini-2.5-pro:streamGenerateContent` → `gemini-2.5-pro`."""
    return path.rsplit("/models/", 1)[-1].split(":", 1)[0]


def view_request(wire: str, body: dict[str, Any], *, model: str, body_size: int) -> RequestView:
    system_parts = (_get(body, "systemInstruction") or {}).get("parts") or []
    users: list[str] = []
    results: list[ToolResultView] = []
    every_user: list[str] = []
    for content in body.get("contents") or []:
        parts = [part for part in content.get("parts") or [] if isinstance(part, dict)]
        if content.get("role") == "model":
            users, results = [], []
            continue
        for part in parts:
            response = _get(part, "functionResponse")
            if response is not None:
                payload = response.get("response") or {}
                is_error = "error" in payload
                results.append(
                    ToolResultView(
                        str(response.get("name")), str(payload.get("error" if is_error else "output", "")), is_error
                    )
                )
            elif "text" in part:
                users.append(str(part["text"]))
                every_user.append(users[-1])
    names = [
        str(declaration.get("name"))
        for tool in body.get("tools") or []
        for declaration in _get(tool, "functionDeclarations") or []
    ]
    return RequestView(
        wire=wire,
        model=model,
        system="".join(str(part.get("text", "")) for part in system_parts),
        tool_names=tuple(names),
        user_texts=tuple(users),
        tool_results=tuple(results),
        body_size=body_size,
        reasoning=_asks_for_reasoning(body),
        first_user_text=every_user[0] if every_user else "",
        user_message_count=len(every_user),
    )


def _asks_for_reasoning(body: dict[str, Any]) -> bool:
    thinking = _get(_get(body, "generationConfig") or {}, "thinkingConfig") or {}
    return bool(_get(thinking, "thinkingBudget") or _get(thinking, "thinkingLevel"))


def request_error(body: dict[str, Any]) -> str | None:
    """Gemini's checks: contents present, responses answering the previous turn's calls, signatures."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    reasoning = _asks_for_reasoning(body)
    open_calls: set[str] = set()
    for index, content in enumerate(contents):
        parts = content.get("parts") or []
        if not parts:
            return f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not be empty."
        if content.get("role") == "model":
            calls = [_get(part, "functionCall") for part in parts if _get(part, "functionCall") is not None]
            open_calls = {str(call.get("name")) for call in calls}
            first_call = next((part for part in parts if _get(part, "functionCall") is not None), None)
            if reasoning and first_call is not None and not _get(first_call, "thoughtSignature"):
                return f"Function call is missing a thought_signature in functionCall parts (contents[{index}])."
            continue
        for part in parts:
            response = _get(part, "functionResponse")
            if response is not None and str(response.get("name")) not in open_calls:
                return (
                    "Please ensure that the number of function response parts is equal to the number of "
                    "function call parts of the function call turn."
                )
    return None


def _chunk(model: str, response_id: str, parts: list[dict[str, Any]], **extra: Any) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if "finishReason" in extra:
        candidate["finishReason"] = extra.pop("finishReason")
    return sse({"candidates": [candidate], "modelVersion": model, "responseId": response_id, **extra})


def render_stream(plan: Plan, model: str, response_id: str) -> list[Step]:
    # Signatures are bytes, base64 on the wire.
    sign = base64.b64encode(signature(plan.reasoning).encode()).decode() if plan.reasoning else ""
    steps: list[Step] = []
    for index, text in enumerate(plan.chunks):
        part: dict[str, Any] = {"text": text}
        if sign and index == 0 and not plan.tool_calls:
            part["thoughtSignature"] = sign  # Gemini signs the first part when there is no call
        steps.append(Step(_chunk(model, response_id, [part]), is_text_delta=True))
    if plan.tool_calls:
        calls: list[dict[str, Any]] = [{"functionCall": {"name": c.name, "args": c.arguments}} for c in plan.tool_calls]
        if sign:
            calls[0]["thoughtSignature"] = sign  # and the first function call when there is one
        steps.append(Step(_chunk(model, response_id, calls)))
    # Gemini counts cached tokens inside the prompt, thoughts apart from candidates, and leaves
    # zero counts out of its JSON.
    prompt = plan.input_tokens + plan.cache_read_tokens + plan.cache_write_tokens
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": plan.output_tokens}
    if plan.cache_read_tokens:
        usage["cachedContentTokenCount"] = plan.cache_read_tokens
    if plan.reasoning_tokens:
        usage["thoughtsTokenCount"] = plan.reasoning_tokens
    usage["totalTokenCount"] = prompt + plan.output_tokens + plan.reasoning_tokens
    steps.append(Step(_chunk(model, response_id, [{"text": ""}], finishReason="STOP", usageMetadata=usage)))
    return steps


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": _STATUS_NAMES.get(status, "UNKNOWN")}}


def error_event(message: str) -> bytes:
    return sse(error_body(500, message))
