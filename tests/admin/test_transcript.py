"""The transcript an operator reads: pages of events.jsonl, newest last, bounded per record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from foundation.errors import CursorUnavailable
from sessions_app import transcript
from sessions_app.eventlog import Event, EventLog, encode_cursor
from sessions_app.transcript import measure_session, read_transcript


def write_log(path: Path, events: list[tuple[str, Any]]) -> list[Event]:
    log = EventLog(path, max_bytes=1 << 30)
    written = [
        log.append(Event.build(type_, data, input_id="a" * 32 if type_ != "user.message" else None))
        for type_, data in events
    ]
    log.close()
    return written


def messages(count: int) -> list[tuple[str, Any]]:
    return [
        ("user.message", {"type": "user.message", "text": f"message {n}", "delivery": "queue"}) for n in range(count)
    ]


def test_the_first_page_is_the_newest_events_oldest_first(tmp_path: Path) -> None:
    # given
    events = write_log(tmp_path / "events.jsonl", messages(7))

    # when
    page = read_transcript(tmp_path / "events.jsonl", limit=3)

    # then
    assert [entry.text for entry in page.entries] == ["message 4", "message 5", "message 6"]
    assert [entry.cursor for entry in page.entries] == [event.cursor for event in events[4:]]
    assert page.older == events[4].cursor
    assert page.newer == ""
    assert page.log_bytes == (tmp_path / "events.jsonl").stat().st_size


def test_older_pages_walk_back_to_the_start_of_the_log(tmp_path: Path) -> None:
    # given
    write_log(tmp_path / "events.jsonl", messages(7))
    newest = read_transcript(tmp_path / "events.jsonl", limit=3)

    # when
    middle = read_transcript(tmp_path / "events.jsonl", before=newest.older, limit=3)
    first = read_transcript(tmp_path / "events.jsonl", before=middle.older, limit=3)

    # then
    assert [entry.text for entry in middle.entries] == ["message 1", "message 2", "message 3"]
    assert [entry.text for entry in first.entries] == ["message 0"]
    assert first.older == ""
    assert first.newer == first.entries[0].cursor
    assert middle.newer == middle.entries[-1].cursor


def test_newer_pages_read_forward_after_a_cursor(tmp_path: Path) -> None:
    # given
    events = write_log(tmp_path / "events.jsonl", messages(7))

    # when
    page = read_transcript(tmp_path / "events.jsonl", after=events[1].cursor, limit=3)
    last = read_transcript(tmp_path / "events.jsonl", after=page.newer, limit=3)

    # then
    assert [entry.text for entry in page.entries] == ["message 2", "message 3", "message 4"]
    assert page.older == events[2].cursor
    assert [entry.text for entry in last.entries] == ["message 5", "message 6"]
    assert last.newer == ""


def test_a_cursor_at_the_end_reads_the_newest_page(tmp_path: Path) -> None:
    # given
    events = write_log(tmp_path / "events.jsonl", messages(4))

    # when
    page = read_transcript(tmp_path / "events.jsonl", after=events[-1].cursor, limit=2)

    # then
    assert [entry.text for entry in page.entries] == ["message 2", "message 3"]


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param("not-a-cursor", id="malformed_case"),
        pytest.param(encode_cursor(5, "b" * 32), id="not_an_event_start_case"),
        pytest.param(encode_cursor(10_000, "b" * 32), id="past_the_end_case"),
    ],
)
@pytest.mark.parametrize("direction", ["before", "after"])
def test_a_cursor_that_names_no_event_of_the_log_is_refused(tmp_path: Path, cursor: str, direction: str) -> None:
    # given
    write_log(tmp_path / "events.jsonl", messages(3))

    # when / then
    with pytest.raises(CursorUnavailable):
        read_transcript(
            tmp_path / "events.jsonl",
            before=cursor if direction == "before" else "",
            after=cursor if direction == "after" else "",
        )


def test_a_missing_log_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_transcript(tmp_path / "events.jsonl")


def test_an_empty_log_has_an_empty_page(tmp_path: Path) -> None:
    # given
    (tmp_path / "events.jsonl").touch()

    # when
    page = read_transcript(tmp_path / "events.jsonl")

    # then
    assert page.entries == [] and page.older == "" and page.newer == "" and page.log_bytes == 0


def test_a_torn_last_line_is_not_read(tmp_path: Path) -> None:
    # given: a crash in the middle of an append
    write_log(tmp_path / "events.jsonl", messages(2))
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(b'{"id":"' + b"c" * 32 + b'","type":"user.mess')

    # when
    page = read_transcript(tmp_path / "events.jsonl")

    # then
    assert [entry.text for entry in page.entries] == ["message 0", "message 1"]
    assert page.newer == ""


def test_each_kind_of_event_is_told_apart(tmp_path: Path) -> None:
    # given
    write_log(
        tmp_path / "events.jsonl",
        [
            ("user.message", {"type": "user.message", "text": "look it up", "delivery": "queue", "key": "k1"}),
            ("session.status", {"status": "running"}),
            ("tool.call", {"id": "tc1", "name": "lookup", "arguments": {"q": "brain"}}),
            (
                "tool.result",
                {"call_id": "tc1", "result": {"content": [{"type": "text", "text": "found"}]}, "outcome": "ok"},
            ),
            (
                "tool.result",
                {"call_id": "tc2", "result": {"content": [{"type": "text", "text": "boom"}], "is_error": True}},
            ),
            ("assistant.message", {"text": "Here it is.", "usage": {"input": 3, "output": 4}, "stop_reason": "stop"}),
            ("session.error", {"code": "provider_error", "message": "upstream rate limit exceeded"}),
            ("session.custom", {"anything": [1, 2]}),
        ],
    )

    # when
    entries = read_transcript(tmp_path / "events.jsonl").entries

    # then
    assert [(e.role, e.label, e.text, e.details, e.is_error) for e in entries] == [
        ("user", "User", "look it up", "key k1", False),
        ("status", "Status", "running", "", False),
        ("tool-call", "Tool call", 'lookup({"q":"brain"})', "call tc1", False),
        ("tool-result", "Tool result", "found", "call tc1 · outcome ok", False),
        ("tool-result", "Tool result", "boom", "call tc2 · error yes", True),
        ("assistant", "Assistant", "Here it is.", "stop reason stop · usage input 3, output 4", False),
        ("error", "Error", "upstream rate limit exceeded", "code provider_error", True),
        ("other", "session.custom", '{"anything":[1,2]}', "", False),
    ]
    assert entries[2].input_id == "a" * 32 and entries[0].input_id == ""


def test_a_steer_a_configuration_change_and_a_tool_event_read_as_what_they_are(tmp_path: Path) -> None:
    # given
    write_log(
        tmp_path / "events.jsonl",
        [
            ("user.message", {"type": "user.message", "text": "in French", "delivery": "steer"}),
            ("session.configure", {"tools": [], "instructions": "Be brief.", "model": "openai/gpt-4.1"}),
            ("session.configure", {"reasoning_effort": "high", "tools": ["lookup", "echo"], "key": "k1"}),
            ("tool.event", {"call_id": "tc1", "environment": "env", "kind": "step.done", "data": {"n": 2}}),
            ("tool.event", {"call_id": "tc1", "environment": "env", "kind": "note", "data": "half way"}),
        ],
    )

    # when
    entries = read_transcript(tmp_path / "events.jsonl").entries

    # then
    assert [(e.role, e.label, e.text, e.details, e.is_error) for e in entries] == [
        ("user", "User (steer)", "in French", "", False),
        (
            "config",
            "Configuration changed",
            'model → openai/gpt-4.1 · tools → none · instructions → "Be brief."',
            "",
            False,
        ),
        ("config", "Configuration changed", "reasoning effort → high · tools → lookup, echo", "key k1", False),
        ("tool-event", "Tool event", 'step.done: {"n":2}', "call tc1 · environment env", False),
        ("tool-event", "Tool event", "note: half way", "call tc1 · environment env", False),
    ]


def test_long_texts_are_cut_and_large_records_are_not_decoded(tmp_path: Path) -> None:
    # given
    long_text = "x" * (transcript.DISPLAY_CHARS + 10)
    huge_text = "y" * (transcript.DECODE_BYTES + 1)
    events = write_log(
        tmp_path / "events.jsonl",
        [
            ("assistant.message", {"text": long_text}),
            ("assistant.message", {"text": huge_text}),
        ],
    )

    # when
    cut, huge = read_transcript(tmp_path / "events.jsonl").entries

    # then
    assert cut.text == "x" * transcript.DISPLAY_CHARS and cut.truncated
    assert (huge.id, huge.type, huge.input_id, huge.truncated) == (events[1].id, "assistant.message", "a" * 32, True)
    assert huge.cursor == events[1].cursor
    assert huge.text.startswith(f"a record of {len(events[1].line):,} bytes")
    assert huge_text not in huge.text


def test_a_page_spans_a_bounded_number_of_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # given: ten records of the same size and a page budget of three and a half of them
    write_log(tmp_path / "events.jsonl", [("assistant.message", {"text": f"{n}" + "z" * 1000}) for n in range(10)])
    record_bytes = (tmp_path / "events.jsonl").stat().st_size // 10
    monkeypatch.setattr(transcript, "PAGE_BYTES", record_bytes * 7 // 2)

    # when
    newest = read_transcript(tmp_path / "events.jsonl", limit=50)
    older = read_transcript(tmp_path / "events.jsonl", before=newest.older, limit=50)
    forward = read_transcript(tmp_path / "events.jsonl", after=older.entries[0].cursor, limit=50)

    # then
    assert [entry.text[0] for entry in newest.entries] == ["7", "8", "9"]
    assert [entry.text[0] for entry in older.entries] == ["4", "5", "6"]
    assert [entry.text[0] for entry in forward.entries] == ["5", "6", "7"]


def test_a_record_larger_than_a_page_still_makes_a_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # given
    monkeypatch.setattr(transcript, "PAGE_BYTES", 100)
    events = write_log(
        tmp_path / "events.jsonl", [("assistant.message", {"text": f"{n}" + "z" * 1000}) for n in range(3)]
    )

    # when
    newest = read_transcript(tmp_path / "events.jsonl")
    forward = read_transcript(tmp_path / "events.jsonl", after=events[0].cursor)

    # then
    assert [entry.text[0] for entry in newest.entries] == ["2"]
    assert [entry.text[0] for entry in forward.entries] == ["1"]
    assert (forward.older, forward.newer) == (events[1].cursor, events[1].cursor)


def test_a_line_that_is_not_an_event_is_shown_as_unreadable(tmp_path: Path) -> None:
    # given
    write_log(tmp_path / "events.jsonl", messages(1))
    with (tmp_path / "events.jsonl").open("ab") as handle:
        handle.write(b"[1, 2, 3]\n")

    # when
    entries = read_transcript(tmp_path / "events.jsonl").entries

    # then
    assert [(e.label, e.text, e.is_error, e.cursor) for e in entries[1:]] == [
        ("unreadable", "a line that is not an event", True, "")
    ]


def test_session_sizes_count_the_log_and_the_native_files(tmp_path: Path) -> None:
    # given
    write_log(tmp_path / "events.jsonl", messages(3))
    (tmp_path / "native" / "deep").mkdir(parents=True)
    (tmp_path / "native" / "state.bin").write_bytes(b"n" * 100)
    (tmp_path / "native" / "deep" / "more.bin").write_bytes(b"m" * 23)
    size = (tmp_path / "events.jsonl").stat().st_size

    # when
    sizes = measure_session(tmp_path, checkpoint_offset=10)

    # then
    assert sizes == transcript.SessionSizes(
        log_bytes=size, since_checkpoint_bytes=size - 10, native_bytes=123, native_files=2, native_complete=True
    )
    assert measure_session(tmp_path / "gone", checkpoint_offset=0).log_bytes == -1
