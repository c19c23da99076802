"""Declarative REST tools (transport rest) against a real REST service on loopback: templates
filled from the arguments, bearer auth, and every outcome row (2xx, 4xx, 5xx, timeout, redirect,
output limit, proxy, a service that cannot be reached)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.tools.conftest import Install, binding, context, text_of
from tests.tools.rest_server import RestService
from tests.tools.servers import LoopbackServer, free_port
from tools_app.invocation import Outcome

TOKEN = "rest-secret-0123456789abcdef"
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order": {"type": "string"},
        "count": {"type": "integer"},
        "urgent": {"type": "boolean"},
        "labels": {"type": "array", "items": {"type": "string"}},
        "note": {"type": "string"},
        "region": {"type": "string"},
    },
    "required": ["order"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def rest_server() -> Iterator[tuple[RestService, LoopbackServer]]:
    service = RestService()
    server = LoopbackServer(service).start()
    yield service, server
    server.stop()


@pytest.fixture
def service(rest_server: tuple[RestService, LoopbackServer]) -> RestService:
    rest_server[0].received.clear()
    return rest_server[0]


@pytest.fixture
def rest_url(rest_server: tuple[RestService, LoopbackServer]) -> str:
    return rest_server[1].url


def rest(name: str, url: str, **fields: Any) -> Any:
    fields.setdefault("input_schema", ORDER_SCHEMA)
    return binding(name, url, transport="rest", **fields)


# --- templates ---------------------------------------------------------------------------------


async def test_the_templates_are_filled_from_the_arguments_with_bearer_auth(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tool = rest(
        "update_order",
        rest_url + "/items/orders/{{order}}/lines?region={{region}}&fixed=1",
        method="PATCH",
        query={"count": "{{count}}", "tag": "n-{{note}}"},
        headers={"X-Order": "order {{order}}", "X-Count": "{{count}}"},
        body={
            "count": "{{count}}",
            "urgent": "{{urgent}}",
            "labels": "{{labels}}",
            "summary": "{{count}} x {{order}}",
            "nested": {"order": "{{order}}", "fixed": [1, True, None]},
        },
        token_env="REST_KEY",
    )
    tools = install(tool, tokens={"update_order": TOKEN})
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    arguments = {"order": "A/7 b?c", "count": 3, "urgent": False, "labels": ["x", "y"], "note": "é&=", "region": "eu"}

    # when
    invocation = await tools.invoke_call(context("update_order", traceparent=trace), "update_order", arguments)

    # then
    assert invocation.outcome is Outcome.OK, invocation.result
    (request,) = service.received
    assert request.method == "PATCH"
    assert request.raw_path == "/items/orders/A%2F7%20b%3Fc/lines"  # one argument, one path segment
    assert request.query == [("region", "eu"), ("fixed", "1"), ("count", "3"), ("tag", "n-é&=")]
    assert request.headers["x-order"] == "order A/7 b?c"
    assert request.headers["x-count"] == "3"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["traceparent"] == trace
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == {
        "count": 3,
        "urgent": False,
        "labels": ["x", "y"],
        "summary": "3 x A/7 b?c",
        "nested": {"order": "A/7 b?c", "fixed": [1, True, None]},
    }


async def test_optional_arguments_left_out_drop_their_parameter_header_and_member(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tool = rest(
        "create_order",
        rest_url + "/items?region={{region}}",
        method="POST",
        query={"count": "{{count}}"},
        headers={"X-Note": "{{note}}"},
        body={"order": "{{order}}", "count": "{{count}}", "labels": ["{{note}}", "fixed"], "text": "note: {{note}}"},
    )
    tools = install(tool)

    # when
    result = await tools.invoke(context("create_order"), "create_order", {"order": "A1"})

    # then
    assert "is_error" not in result
    (request,) = service.received
    assert request.query == []
    assert "x-note" not in request.headers and "authorization" not in request.headers
    assert json.loads(request.body) == {"order": "A1", "labels": [None, "fixed"], "text": "note: "}


async def test_a_get_sends_no_body(install: Install, service: RestService, rest_url: str) -> None:
    # given
    tools = install(rest("get_order", rest_url + "/items/{{order}}"))

    # when
    result = await tools.invoke(context("get_order"), "get_order", {"order": "A1"})

    # then
    assert result["structured_content"]["method"] == "GET"
    (request,) = service.received
    assert request.body == b"" and "content-type" not in request.headers


@pytest.mark.parametrize(
    ("order", "message"),
    [
        pytest.param("..", "'.' or '..'", id="dot_segment_case"),
        pytest.param("", "must be given, not empty", id="empty_segment_case"),
    ],
)
async def test_a_path_argument_that_would_change_the_path_is_refused_before_sending(
    install: Install, service: RestService, rest_url: str, order: str, message: str
) -> None:
    # given
    tools = install(rest("get_order", rest_url + "/items/{{order}}/lines"))

    # when
    invocation = await tools.invoke_call(context("get_order"), "get_order", {"order": order})

    # then
    assert invocation.outcome is Outcome.ERROR
    assert "unknown_outcome" not in invocation.result and message in text_of(invocation.result)
    assert service.received == []


async def test_a_header_argument_with_a_line_break_is_refused_before_sending(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tools = install(rest("get_order", rest_url + "/items/{{order}}", headers={"X-Note": "{{note}}"}))

    # when
    invocation = await tools.invoke_call(
        context("get_order"), "get_order", {"order": "A1", "note": "x\r\nX-Injected: 1"}
    )

    # then
    assert invocation.outcome is Outcome.ERROR and "cannot be sent in a header" in text_of(invocation.result)
    assert service.received == []


# --- results -----------------------------------------------------------------------------------


async def test_a_2xx_json_body_is_structured_content_and_a_json_text_block(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tools = install(rest("get_order", rest_url + "/items/{{order}}"))

    # when
    invocation = await tools.invoke_call(context("get_order"), "get_order", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.OK
    structured = invocation.result["structured_content"]
    assert structured["path"] == "/items/A1"
    assert invocation.result["content"] == [{"type": "text", "text": json.dumps(structured, separators=(",", ":"))}]


async def test_a_2xx_text_body_is_a_text_block(install: Install, service: RestService, rest_url: str) -> None:
    # given
    tools = install(rest("read_text", rest_url + "/text"))

    # when
    result = await tools.invoke(context("read_text"), "read_text", {"order": "A1"})

    # then
    assert result == {"content": [{"type": "text", "text": "plain words ✓"}]}


async def test_a_2xx_without_a_body_says_so(install: Install, service: RestService, rest_url: str) -> None:
    # given
    tools = install(rest("delete_order", rest_url + "/empty", method="DELETE"))

    # when
    result = await tools.invoke(context("delete_order"), "delete_order", {"order": "A1"})

    # then
    assert result == {"content": [{"type": "text", "text": "HTTP 204 with no body"}]}
    assert [request.method for request in service.received] == ["DELETE"]


@pytest.mark.parametrize("status", [400, 404, 409, 429])
async def test_a_4xx_is_an_error_result_with_the_status_and_an_excerpt(
    install: Install, service: RestService, rest_url: str, status: int
) -> None:
    # given
    tools = install(rest("get_order", rest_url + f"/status/{status}"))

    # when
    invocation = await tools.invoke_call(context("get_order"), "get_order", {"order": "A1"})

    # then: the service said no; nothing happened
    assert invocation.outcome is Outcome.ERROR
    assert invocation.result == {
        "content": [{"type": "text", "text": f'HTTP {status}: {{"error":"no such order","code":{status}}}'}],
        "is_error": True,
    }


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_5xx_is_an_unknown_outcome(install: Install, service: RestService, rest_url: str, status: int) -> None:
    # given
    tools = install(rest("create_order", rest_url + f"/status/{status}", method="POST", body={"o": "{{order}}"}))

    # when
    invocation = await tools.invoke_call(context("create_order"), "create_order", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.UNKNOWN
    assert invocation.result["is_error"] is True and invocation.result["unknown_outcome"] is True
    assert f"HTTP {status}" in text_of(invocation.result)
    assert len(service.received) == 1


async def test_invalid_json_in_a_2xx_is_an_unknown_outcome(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tools = install(rest("get_order", rest_url + "/badjson"))

    # when
    invocation = await tools.invoke_call(context("get_order"), "get_order", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.UNKNOWN and "not valid JSON" in text_of(invocation.result)


async def test_a_call_past_timeout_seconds_is_a_timeout(install: Install, service: RestService, rest_url: str) -> None:
    # given
    tools = install(rest("slow", rest_url + "/stall", query={"seconds": "5"}, timeout_seconds=1))

    # when
    invocation = await tools.invoke_call(context("slow"), "slow", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.TIMEOUT
    assert invocation.result["unknown_outcome"] is True and "timed out after 1 s" in text_of(invocation.result)


async def test_response_headers_past_the_header_deadline_are_an_unknown_outcome(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tools = install(rest("slow", rest_url + "/stall", query={"seconds": "5"}), header_timeout=0.3)

    # when
    invocation = await tools.invoke_call(context("slow"), "slow", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.UNKNOWN and "did not arrive within 0.3 s" in text_of(invocation.result)


async def test_a_redirect_is_not_followed(install: Install, service: RestService, rest_url: str) -> None:
    # given
    tools = install(rest("moved", rest_url + "/redirect", method="POST", body={"o": "{{order}}"}))

    # when
    invocation = await tools.invoke_call(context("moved"), "moved", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.UNKNOWN
    assert "HTTP 302 redirect to '/items/moved' not followed" in text_of(invocation.result)
    assert [request.path for request in service.received] == ["/redirect"]


async def test_a_body_past_max_output_bytes_is_cut_with_an_unknown_outcome(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tools = install(rest("big", rest_url + "/big", query={"n": "200000"}, max_output_bytes=1024))

    # when
    invocation = await tools.invoke_call(context("big"), "big", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.UNKNOWN
    assert "exceeds max_output_bytes (1024)" in text_of(invocation.result)


async def test_a_body_at_max_output_bytes_is_accepted(install: Install, service: RestService, rest_url: str) -> None:
    # given: the JSON string of 10 x's is 12 bytes
    tools = install(rest("fit", rest_url + "/big", query={"n": "10"}, max_output_bytes=12))

    # when
    result = await tools.invoke(context("fit"), "fit", {"order": "A1"})

    # then
    assert result["structured_content"] == "x" * 10


async def test_the_http_proxy_from_the_environment_carries_rest_calls(
    install: Install, service: RestService, rest_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the service stands in for a forward proxy; orders.invalid never resolves
    monkeypatch.setenv("HTTP_PROXY", rest_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    tools = install(rest("get_order", "http://orders.invalid/items/{{order}}"))

    # when
    result = await tools.invoke(context("get_order"), "get_order", {"order": "A1"})

    # then
    assert result["structured_content"]["headers"]["host"] == "orders.invalid"
    (request,) = service.received
    assert request.path == "/items/A1"


async def test_a_service_that_refuses_the_connection_was_not_reached(install: Install) -> None:
    # given: nothing listens on the port
    tools = install(rest("get_order", f"http://127.0.0.1:{free_port()}/items/{{{{order}}}}"))

    # when
    invocation = await tools.invoke_call(context("get_order"), "get_order", {"order": "A1"})

    # then
    assert invocation.outcome is Outcome.ERROR
    assert "unknown_outcome" not in invocation.result and "could not reach the service" in text_of(invocation.result)


async def test_arguments_failing_the_input_schema_send_nothing(
    install: Install, service: RestService, rest_url: str
) -> None:
    # given
    tools = install(rest("get_order", rest_url + "/items/{{order}}"))

    # when
    invocation = await tools.invoke_call(context("get_order"), "get_order", {"order": 7})

    # then
    assert invocation.outcome is Outcome.ERROR and "invalid arguments" in text_of(invocation.result)
    assert service.received == []
