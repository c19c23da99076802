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
