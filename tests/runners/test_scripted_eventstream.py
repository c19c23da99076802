"""The scripted provider's AWS event-stream encoder, decoded by botocore's own parsers."""

from __future__ import annotations

import importlib
import io
from collections.abc import Iterator
from typing import Any

import botocore.session
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import EventStreamError
from botocore.parsers import create_parser

# `services/` has no __init__.py, so mypy knows this module as `scripted_provider.eventstream`; a
# static import under the other name would make it check the file twice.
_eventstream = importlib.import_module("services.scripted_provider.eventstream")
encode_event = _eventstream.encode_event
encode_exception = _eventstream.encode_exception


class _RawBody:
    """What botocore streams an HTTP body from (urllib3's `stream()`), over fixed bytes."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def stream(self, amt: int = 1024) -> Iterator[bytes]:
        while chunk := self._data.read(7):  # odd sizes: messages straddle reads
            yield chunk

    def close(self) -> None:
        self._data.close()


def _converse_stream(data: bytes) -> Any:
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    output = model.operation_model("ConverseStream").output_shape
    response = {"status_code": 200, "headers": {}, "body": _RawBody(data), "context": {}}
    return create_parser("rest-json").parse(response, output)["stream"]


def test_botocore_splits_and_checks_the_encoded_messages() -> None:
    # given
    data = encode_event("messageStart", {"role": "assistant"}) + encode_event("messageStop", {"stopReason": "x"})
    buffer = EventStreamBuffer()

    # when
    buffer.add_data(data)
    messages = list(buffer)

    # then
    assert [m.headers for m in messages] == [
        {":event-type": "messageStart", ":content-type": "application/json", ":message-type": "event"},
        {":event-type": "messageStop", ":content-type": "application/json", ":message-type": "event"},
    ]
    assert [m.payload for m in messages] == [b'{"role":"assistant"}', b'{"stopReason":"x"}']


def test_the_converse_stream_parser_yields_typed_events() -> None:
    # given
    data = (
        encode_event("messageStart", {"role": "assistant"})
        + encode_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})
        + encode_event("metadata", {"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, "metrics": {}})
    )

    # when
    events = list(_converse_stream(data))

    # then
    assert events == [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hi"}}},
        {"metadata": {"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, "metrics": {}}},
    ]


def test_an_exception_message_raises_from_the_event_iterator() -> None:
    # given
    data = encode_event("messageStart", {"role": "assistant"}) + encode_exception("modelStreamErrorException", "boom")
    stream = iter(_converse_stream(data))

    # when
    first = next(stream)
    try:
        next(stream)
    except EventStreamError as error:
        raised = error
    else:
        raise AssertionError("no error raised")

    # then
    assert first == {"messageStart": {"role": "assistant"}}
    assert raised.response["Error"] == {"Code": "modelStreamErrorException", "Message": "boom"}


def test_a_corrupted_message_fails_its_checksum() -> None:
    # given
    data = bytearray(encode_event("messageStart", {"role": "assistant"}))
    data[-6] ^= 0xFF
    buffer = EventStreamBuffer()

    # when
    buffer.add_data(bytes(data))
    try:
        list(buffer)
    except Exception as error:
        failure = type(error).__name__
    else:
        failure = ""

    # then
    assert failure == "ChecksumMismatch"
