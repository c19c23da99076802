"""Server-sent events off a raw provider response: line endings, chunk boundaries, event data."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from runners.loop.errors import BrainFailure, ProviderFailure
from runners.loop.providers.sse import decode_event, encode_body, iter_sse


def _events(*chunks: bytes) -> list[tuple[str, bytes]]:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def collect() -> list[tuple[str, bytes]]:
        response = httpx.Response(200, content=body())
        return [event async for event in iter_sse(response)]

    return asyncio.run(collect())


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        pytest.param((b"event: a\ndata: 1\n\n",), [("a", b"1")], id="lf_case"),
        pytest.param((b"event: a\r\ndata: 1\r\n\r\n",), [("a", b"1")], id="crlf_case"),
        pytest.param((b"event: a\rdata: 1\r\r",), [("a", b"1")], id="cr_case"),
        pytest.param((b"data: 1\r", b"\ndata: 2\r\n\r\n"), [("", b"1\n2")], id="crlf_split_across_chunks_case"),
        pytest.param((b"da", b'ta: {"a"', b":1}\n", b"\n"), [("", b'{"a":1}')], id="line_split_across_chunks_case"),
        pytest.param((b": keep-alive\n\ndata: x\n\n",), [("", b"x")], id="comment_case"),
        pytest.param((b"id: 7\nretry: 10\ndata:x\n\n",), [("", b"x")], id="no_space_and_ignored_fields_case"),
        pytest.param((b"\n\ndata: x\n\n",), [("", b"x")], id="blank_lines_alone_case"),
        pytest.param((b"data: x\n\ndata: never dispatched\n",), [("", b"x")], id="unfinished_event_case"),
        pytest.param((b"data: x\r", b"\r"), [("", b"x")], id="ends_on_a_cr_case"),
        pytest.param((b"data: [DONE]\n\n",), [("", b"[DONE]")], id="done_marker_case"),
    ],
)
def test_events_are_split_as_the_sdk_decoders_split_them(
    chunks: tuple[bytes, ...], expected: list[tuple[str, bytes]]
) -> None:
    # when
    events = _events(*chunks)

    # then
    assert events == expected


def test_an_event_is_decoded_as_a_json_object() -> None:
    # when
    event = decode_event("openai", b'{"type":"response.output_text.delta","delta":"h\\u00e9"}')

    # then
    assert event == {"type": "response.output_text.delta", "delta": "hé"}


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"{", id="truncated_case"),
        pytest.param(b"[1]", id="array_case"),
        pytest.param(b"NaN", id="nan_case"),
        pytest.param(b"", id="empty_case"),
    ],
)
def test_a_malformed_event_is_a_provider_failure(data: bytes) -> None:
    # when
    with pytest.raises(ProviderFailure) as caught:
        decode_event("openai", data)

    # then
    assert caught.value.message.startswith("openai: malformed stream event: ")


def test_a_body_is_compact_utf8_json() -> None:
    # when
    body = encode_body({"model": "m", "input": [{"text": "é"}], "n": 2**64})

    # then
    assert body == '{"model":"m","input":[{"text":"é"}],"n":18446744073709551616}'.encode()


def test_a_body_that_is_not_json_is_a_brain_failure() -> None:
    # when
    with pytest.raises(BrainFailure) as caught:
        encode_body({"x": "\ud800"})

    # then
    assert caught.value.message.startswith("request body is not JSON: ")
