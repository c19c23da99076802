"""Every outcome row for HTTP JSON and SSE tools, against real services on loopback.

tools.md "Handle errors": is_error / unknown_outcome per row; reference-errors "Tool errors".
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from tests.tools.conftest import Install, Progress, binding, context, text_of
from tests.tools.servers import ToolZoo, free_port
from tools_app.invocation import CallCancelled
from tools_app.transports.base import HEADER_TIMEOUT_SECONDS

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 16}, "email": {"type": "string", "format": "email"}},
    "required": ["text"],
    "additionalProperties": False,
}


def reply(body: Any, *, status: int = 200, content_type: str = "application/json") -> dict[str, Any]:
    return {"status": status, "content_type": content_type, "body": body if isinstance(body, str) else json.dumps(body)}


def sse(*frames: str) -> dict[str, Any]:
    return {"chunks": list(frames)}


# --- success ---------------------------------------------------------------------------------


async def test_a_json_tool_gets_the_identity_envelope_token_and_traceparent(
    install: Install, zoo: ToolZoo, zoo_url: str
) -> None:
    # given
    tools = install(
        binding("who", zoo_url + "/identity", token_env="WHO_KEY"), tokens={"who": "tool-secret-0123456789abcdef"}
    )
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    # when
    result = await tools.invoke(context("who", traceparent=trace), "who", {"text": "hi"})

    # then
    assert "is_error" not in result
    (call,) = zoo.calls("/identity")
    assert call.body == {"tenant_id": "acme", "session_id": "5" * 32, "call_id": "c" * 32, "arguments": {"text": "hi"}}
    assert call.headers["authorization"] == "Bearer tool-secret-0123456789abcdef"
    assert call.headers["traceparent"] == trace
    assert call.headers["content-type"] == "application/json"
    assert call.headers["accept"] == "application/json, text/event-stream"


async def test_a_binding_without_token_env_sends_no_authorization(install: Install, zoo: ToolZoo, zoo_url: str) -> None:
    # given
    tools = install(binding("who", zoo_url + "/identity"))

    # when
    await tools.invoke(context("who"), "who", {})

    # then
    (call,) = zoo.calls("/identity")
    assert "authorization" not in call.headers and "traceparent" not in call.headers


async def test_a_json_result_reaches_the_model_as_returned(install: Install, zoo: ToolZoo, zoo_url: str) -> None:
    # given
    tools = install(binding("echo", zoo_url + "/echo", input_schema=ECHO_SCHEMA))

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "hello"})

    # then
    assert result == {"content": [{"type": "text", "text": "hello"}]}
    assert len(zoo.calls("/echo")) == 1


async def test_an_sse_tool_streams_progress_and_ends_with_its_result(
    install: Install, zoo: ToolZoo, zoo_url: str
) -> None:
    # given
    tools = install(binding("stream", zoo_url + "/sse"))
    progress = Progress()
    frames = sse(
        ": keepalive\n\n",
        'event: progress\ndata: {"status":"waiting_for_operator"}\n\n',
        'event: progress\r\ndata: {"step":\r\ndata: 2}\r\n\r\n',
        'event: result\ndata: {"content":[{"type":"text","text":"Operator answered yes."}]}\n\n',
    )

    # when
    result = await tools.invoke(context("stream", progress=progress), "stream", frames)

    # then
    assert result == {"content": [{"type": "text", "text": "Operator answered yes."}]}
    assert progress == [{"status": "waiting_for_operator"}, {"step": 2}]


async def test_a_structured_only_result_is_rendered_as_a_text_block(install: Install, zoo_url: str) -> None:
    # given
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tools = install(binding("count", zoo_url + "/reply", output_schema=schema))

    # when
    result = await tools.invoke(context("count"), "count", reply({"structured_content": {"n": 3}}))

    # then
    assert result == {"content": [{"type": "text", "text": '{"n":3}'}], "structured_content": {"n": 3}}


async def test_an_image_block_passes_through(install: Install, zoo_url: str) -> None:
    # given
    tools = install(binding("pic", zoo_url + "/reply"))
    image = {"type": "image", "data": "aGVsbG8=", "mime_type": "image/png"}

    # when
    result = await tools.invoke(context("pic"), "pic", reply({"content": [image]}))

    # then
    assert result == {"content": [image]}


# --- the tool reports an error: is_error without unknown_outcome ------------------------------


async def test_a_tool_error_result_is_an_error_with_a_known_outcome(install: Install, zoo_url: str) -> None:
    # given: error results bypass the success schema
    tools = install(binding("fail", zoo_url + "/reply", output_schema={"type": "object", "required": ["n"]}))
    body = {"content": [{"type": "text", "text": "denied"}], "is_error": True, "structured_content": {"why": 1}}

    # when
    result = await tools.invoke(context("fail"), "fail", reply(body))

    # then
    assert result == {
        "content": [{"type": "text", "text": "denied"}],
        "is_error": True,
        "structured_content": {"why": 1},
    }


async def test_a_tool_may_report_its_own_unknown_outcome(install: Install, zoo_url: str) -> None:
    # given
    tools = install(binding("fail", zoo_url + "/reply"))
    body = {"content": [{"type": "text", "text": "lost"}], "is_error": True, "unknown_outcome": True}

    # when
    result = await tools.invoke(context("fail"), "fail", reply(body))

    # then
    assert result == body


# --- refused before sending: is_error, no unknown_outcome, nothing dispatched -----------------


@pytest.mark.parametrize(
    ("enabled", "tenant", "arguments", "expected"),
    [
        pytest.param(("echo",), "globex", {"text": "hi"}, "not enabled", id="other_tenant_case"),
        pytest.param((), "acme", {"text": "hi"}, "not enabled", id="not_enabled_for_session_case"),
        pytest.param(("nosuch",), "acme", {"text": "hi"}, "not enabled", id="unknown_tool_case"),
        pytest.param(("echo",), "acme", {"text": 5}, "invalid arguments for echo at text", id="type_case"),
        pytest.param(("echo",), "acme", {}, "'text' is a required property", id="required_case"),
        pytest.param(("echo",), "acme", {"text": "x" * 17}, "is too long", id="max_length_case"),
        pytest.param(("echo",), "acme", {"text": "a", "more": 1}, "Additional properties", id="extra_field_case"),
        pytest.param(("echo",), "acme", {"text": "a", "email": "nope"}, "is not a 'email'", id="format_case"),
        pytest.param(("echo",), "acme", ["text"], "must be a JSON object", id="not_an_object_case"),
    ],
)
async def test_a_refused_call_is_an_error_with_a_known_outcome_and_is_never_sent(
    install: Install, zoo: ToolZoo, zoo_url: str, enabled: tuple[str, ...], tenant: str, arguments: Any, expected: str
) -> None:
    # given
    tools = install(binding("echo", zoo_url + "/echo", input_schema=ECHO_SCHEMA))
    name = enabled[0] if enabled else "echo"

    # when
    result = await tools.invoke(context(*enabled, tenant=tenant), name, arguments)

    # then
    assert result["is_error"] is True and "unknown_outcome" not in result
    assert expected in text_of(result)
    assert zoo.received == []


async def test_a_missing_credential_refuses_the_call(install: Install, zoo: ToolZoo, zoo_url: str) -> None:
    # given: an admin binding whose token_env is not set (config bindings fail at startup instead)
    tools = install(binding("echo", zoo_url + "/echo", token_env="UNSET_TOOL_KEY"), tokens={})

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "hi"})

    # then
    assert result["is_error"] is True and "unknown_outcome" not in result
    assert "UNSET_TOOL_KEY" in text_of(result)
    assert zoo.received == []


# --- after sending: is_error and unknown_outcome ----------------------------------------------


async def test_a_refused_connection_is_an_unknown_outcome(install: Install) -> None:
    # given
    tools = install(binding("gone", f"http://127.0.0.1:{free_port()}/tool"))

    # when
    result = await tools.invoke(context("gone"), "gone", {})

    # then
    assert result["is_error"] is True and result["unknown_outcome"] is True


async def test_headers_later_than_the_deadline_fail_the_call(install: Install, zoo: ToolZoo, zoo_url: str) -> None:
    # given: the 30 s header deadline, shortened for the test
    tools = install(binding("stall", zoo_url + "/stall"), header_timeout=0.3)
    started = time.monotonic()

    # when
    result = await tools.invoke(context("stall"), "stall", {"seconds": 5})

    # then
    assert time.monotonic() - started < 2
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert "headers did not arrive within 0.3 s" in text_of(result)
    assert len(zoo.calls("/stall")) == 1


async def test_an_sse_stream_outlives_the_header_deadline_but_not_timeout_seconds(
    install: Install, zoo_url: str
) -> None:
    # given: headers arrive at once, then the stream stays silent
    tools = install(binding("slow", zoo_url + "/slow", timeout_seconds=1), header_timeout=0.2)
    started = time.monotonic()

    # when
    result = await tools.invoke(context("slow"), "slow", {"seconds": 5})

    # then
    assert 0.9 < time.monotonic() - started < 2.5
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert "timed out after 1 s" in text_of(result)


async def test_a_header_deadline_default_is_thirty_seconds(install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    # when
    monkeypatch.delenv("BRAIN_TOOL_HEADER_TIMEOUT", raising=False)
    tools = install()

    # then
    assert tools.config_tools.header_timeout == HEADER_TIMEOUT_SECONDS == 30.0


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("/status/500", "HTTP 500", id="server_error_case"),
        pytest.param("/redirect", "HTTP 307", id="redirect_not_followed_case"),
        pytest.param("/nowhere", "HTTP 404", id="not_found_case"),
    ],
)
async def test_a_non_2xx_status_is_an_unknown_outcome_and_its_body_is_ignored(
    install: Install, zoo: ToolZoo, zoo_url: str, path: str, expected: str
) -> None:
    # given
    tools = install(binding("tool", zoo_url + path))

    # when
    result = await tools.invoke(context("tool"), "tool", {"text": "x"})

    # then
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert expected in text_of(result) and "ignored" not in text_of(result)
    assert len(zoo.received) == 1  # dispatched once; the redirect target never called


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param(
            reply("<p>hi</p>", content_type="text/html"), "unsupported content type 'text/html'", id="content_type_case"
        ),
        pytest.param(reply("{not json"), "not valid JSON", id="invalid_json_case"),
        pytest.param(reply([1, 2]), "must be a JSON object", id="not_an_object_case"),
        pytest.param(
            reply({"content": [{"type": "text", "text": "a"}], "extra": 1}),
            "unknown result field 'extra'",
            id="unknown_field_case",
        ),
        pytest.param(
            reply({"content": [{"type": "audio", "data": "aGk="}]}), "unknown type", id="unknown_content_type_case"
        ),
        pytest.param(
            reply({"content": [{"type": "text", "text": "a", "x": 1}]}),
            "exactly the string fields",
            id="content_extra_field_case",
        ),
        pytest.param(reply({"content": [{"type": "text"}]}), "exactly the string fields", id="text_without_text_case"),
        pytest.param(
            reply({"content": [{"type": "image", "data": "aGk="}]}),
            "exactly the string fields",
            id="image_without_mime_case",
        ),
        pytest.param(
            reply({"content": [{"type": "image", "data": "**", "mime_type": "image/png"}]}),
            "not base64",
            id="image_not_base64_case",
        ),
        pytest.param(reply({"content": []}), "neither content nor structured_content", id="empty_content_case"),
        pytest.param(reply({"is_error": True}), "neither content nor structured_content", id="neither_case"),
        pytest.param(reply({"content": "hi"}), "content must be an array", id="content_not_array_case"),
        pytest.param(
            reply({"content": [{"type": "text", "text": "a"}], "is_error": "yes"}),
            "is_error must be a boolean",
            id="is_error_type_case",
        ),
        pytest.param(
            reply({"structured_content": {"n": "three"}}), "does not match output_schema", id="output_schema_case"
        ),
    ],
)
async def test_an_invalid_json_response_is_an_unknown_outcome(
    install: Install, zoo_url: str, arguments: dict[str, Any], expected: str
) -> None:
    # given
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    tools = install(binding("tool", zoo_url + "/reply", output_schema=schema))

    # when
    result = await tools.invoke(context("tool"), "tool", arguments)

    # then
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert expected in text_of(result)


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        pytest.param(('event: progress\ndata: {"a":1}\n\n',), "without a result event", id="no_result_case"),
        pytest.param(("data: {}\n\n",), "unexpected 'message' event", id="unnamed_event_case"),
        pytest.param(("event: done\ndata: {}\n\n",), "unexpected 'done' event", id="other_event_case"),
        pytest.param(
            ("event: progress\ndata: not json\n\n",), "progress event is not valid JSON", id="progress_not_json_case"
        ),
        pytest.param(('event: result\ndata: {"content":1}\n\n',), "content must be an array", id="invalid_result_case"),
        pytest.param(
            ("event: result\ndata: {broken\n\n",), "result event is not valid JSON", id="result_not_json_case"
        ),
        pytest.param(
            ('event: result\ndata: {"content":[{"type":"text","text":"a"}]}',),
            "without a result event",
            id="unterminated_result_case",
        ),
    ],
)
async def test_a_broken_event_stream_is_an_unknown_outcome(
    install: Install, zoo_url: str, frames: tuple[str, ...], expected: str
) -> None:
    # given
    tools = install(binding("stream", zoo_url + "/sse"))

    # when
    result = await tools.invoke(context("stream"), "stream", sse(*frames))

    # then
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert expected in text_of(result)


@pytest.mark.parametrize(
    ("path", "arguments"),
    [
        pytest.param("/big", {"n": 2000}, id="json_case"),
        pytest.param(
            "/sse", sse(*[f'event: progress\ndata: {{"pad":"{"p" * 200}"}}\n\n' for _ in range(12)]), id="sse_case"
        ),
    ],
)
async def test_output_past_max_output_bytes_is_an_unknown_outcome(
    install: Install, zoo_url: str, path: str, arguments: dict[str, Any]
) -> None:
    # given
    tools = install(binding("big", zoo_url + path, max_output_bytes=1024))

    # when
    result = await tools.invoke(context("big"), "big", arguments)

    # then
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert "exceeds max_output_bytes (1024)" in text_of(result)


async def test_output_at_max_output_bytes_is_accepted(install: Install, zoo_url: str) -> None:
    # given: the response body is exactly the limit
    body = json.dumps({"content": [{"type": "text", "text": "x" * 10}]})
    tools = install(binding("fit", zoo_url + "/reply", max_output_bytes=len(body)))

    # when
    result = await tools.invoke(context("fit"), "fit", reply(body))

    # then
    assert result == {"content": [{"type": "text", "text": "x" * 10}]}


async def test_http_proxy_from_the_environment_carries_tool_calls(
    install: Install, zoo: ToolZoo, zoo_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the zoo stands in for a forward proxy; tools.invalid never resolves
    monkeypatch.setenv("HTTP_PROXY", zoo_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    tools = install(binding("echo", "http://tools.invalid/echo"))

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "via proxy"})

    # then
    assert result == {"content": [{"type": "text", "text": "via proxy"}]}
    (call,) = zoo.calls("/echo")
    assert call.headers["host"] == "tools.invalid"


async def test_a_call_cancelled_after_it_reached_the_service_reports_that_it_was_sent(
    install: Install, zoo: ToolZoo, zoo_url: str
) -> None:
    # given
    tools = install(binding("stall", zoo_url + "/stall"))
    task = asyncio.get_running_loop().create_task(tools.invoke(context("stall"), "stall", {"seconds": 30}))
    deadline = time.monotonic() + 10
    while not zoo.calls("/stall") and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    # when
    task.cancel()
    # then
    with pytest.raises(CallCancelled):
        await task
    assert len(zoo.calls("/stall")) == 1


async def test_a_call_cancelled_before_dispatch_stays_a_plain_cancellation(
    install: Install, zoo: ToolZoo, zoo_url: str
) -> None:
    # given
    tools = install(binding("stall", zoo_url + "/stall"))
    task = asyncio.get_running_loop().create_task(tools.invoke(context("stall"), "stall", {"seconds": 30}))
    # when: cancelled before the task ever ran
    task.cancel()
    # then
    with pytest.raises(asyncio.CancelledError):
        await task
    assert zoo.calls("/stall") == []
