"""Faults a real service cannot produce on demand, through an injected httpx MockTransport:
the registry's transports take their HTTP client from whoever builds the registry."""

from __future__ import annotations

import httpx
import pytest

from tests.tools.conftest import Install, binding, context, text_of
from tools_app.transports.http_sse import HttpSseTransport, make_client

URL = "http://127.0.0.1:9/tools/echo"


def transports(handler: httpx.MockTransport) -> dict[str, HttpSseTransport]:
    return {"http": HttpSseTransport(make_client(handler))}


async def test_a_refused_connection_is_an_error_with_unknown_outcome(install: Install) -> None:
    # given: the service's socket refuses (the same outcome as a real refused port, see test_http_outcomes)
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    tools = install(binding("echo", URL), transports=transports(httpx.MockTransport(refuse)))

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "hi"})

    # then
    assert result["is_error"] is True and result.get("unknown_outcome") is True
    assert "ConnectError" in text_of(result)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(b'{"content": [{"type": "text", "text": "ok"}]', "not valid JSON", id="truncated_json_case"),
        pytest.param(b"[1, 2]", "must be a JSON object", id="not_an_object_case"),
    ],
)
async def test_a_broken_reply_after_the_request_was_sent_is_an_unknown_outcome(
    install: Install, body: bytes, expected: str
) -> None:
    # given
    seen: list[bytes] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    tools = install(binding("echo", URL), transports=transports(httpx.MockTransport(reply)))

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "hi"})

    # then: sent exactly once, and the model is told the outcome is unknown
    assert len(seen) == 1
    assert result["is_error"] is True and result.get("unknown_outcome") is True
    assert expected in text_of(result)


async def test_a_read_error_mid_stream_is_an_unknown_outcome(install: Install) -> None:
    # given: headers arrive, then the connection breaks while the body streams
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[override]
            yield b'{"content": '
            raise httpx.ReadError("connection reset")

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Broken(), headers={"content-type": "application/json"})

    tools = install(binding("echo", URL), transports=transports(httpx.MockTransport(reply)))

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "hi"})

    # then
    assert result["is_error"] is True and result.get("unknown_outcome") is True
    assert "ReadError" in text_of(result)


@pytest.mark.parametrize(
    ("format_name", "bad", "good"),
    [
        pytest.param("date-time", "yesterday", "2026-12-01T10:00:00Z", id="date_time_case"),
        pytest.param("date", "2026-13-45", "2026-12-01", id="date_case"),
        pytest.param("time", "25:00", "10:00:00Z", id="time_case"),
        pytest.param("duration", "P", "P3D", id="duration_case"),
        pytest.param("uri", "not a uri", "https://example.com/x", id="uri_case"),
        pytest.param("uri-reference", "\\\\x", "/x?y=1", id="uri_reference_case"),
        pytest.param("iri", "x y", "https://例え.jp/", id="iri_case"),
        pytest.param("uri-template", "{", "/items/{id}", id="uri_template_case"),
        pytest.param("email", "nope", "a@example.com", id="email_case"),
        pytest.param("hostname", "-bad-", "example.com", id="hostname_case"),
        pytest.param("idn-hostname", "-x-", "例え.jp", id="idn_hostname_case"),
        pytest.param("ipv4", "1.2.3", "10.0.0.1", id="ipv4_case"),
        pytest.param("ipv6", "1::2::3", "::1", id="ipv6_case"),
        pytest.param("uuid", "x", "0b5d2a2e-8c1b-4f7e-9d1a-3c2b1a0f9e8d", id="uuid_case"),
        pytest.param("json-pointer", "a", "/a/0", id="json_pointer_case"),
        pytest.param("regex", "(", "^a+$", id="regex_case"),
    ],
)
async def test_every_format_in_a_tool_schema_is_enforced_before_dispatch(
    install: Install, format_name: str, bad: str, good: str
) -> None:
    # given
    sent: list[bytes] = []

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json={"content": [{"type": "text", "text": "ok"}]})

    schema = {"type": "object", "properties": {"value": {"type": "string", "format": format_name}}}
    tools = install(binding("echo", URL, input_schema=schema), transports=transports(httpx.MockTransport(reply)))

    # when
    refused = await tools.invoke(context("echo"), "echo", {"value": bad})
    accepted = await tools.invoke(context("echo"), "echo", {"value": good})

    # then: the bad value never left Brain; the good one did, once
    assert refused["is_error"] is True and "invalid arguments" in text_of(refused)
    assert "is_error" not in accepted
    assert len(sent) == 1
