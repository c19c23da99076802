"""events.jsonl: envelopes, cursors, SSE frames, appends, reads and repair (reference-events)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import CursorUnavailable
from sessions_app.eventlog import (
    LIVE_ONLY,
    MAX_CURSOR_BYTES,
    MAX_RECORD_BYTES,
    RECOVERY_TYPES,
    CorruptLog,
    Event,
    EventLog,
    RecordTooLarge,
    ScannedEvent,
    decode_cursor,
    encode_cursor,
    new_id,
    now_rfc3339,
)

SPEC_CURSOR = "eyJvIjoxMjgsImkiOiI4ZjE0ZTQ1ZmNlZWExNjdhNWEzNmRlZGQ0YmVhMjU0MyJ9"
SPEC_ID = "8f14e45fceea167a5a36dedd4bea2543"
INPUT_ID = "c9f0f895fb98ab9159f51fd0297e236d"
OTHER_ID = "45c48cce2e2d7fbdea1afc51c7c6ad26"


def _event(type_: str, data: Any, *, event_id: str, input_id: str = "") -> Event:
    """An event with a fixed id and time, so lines and offsets are exact."""
    envelope: dict[str, Any] = {"id": event_id, "type": type_, "time": "2026-10-15T12:00:00Z"}
    if input_id:
        envelope["input_id"] = input_id
    envelope["data"] = data
    return Event(event_id, type_, json.dumps(envelope, separators=(",", ":")).encode())


def _raw_cursor(payload: bytes) -> str:
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


def _log_with(tmp_path: Path, count: int) -> tuple[EventLog, list[Event]]:
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    events = [
        log.append(_event("user.message", {"text": f"m{index}"}, event_id=f"{index:032x}")) for index in range(count)
    ]
    return log, events


# --- ids, times, envelopes ------------------------------------------------------------------


def test_new_ids_are_32_lowercase_hex_characters() -> None:
    # when
    ids = {new_id() for _ in range(50)}

    # then
    assert len(ids) == 50
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)


def test_times_are_utc_rfc3339() -> None:
    # when
    value = now_rfc3339()

    # then
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", value)


def test_build_orders_the_envelope_keys_as_the_spec_does() -> None:
    # when
    event = Event.build("assistant.message", {"text": "hi"}, input_id=INPUT_ID)

    # then
    envelope = json.loads(event.line)
    assert list(envelope) == ["id", "type", "time", "input_id", "data"]
    assert envelope["id"] == event.id
    assert envelope["type"] == "assistant.message" == event.type
    assert envelope["input_id"] == INPUT_ID
    assert envelope["data"] == {"text": "hi"}
    assert event.offset == -1
    assert event.retained is False


@pytest.mark.parametrize(
    "input_id",
    [pytest.param(None, id="none_case"), pytest.param("", id="empty_case")],
)
def test_build_omits_input_id_when_there_is_none(input_id: str | None) -> None:
    # when
    event = Event.build("user.message", {"text": "hi"}, input_id=input_id)

    # then
    assert list(json.loads(event.line)) == ["id", "type", "time", "data"]


def test_the_wire_form_of_a_live_event_has_no_cursor() -> None:
    # given
    event = _event("assistant.delta", {"text": "He"}, event_id=OTHER_ID, input_id=INPUT_ID)

    # when
    wire = event.wire()

    # then
    assert wire == event.line
    assert event.cursor == ""
    assert "cursor" not in event.as_dict()


def test_the_wire_form_of_a_retained_event_ends_with_its_cursor() -> None:
    # given
    event = _event("assistant.message", {"text": "Hello"}, event_id=SPEC_ID, input_id=INPUT_ID)
    event.offset = 128

    # when
    envelope = json.loads(event.wire())

    # then
    assert list(envelope) == ["id", "type", "time", "input_id", "data", "cursor"]
    assert envelope["cursor"] == SPEC_CURSOR
    assert event.as_dict() == envelope
    assert event.retained is True


def test_a_retained_sse_frame_matches_the_spec_example() -> None:
    # given the spec's assistant.message frame
    event = _event("assistant.message", {"text": "Hello"}, event_id=SPEC_ID, input_id=INPUT_ID)
    event.offset = 128

    # when
    frame = event.sse_frame()

    # then
    assert frame == (
        b"id: " + SPEC_CURSOR.encode() + b"\n"
        b"event: assistant.message\n"
        b'data: {"id":"8f14e45fceea167a5a36dedd4bea2543","type":"assistant.message","time":"2026-10-15T12:00:00Z",'
        b'"input_id":"c9f0f895fb98ab9159f51fd0297e236d","data":{"text":"Hello"},"cursor":"'
        + SPEC_CURSOR.encode()
        + b'"}'
        b"\n\n"
    )


def test_a_live_only_sse_frame_has_no_id_line() -> None:
    # given the spec's assistant.delta frame
    event = _event("assistant.delta", {"text": "Hello"}, event_id=OTHER_ID, input_id=INPUT_ID)

    # when
    frame = event.sse_frame()

    # then
    assert frame == (
        b"event: assistant.delta\n"
        b'data: {"id":"45c48cce2e2d7fbdea1afc51c7c6ad26","type":"assistant.delta","time":"2026-10-15T12:00:00Z",'
        b'"input_id":"c9f0f895fb98ab9159f51fd0297e236d","data":{"text":"Hello"}}'
        b"\n\n"
    )


def test_the_live_only_types_are_delta_and_progress() -> None:
    # then
    assert frozenset({"assistant.delta", "tool.progress"}) == LIVE_ONLY


# --- cursors --------------------------------------------------------------------------------


def test_the_spec_example_cursor_decodes_to_offset_and_id() -> None:
    # when
    decoded = decode_cursor(SPEC_CURSOR)

    # then
    assert decoded == (128, SPEC_ID)


@pytest.mark.parametrize(
    ("offset", "event_id", "cursor"),
    [
        pytest.param(128, SPEC_ID, SPEC_CURSOR, id="spec_assistant_message_case"),
        pytest.param(
            0, INPUT_ID, "eyJvIjowLCJpIjoiYzlmMGY4OTVmYjk4YWI5MTU5ZjUxZmQwMjk3ZTIzNmQifQ", id="spec_first_case"
        ),
    ],
)
def test_encoding_reproduces_the_spec_cursors(offset: int, event_id: str, cursor: str) -> None:
    # when
    encoded = encode_cursor(offset, event_id)

    # then
    assert encoded == cursor


@pytest.mark.parametrize(
    "offset",
    [pytest.param(0, id="zero_case"), pytest.param(1, id="one_case"), pytest.param(1 << 40, id="terabyte_case")],
)
def test_cursors_round_trip(offset: int) -> None:
    # given
    event_id = new_id()

    # when
    decoded = decode_cursor(encode_cursor(offset, event_id))

    # then
    assert decoded == (offset, event_id)


MALFORMED_CURSORS = [
    pytest.param("!!!!", id="bad_base64_case"),
    pytest.param("eyJv", id="truncated_case"),
    pytest.param(_raw_cursor(b"not json"), id="not_json_case"),
    pytest.param(_raw_cursor(b"\xff\xfe"), id="not_utf8_case"),
    pytest.param(_raw_cursor(b'["o","i"]'), id="json_array_case"),
    pytest.param(_raw_cursor(b'{"o":1}'), id="missing_id_case"),
    pytest.param(_raw_cursor(b'{"i":"%s"}' % SPEC_ID.encode()), id="missing_offset_case"),
    pytest.param(_raw_cursor(b'{"o":1,"i":"%s","x":1}' % SPEC_ID.encode()), id="extra_key_case"),
    pytest.param(_raw_cursor(b'{"o":-1,"i":"%s"}' % SPEC_ID.encode()), id="negative_offset_case"),
    pytest.param(_raw_cursor(b'{"o":1.0,"i":"%s"}' % SPEC_ID.encode()), id="float_offset_case"),
    pytest.param(_raw_cursor(b'{"o":true,"i":"%s"}' % SPEC_ID.encode()), id="boolean_offset_case"),
    pytest.param(_raw_cursor(b'{"o":"1","i":"%s"}' % SPEC_ID.encode()), id="string_offset_case"),
    pytest.param(_raw_cursor(b'{"o":1,"i":"xyz"}'), id="non_hex_id_case"),
    pytest.param(_raw_cursor(b'{"o":1,"i":"%s"}' % SPEC_ID.upper().encode()), id="uppercase_id_case"),
    pytest.param(_raw_cursor(b'{"o":1,"i":"%s\\n"}' % SPEC_ID.encode()), id="id_trailing_newline_case"),
    pytest.param(_raw_cursor(b'{"o":1,"i":1}'), id="numeric_id_case"),
    pytest.param(SPEC_ID, id="event_id_instead_of_cursor_case"),
    pytest.param(SPEC_CURSOR + "==", id="padded_case"),
    pytest.param(SPEC_CURSOR + "!", id="trailing_junk_case"),
    pytest.param(SPEC_CURSOR[:10] + "." + SPEC_CURSOR[10:], id="embedded_junk_case"),
    pytest.param(_raw_cursor(b'{"i":"%s","o":128}' % SPEC_ID.encode()), id="reordered_keys_case"),
    pytest.param(_raw_cursor(b'{"o": 128, "i": "%s"}' % SPEC_ID.encode()), id="spaced_json_case"),
    pytest.param("é" * 8, id="non_ascii_case"),
    pytest.param("A" * (MAX_CURSOR_BYTES + 1), id="over_512_bytes_case"),
]


@pytest.mark.parametrize("cursor", MALFORMED_CURSORS)
def test_malformed_cursors_are_unavailable(cursor: str) -> None:
    # when
    with pytest.raises(CursorUnavailable) as caught:
        decode_cursor(cursor)

    # then
    assert (caught.value.code, caught.value.status) == ("cursor_unavailable", 409)


def test_an_over_long_cursor_is_rejected_before_decoding() -> None:
    # given a well-formed cursor padded past 512 bytes
    cursor = encode_cursor(10**400, SPEC_ID)

    # when
    with pytest.raises(CursorUnavailable) as caught:
        decode_cursor(cursor)

    # then
    assert len(cursor) > MAX_CURSOR_BYTES
    assert caught.value.message == "cursor exceeds 512 bytes"


# --- appending ------------------------------------------------------------------------------


def test_appends_stamp_byte_offsets_and_write_one_line_each(tmp_path: Path) -> None:
    # given
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    first = _event("user.message", {"text": "a"}, event_id=INPUT_ID)
    second = _event("session.status", {"status": "running"}, event_id=SPEC_ID, input_id=INPUT_ID)

    # when
    log.append(first)
    log.append(second)
    log.close()

    # then
    assert first.offset == 0
    assert second.offset == len(first.line) + 1
    assert log.size == len(first.line) + len(second.line) + 2
    assert (tmp_path / "events.jsonl").read_bytes() == first.line + b"\n" + second.line + b"\n"


def test_a_reopened_log_continues_at_the_end_of_the_file(tmp_path: Path) -> None:
    # given
    log, events = _log_with(tmp_path, 2)
    log.close()

    # when
    reopened = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    third = reopened.append(_event("user.message", {"text": "m2"}, event_id=OTHER_ID))

    # then
    assert third.offset == log.size
    assert [event.id for event in reopened.read(0)] == [events[0].id, events[1].id, OTHER_ID]


def test_a_record_at_the_4_mib_cap_is_written(tmp_path: Path) -> None:
    # given a line that with its newline is exactly 4 MiB
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    overhead = len(_event("assistant.message", {"text": ""}, event_id=SPEC_ID).line) + 1
    event = _event("assistant.message", {"text": "x" * (MAX_RECORD_BYTES - overhead)}, event_id=SPEC_ID)

    # when
    log.append(event)

    # then
    assert log.size == MAX_RECORD_BYTES == 4 * 1024 * 1024
    assert event.offset == 0


def test_a_record_over_the_4_mib_cap_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    # given a log with one event and a line one byte over the cap
    log, _ = _log_with(tmp_path, 1)
    before = (tmp_path / "events.jsonl").read_bytes()
    overhead = len(_event("assistant.message", {"text": ""}, event_id=SPEC_ID).line) + 1
    event = _event("assistant.message", {"text": "x" * (MAX_RECORD_BYTES - overhead + 1)}, event_id=SPEC_ID)

    # when
    with pytest.raises(RecordTooLarge):
        log.append(event)

    # then
    assert (tmp_path / "events.jsonl").read_bytes() == before
    assert log.size == len(before)
    assert event.offset == -1


def test_a_refused_first_record_does_not_create_the_file(tmp_path: Path) -> None:
    # given
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    with pytest.raises(RecordTooLarge):
        log.append(_event("assistant.message", {"text": "x" * MAX_RECORD_BYTES}, event_id=SPEC_ID))

    # then
    assert not (tmp_path / "events.jsonl").exists()
    assert log.size == 0


# --- reading --------------------------------------------------------------------------------


def test_read_returns_every_event_with_its_offset(tmp_path: Path) -> None:
    # given
    log, events = _log_with(tmp_path, 3)

    # when
    read = log.read(0)

    # then
    assert [(event.id, event.type, event.offset, event.line) for event in read] == [
        (event.id, event.type, event.offset, event.line) for event in events
    ]


@pytest.mark.parametrize(
    ("start_index", "end_index", "limit", "expected"),
    [
        pytest.param(1, None, None, [1, 2, 3, 4], id="from_second_case"),
        pytest.param(0, 2, None, [0, 1], id="end_before_third_case"),
        pytest.param(0, None, 2, [0, 1], id="limit_case"),
        pytest.param(2, 4, 5, [2, 3], id="end_before_limit_case"),
        pytest.param(1, None, 1, [1], id="limit_one_case"),
        pytest.param(3, 3, None, [], id="empty_range_case"),
    ],
)
def test_read_honours_start_end_and_limit(
    tmp_path: Path, start_index: int, end_index: int | None, limit: int | None, expected: list[int]
) -> None:
    # given
    log, events = _log_with(tmp_path, 5)
    start = events[start_index].offset
    end = None if end_index is None else events[end_index].offset

    # when
    read = log.read(start, end=end, limit=limit)

    # then
    assert [event.id for event in read] == [events[index].id for index in expected]


def test_read_at_the_end_of_the_log_is_empty(tmp_path: Path) -> None:
    # given
    log, _ = _log_with(tmp_path, 2)

    # when
    read = log.read(log.size)

    # then
    assert read == []


def test_read_of_an_empty_log_is_empty(tmp_path: Path) -> None:
    # given
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    read = log.read(0)

    # then
    assert read == []


def test_read_events_carry_cursors_that_resume_after_them(tmp_path: Path) -> None:
    # given
    log, events = _log_with(tmp_path, 3)
    cursor = log.read(0)[0].cursor

    # when
    position = log.position_after(cursor)

    # then
    assert cursor == encode_cursor(0, events[0].id)
    assert position == events[1].offset
    assert [event.id for event in log.read(position)] == [events[1].id, events[2].id]


def test_position_after_the_last_event_is_the_end_of_the_log(tmp_path: Path) -> None:
    # given
    log, events = _log_with(tmp_path, 3)

    # when
    position = log.position_after(events[2].cursor)

    # then
    assert position == log.size


def test_position_after_an_empty_cursor_is_the_start(tmp_path: Path) -> None:
    # given
    log, _ = _log_with(tmp_path, 2)

    # when
    position = log.position_after("")

    # then
    assert position == 0


def _cursor_not_at_a_line_start(events: list[Event]) -> str:
    return encode_cursor(events[1].offset + 1, events[1].id)


def _cursor_with_another_id(events: list[Event]) -> str:
    return encode_cursor(events[1].offset, events[2].id)


def _cursor_beyond_the_end(events: list[Event]) -> str:
    return encode_cursor(events[2].offset + 10_000, events[2].id)


def _cursor_at_the_end(events: list[Event]) -> str:
    return encode_cursor(events[2].offset + len(events[2].line) + 1, events[2].id)


def _cursor_inside_a_line_naming_its_id(events: list[Event]) -> str:
    return encode_cursor(events[1].offset + len(b'{"id":"'), events[1].id)


@pytest.mark.parametrize(
    "make_cursor",
    [
        pytest.param(_cursor_not_at_a_line_start, id="offset_not_at_line_start_case"),
        pytest.param(_cursor_with_another_id, id="id_does_not_match_case"),
        pytest.param(_cursor_beyond_the_end, id="offset_beyond_end_case"),
        pytest.param(_cursor_at_the_end, id="offset_at_end_case"),
        pytest.param(_cursor_inside_a_line_naming_its_id, id="offset_inside_line_case"),
    ],
)
def test_position_after_rejects_cursors_that_name_no_event(tmp_path: Path, make_cursor: Any) -> None:
    # given
    log, events = _log_with(tmp_path, 3)

    # when
    with pytest.raises(CursorUnavailable) as caught:
        log.position_after(make_cursor(events))

    # then
    assert caught.value.message == "cursor is not in this session's retained history"


def test_position_after_rejects_a_cursor_whose_id_appears_mid_line(tmp_path: Path) -> None:
    # given a tool.call, whose data object also starts with an "id" key
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    forged_id = "0" * 32
    host = log.append(_event("tool.call", {"id": forged_id, "name": "echo", "arguments": {}}, event_id=INPUT_ID))
    forged_offset = host.line.index(b'{"id":"' + forged_id.encode())

    # when
    with pytest.raises(CursorUnavailable):
        log.position_after(encode_cursor(forged_offset, forged_id))

    # then
    assert forged_offset > 0


def test_position_after_a_malformed_cursor_is_unavailable(tmp_path: Path) -> None:
    # given
    log, events = _log_with(tmp_path, 1)

    # when
    with pytest.raises(CursorUnavailable):
        log.position_after(events[0].id)

    # then
    assert log.size == len(events[0].line) + 1


# --- repair -----------------------------------------------------------------------------------


def test_repair_trims_a_torn_last_line(tmp_path: Path) -> None:
    # given two whole lines and half of a third, as after a crash mid-write
    log, events = _log_with(tmp_path, 2)
    log.close()
    whole = (tmp_path / "events.jsonl").read_bytes()
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(b'{"id":"' + OTHER_ID.encode() + b'","type":"assis')
    reopened = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    reopened.repair()

    # then
    assert (tmp_path / "events.jsonl").read_bytes() == whole
    assert reopened.size == len(whole)
    assert [event.id for event in reopened.read(0)] == [events[0].id, events[1].id]


def test_repair_trims_a_file_that_is_one_torn_line(tmp_path: Path) -> None:
    # given
    (tmp_path / "events.jsonl").write_bytes(b'{"id":"' + OTHER_ID.encode())
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    log.repair()

    # then
    assert (tmp_path / "events.jsonl").read_bytes() == b""
    assert log.size == 0


def test_repair_trims_a_torn_line_longer_than_one_read_chunk(tmp_path: Path) -> None:
    # given a whole line followed by 600 KiB without a newline
    log, events = _log_with(tmp_path, 1)
    log.close()
    whole = (tmp_path / "events.jsonl").read_bytes()
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(b"x" * (600 * 1024))
    reopened = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    reopened.repair()

    # then
    assert reopened.size == len(whole) == (tmp_path / "events.jsonl").stat().st_size
    assert [event.id for event in reopened.read(0)] == [events[0].id]


def test_repair_leaves_a_whole_log_untouched(tmp_path: Path) -> None:
    # given
    log, _ = _log_with(tmp_path, 3)
    before = (tmp_path / "events.jsonl").read_bytes()

    # when
    log.repair()

    # then
    assert (tmp_path / "events.jsonl").read_bytes() == before
    assert log.size == len(before)


def test_repair_of_a_missing_log_does_nothing(tmp_path: Path) -> None:
    # given
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    log.repair()

    # then
    assert not (tmp_path / "events.jsonl").exists()
    assert log.size == 0


def test_appends_after_repair_start_on_a_fresh_line(tmp_path: Path) -> None:
    # given
    log, events = _log_with(tmp_path, 1)
    log.close()
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(b'{"id":"torn')
    reopened = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    reopened.repair()

    # when
    appended = reopened.append(_event("user.message", {"text": "after"}, event_id=OTHER_ID))

    # then
    assert appended.offset == len(events[0].line) + 1
    assert [event.id for event in reopened.read(0)] == [events[0].id, OTHER_ID]


def test_append_refuses_turn_events_past_session_bytes_but_keeps_status_writable(tmp_path: Path) -> None:
    # given
    log = EventLog(tmp_path / "events.jsonl", max_bytes=300)
    log.append(Event.build("user.message", {"text": "x" * 100}))
    size = log.size
    # when
    with pytest.raises(RecordTooLarge):
        log.append(Event.build("assistant.message", {"text": "y" * 100}))
    status = log.append(Event.build("session.status", {"status": "failed"}))
    # then
    assert status.offset == size
    assert [event.type for event in log.read(0)] == ["user.message", "session.status"]


# --- the recovery scan ----------------------------------------------------------------------


def _turn(log: EventLog, *, text: str = "hi", key: str = "") -> list[Event]:
    """One turn as the runtime writes it, with every retained event type."""
    message: dict[str, Any] = {"type": "user.message", "text": text, "delivery": "queue"}
    if key:
        message["key"] = key
    user = log.append(Event.build("user.message", message))
    events = [
        user,
        Event.build("session.status", {"status": "running"}, input_id=user.id),
        Event.build("tool.call", {"id": new_id(), "name": "echo", "arguments": {"value": "x"}}, input_id=user.id),
        Event.build("tool.result", {"call_id": new_id(), "result": {"content": []}}, input_id=user.id),
        Event.build("assistant.message", {"text": "y" * 3000, "stop_reason": "stop"}, input_id=user.id),
        Event.build("session.error", {"code": "provider_error", "message": "x"}, input_id=user.id),
        Event.build("session.status", {"status": "interrupted"}, input_id=user.id),
    ]
    for event in events[1:]:
        log.append(event)
    return events


def _scanned(event: Event) -> ScannedEvent:
    envelope = json.loads(event.line)
    return ScannedEvent(
        offset=event.offset,
        id=envelope["id"],
        type=envelope["type"],
        input_id=envelope.get("input_id", ""),
        data=envelope["data"],
    )


def test_the_recovery_types_are_message_change_status_and_error() -> None:
    # then
    assert frozenset({"user.message", "session.configure", "session.status", "session.error"}) == RECOVERY_TYPES


def test_the_recovery_scan_keeps_only_messages_changes_statuses_and_errors(tmp_path: Path) -> None:
    # given two turns with every retained event type
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    events = _turn(log, key="k-1") + _turn(log)

    # when
    scanned = list(log.scan_for_recovery())

    # then
    assert scanned == [_scanned(event) for event in events if event.type in RECOVERY_TYPES]
    assert [event.type for event in scanned] == [
        *("user.message", "session.status", "session.error", "session.status"),
        *("user.message", "session.status", "session.error", "session.status"),
    ]


@pytest.mark.parametrize(
    "chunk_size",
    [
        pytest.param(1, id="one_byte_case"),
        pytest.param(7, id="smaller_than_the_prefix_case"),
        pytest.param(64, id="smaller_than_a_line_case"),
        pytest.param(5000, id="a_few_lines_case"),
        pytest.param(1 << 20, id="whole_log_case"),
    ],
)
def test_the_recovery_scan_reads_lines_longer_than_its_chunk(tmp_path: Path, chunk_size: int) -> None:
    # given lines of 3 KiB and more
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    events = _turn(log, text="z" * 4000, key="k") + _turn(log)

    # when
    scanned = list(log.scan_for_recovery(chunk_size=chunk_size))

    # then
    assert scanned == [_scanned(event) for event in events if event.type in RECOVERY_TYPES]


def test_the_recovery_scan_reads_a_record_at_the_4_mib_cap(tmp_path: Path) -> None:
    # given a user.message of almost 4 MiB between two small events
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    first = log.append(Event.build("session.status", {"status": "idle"}))
    big = log.append(Event.build("user.message", {"text": "b" * (MAX_RECORD_BYTES - 200)}))
    last = log.append(Event.build("session.status", {"status": "running"}, input_id=big.id))

    # when
    scanned = list(log.scan_for_recovery(chunk_size=1 << 20))

    # then
    assert scanned == [_scanned(first), _scanned(big), _scanned(last)]


@pytest.mark.parametrize(
    "torn",
    [
        pytest.param(b'{"id":"' + b"d" * 32 + b'","type":"user.message","ti', id="recovery_type_case"),
        pytest.param(b'{"id":"' + b"d" * 32 + b'","type":"assistant.message","time":"t"', id="skipped_type_case"),
        pytest.param(b'{"id":"tor', id="short_case"),
    ],
)
def test_the_recovery_scan_stops_before_a_torn_tail(tmp_path: Path, torn: bytes) -> None:
    # given a crash mid-append, not yet repaired
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    events = _turn(log)
    log.close()
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(torn)
    reopened = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    scanned = list(reopened.scan_for_recovery(chunk_size=16))

    # then
    assert scanned == [_scanned(event) for event in events if event.type in RECOVERY_TYPES]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        pytest.param(b"garbage", "is not JSON", id="not_json_case"),
        pytest.param(b"", "is not JSON", id="empty_line_case"),
        pytest.param(
            b'{"id":"' + b"e" * 32 + b'","type":"session.status","time":"t","data":{"stat',
            "is not JSON",
            id="cut_recovery_type_case",
        ),
        pytest.param(b"[1,2]", "is not an event envelope", id="array_case"),
        pytest.param(b'{"id":7,"type":"user.message"}', "is not an event envelope", id="numeric_id_case"),
        pytest.param(b'{"id":"x","data":{}}', "is not an event envelope", id="no_type_case"),
    ],
)
@pytest.mark.parametrize(
    "chunk_size",
    [pytest.param(1, id="one_byte_chunk"), pytest.param(100, id="small_chunk"), pytest.param(1 << 20, id="big_chunk")],
)
def test_the_recovery_scan_names_the_offset_of_a_corrupt_line(
    tmp_path: Path, line: bytes, problem: str, chunk_size: int
) -> None:
    # given a whole line that is not an envelope between two turns
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    _turn(log)
    log.close()
    offset = (tmp_path / "events.jsonl").stat().st_size
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(line + b"\n")
    reopened = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    _turn(reopened)

    # when
    with pytest.raises(CorruptLog) as caught:
        list(reopened.scan_for_recovery(chunk_size=chunk_size))

    # then
    assert caught.value.offset == offset
    assert str(caught.value).startswith(f"{tmp_path / 'events.jsonl'}: line at byte {offset} {problem}")


def test_the_recovery_scan_does_not_decode_lines_of_other_types(tmp_path: Path) -> None:
    # given an assistant.message line in Event.build's layout whose body is not JSON
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)
    first = log.append(Event.build("session.status", {"status": "idle"}))
    log.close()
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(b'{"id":"' + b"f" * 32 + b'","type":"assistant.message","time":not json}\n')

    # when
    scanned = list(EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30).scan_for_recovery())

    # then
    assert scanned == [_scanned(first)]


def test_the_recovery_scan_decodes_a_line_in_another_layout_in_full(tmp_path: Path) -> None:
    # given lines whose keys are in another order, with and without spaces
    lines = [
        b'{"type":"user.message","id":"' + b"1" * 32 + b'","time":"t","data":{"text":"a","key":"k"}}',
        b'{"type": "assistant.message", "id": "' + b"2" * 32 + b'", "data": {"text": "b"}}',
        b'{"id": "' + b"3" * 32 + b'", "type": "session.error", "input_id": "' + b"1" * 32 + b'", "data": []}',
    ]
    (tmp_path / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    log = EventLog(tmp_path / "events.jsonl", max_bytes=1 << 30)

    # when
    scanned = list(log.scan_for_recovery())

    # then
    assert scanned == [
        ScannedEvent(offset=0, id="1" * 32, type="user.message", input_id="", data={"text": "a", "key": "k"}),
        ScannedEvent(
            offset=len(lines[0]) + len(lines[1]) + 2, id="3" * 32, type="session.error", input_id="1" * 32, data={}
        ),
    ]


def test_the_recovery_scan_of_an_empty_or_missing_log_is_empty(tmp_path: Path) -> None:
    # given
    missing = EventLog(tmp_path / "missing.jsonl", max_bytes=1 << 30)
    (tmp_path / "empty.jsonl").touch()
    empty = EventLog(tmp_path / "empty.jsonl", max_bytes=1 << 30)

    # when
    scanned = [list(missing.scan_for_recovery()), list(empty.scan_for_recovery())]

    # then
    assert scanned == [[], []]
