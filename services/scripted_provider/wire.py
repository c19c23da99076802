"""Render a `Plan` in the real streaming (SSE) and JSON formats of each supported wire.

Each renderer returns `Step`s; the server paces them (delays, stalls, broken streams). The shapes
follow the providers' documented streaming events closely enough that the official SDKs parse
them unmodified.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from . import bedrock, google, mistral, pi_wire
from .framing import IdSource, Step, pieces, signature, sse
from .script import Plan

__all__ = [
    "IdSource",
    "Step",
    "error_body",
    "error_event",
    "error_headers",
    "render_json",
    "render_stream",
    "request_headers",
    "stream_content_type",
]

# The Responses wire, on the platform API and on the ChatGPT backend of Codex.
_RESPONSES_WIRES = ("openai-responses", "openai-codex-responses")


def render_stream(wire: str, plan: Plan, model: str, ids: IdSource, *, request_id: str) -> list[Step]:
    """`request_id` is this request's id at the provider (Gemini's `responseId`; the others send
    it as a header, `request_headers`)."""
    if wire == bedrock.WIRE:
        return bedrock.render_stream(plan, ids)
    if wire in google.WIRES:
        return google.render_stream(plan, model, request_id)
    if wire == mistral.WIRE:
        return mistral.render_stream(plan, model, ids)
    if wire == pi_wire.WIRE:
        return pi_wire.render_stream(plan, ids, request_id=request_id)
    if wire == "openai-completions":
        return _chat_stream(plan, model, ids)
    if wire in _RESPONSES_WIRES:
        return _responses_stream(plan, model, ids)
    return _messages_stream(plan, model, ids)


def render_json(wire: str, plan: Plan, model: str, ids: IdSource) -> dict[str, Any]:
    """The non-streaming response body for the same plan."""
    if wire == "openai-completions":
        message: dict[str, Any] = {"role": "assistant", "content": plan.text or None}
        if plan.tool_calls:
            message["tool_calls"] = [
                {
                    "id": ids.next("call"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in plan.tool_calls
            ]
        return {
            "id": ids.next("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if plan.tool_calls else "stop"}],
            "usage": _chat_usage(plan),
        }
    if wire in _RESPONSES_WIRES:
        return _response_object(plan, model, ids.next("resp"), _response_output(plan, ids), status="completed")
    return _message_object(plan, model, ids.next("msg"), _message_content(plan, ids), final=True)


def request_headers(wire: str, request_id: str) -> dict[str, str]:
    """The header that names a request at the provider (Gemini sends none)."""
    if wire == bedrock.WIRE:
        return {"x-amzn-RequestId": request_id}
    if wire == "anthropic-messages":
        return {"request-id": request_id}
    if wire in google.WIRES:
        return {}
    return {"x-request-id": request_id}


def stream_content_type(wire: str) -> str:
    return bedrock.CONTENT_TYPE if wire == bedrock.WIRE else "text/event-stream"


def error_headers(wire: str, status: int) -> dict[str, str]:
    return bedrock.error_headers(status) if wire == bedrock.WIRE else {}


def error_body(wire: str, status: int, message: str) -> dict[str, Any]:
    if wire == bedrock.WIRE:
        return bedrock.error_body(status, message)
    if wire in google.WIRES:
        return google.error_body(status, message)
    if wire == mistral.WIRE:
        return mistral.error_body(status, message)
    if wire == pi_wire.WIRE:
        return pi_wire.error_body(status, message)
    client_error = 400 <= status < 500
    if wire == "anthropic-messages":
        default = "invalid_request_error" if client_error else "api_error"
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, default)
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = "rate_limit_exceeded" if status == 429 else "invalid_request_error" if client_error else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def error_event(wire: str, message: str, *, plan: Plan) -> bytes:
    """A mid-stream failure event in the wire's own format."""
    if wire == bedrock.WIRE:
        return bedrock.error_event(message)
    if wire in google.WIRES:
        return google.error_event(message)
    if wire == mistral.WIRE:
        return mistral.error_event(message)
    if wire == pi_wire.WIRE:
        return pi_wire.error_event(message, nested=plan.pi_nested_events)
    if wire == "openai-completions":
        return sse({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
    if wire in _RESPONSES_WIRES:
        return sse(
            {"type": "error", "code": "server_error", "message": message, "param": None, "sequence_number": 0},
            event="error",
        )
    return sse({"type": "error", "error": {"type": "api_error", "message": message}}, event="error")


# OpenAI Chat Completions ---------------------------------------------------------------------


def _chat_usage(plan: Plan) -> dict[str, Any]:
    """OpenAI counts cached tokens inside the prompt and reasoning tokens inside the completion."""
    prompt = plan.input_tokens + plan.cache_read_tokens + plan.cache_write_tokens
    completion = plan.output_tokens + plan.reasoning_tokens
    return {
        "prompt_tokens": prompt,
        "prompt_tokens_details": {"cached_tokens": plan.cache_read_tokens},
        "completion_tokens": completion,
        "completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
        "total_tokens": prompt + completion,
    }


def _chat_stream(plan: Plan, model: str, ids: IdSource) -> list[Step]:
    completion_id, created = ids.next("chatcmpl"), int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    steps = [Step(chunk({"role": "assistant", "content": ""}))]
    steps += [Step(chunk({"content": text}), is_text_delta=True) for text in plan.chunks]
    for index, call in enumerate(plan.tool_calls):
        head = {
            "index": index,
            "id": ids.next("call"),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        steps.append(Step(chunk({"tool_calls": [head]})))
        for piece in pieces(json.dumps(call.arguments)):
            steps.append(Step(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})))
    steps.append(Step(chunk({}, "tool_calls" if plan.tool_calls else "stop")))
    usage = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []}
    steps.append(Step(sse({**usage, "usage": _chat_usage(plan)})))
    steps.append(Step(b"data: [DONE]\n\n"))
    return steps


# OpenAI Responses ----------------------------------------------------------------------------


def _responses_usage(plan: Plan) -> dict[str, Any]:
    chat = _chat_usage(plan)
    return {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": chat["prompt_tokens_details"],
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": chat["completion_tokens_details"],
        "total_tokens": chat["total_tokens"],
    }


def _response_object(plan: Plan, model: str, response_id: str, output: list[Any], *, status: str) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _responses_usage(plan) if status == "completed" else None,
    }


def _response_output(plan: Plan, ids: IdSource) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if plan.reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": ids.next("rs"),
                "summary": [{"type": "summary_text", "text": plan.reasoning}],
                "encrypted_content": signature(plan.reasoning),
            }
        )
    if plan.text:
        output.append(
            {
                "type": "message",
                "id": ids.next("msg"),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": plan.text, "annotations": []}],
            }
        )
    for call in plan.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": ids.next("fc"),
                "call_id": ids.next("call"),
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
        )
    return output


def _responses_stream(plan: Plan, model: str, ids: IdSource) -> list[Step]:
    response_id = ids.next("resp")
    sequence = itertools.count()
    steps: list[Step] = []

    def emit(kind: str, payload: dict[str, Any], *, is_text_delta: bool = False) -> None:
        data = {"type": kind, "sequence_number": next(sequence), **payload}
        steps.append(Step(sse(data, event=kind), is_text_delta=is_text_delta))

    emit("response.created", {"response": _response_object(plan, model, response_id, [], status="in_progress")})
    emit("response.in_progress", {"response": _response_object(plan, model, response_id, [], status="in_progress")})
    output = _response_output(plan, ids)
    for index, item in enumerate(output):
        if item["type"] == "reasoning":
            emit("response.output_item.added", {"output_index": index, "item": {**item, "summary": []}})
        elif item["type"] == "message":
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit("response.content_part.added", {**where, "part": part})
            for text in plan.chunks:
                emit("response.output_text.delta", {**where, "delta": text, "logprobs": []}, is_text_delta=True)
            emit("response.output_text.done", {**where, "text": plan.text, "logprobs": []})
            emit("response.content_part.done", {**where, "part": {**part, "text": plan.text}})
        else:
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            )
            for piece in pieces(item["arguments"]):
                emit(
                    "response.function_call_arguments.delta",
                    {"item_id": item["id"], "output_index": index, "delta": piece},
                )
            emit(
                "response.function_call_arguments.done",
                {"item_id": item["id"], "output_index": index, "arguments": item["arguments"], "name": item["name"]},
            )
        emit("response.output_item.done", {"output_index": index, "item": item})
    emit("response.completed", {"response": _response_object(plan, model, response_id, output, status="completed")})
    return steps


# Anthropic Messages --------------------------------------------------------------------------


def _message_content(plan: Plan, ids: IdSource) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if plan.reasoning:
        content.append({"type": "thinking", "thinking": plan.reasoning, "signature": signature(plan.reasoning)})
    if plan.text:
        content.append({"type": "text", "text": plan.text})
    for call in plan.tool_calls:
        content.append({"type": "tool_use", "id": ids.next("toolu"), "name": call.name, "input": call.arguments})
    return content


def _message_object(plan: Plan, model: str, message_id: str, content: list[Any], *, final: bool) -> dict[str, Any]:
    stop = ("tool_use" if plan.tool_calls else "end_turn") if final else None
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {  # Anthropic counts cache reads and writes apart from input, thinking inside output
            "input_tokens": plan.input_tokens,
            "output_tokens": plan.output_tokens + plan.reasoning_tokens if final else 1,
            "cache_creation_input_tokens": plan.cache_write_tokens,
            "cache_read_input_tokens": plan.cache_read_tokens,
        },
    }


def _messages_stream(plan: Plan, model: str, ids: IdSource) -> list[Step]:
    message_id = ids.next("msg")
    steps = [
        Step(
            sse(
                {"type": "message_start", "message": _message_object(plan, model, message_id, [], final=False)},
                event="message_start",
            )
        )
    ]
    for index, block in enumerate(_message_content(plan, ids)):
        start: dict[str, Any]
        deltas: list[tuple[dict[str, Any], bool]]
        if block["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                ({"type": "thinking_delta", "thinking": block["thinking"]}, False),
                ({"type": "signature_delta", "signature": block["signature"]}, False),
            ]
        elif block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [({"type": "text_delta", "text": text}, True) for text in plan.chunks]
        else:
            start = {**block, "input": {}}
            deltas = [
                ({"type": "input_json_delta", "partial_json": p}, False) for p in pieces(json.dumps(block["input"]))
            ]
        steps.append(
            Step(
                sse(
                    {"type": "content_block_start", "index": index, "content_block": start}, event="content_block_start"
                )
            )
        )
        for delta, is_text in deltas:
            data = {"type": "content_block_delta", "index": index, "delta": delta}
            steps.append(Step(sse(data, event="content_block_delta"), is_text_delta=is_text))
        steps.append(Step(sse({"type": "content_block_stop", "index": index}, event="content_block_stop")))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use" if plan.tool_calls else "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": plan.output_tokens + plan.reasoning_tokens},
    }
    steps.append(Step(sse(delta, event="message_delta")))
    steps.append(Step(sse({"type": "message_stop"}, event="message_stop")))
    return steps
