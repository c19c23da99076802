"""Session state rebuilt from its directory on load: idempotency keys, unsettled inputs, status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from sessions_app.eventlog import CorruptLog, Event, EventLog
from sessions_app.storage.checkpoints import CheckpointError, CheckpointStore
from sessions_app.storage.recovery import Recovered, recover

A = "a" * 32
B = "b" * 32
C = "c" * 32
TIME = "2026-10-15T12:00:00.000000Z"


class _Log:
    """A session directory whose events.jsonl is written as the runtime writes it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(directory / "events.jsonl", max_bytes=1 << 30)
        self._serial = 0

    def _add(self, type_: str, data: dict[str, Any], *, event_id: str = "", input_id: str = "") -> int:
        self._serial += 1
        event_id = event_id or f"{self._serial:032x}"
        envelope: dict[str, Any] = {"id": event_id, "type": type_, "time": TIME}
        if input_id:
            envelope["input_id"] = input_id
        envelope["data"] = data
        return self.log.append(Event(event_id, type_, orjson.dumps(envelope))).offset

    def message(self, event_id: str, *, key: Any = None) -> int:
        data: dict[str, Any] = {"type": "user.message", "text": "hi", "delivery": "queue"}
        if key is not None:
            data["key"] = key
        return self._add("user.message", data, event_id=event_id)

    def status(self, status: str, *, input_id: str = "") -> None:
        self._add("session.status", {"status": status}, input_id=input_id)

    def reply(self, input_id: str) -> None:
        self._add("tool.call", {"id": "t" * 32, "name": "echo", "arguments": {}}, input_id=input_id)
        self._add("tool.result", {"call_id": "t" * 32, "result": {"content": []}}, input_id=input_id)
        self._add("assistant.message", {"text": "hello", "stop_reason": "stop"}, input_id=input_id)

    def error(self, input_id: str, *, code: str = "provider_error") -> None:
        self._add("session.error", {"code": code, "message": "x"}, input_id=input_id)

    def recover(self) -> Recovered:
        self.log.close()
        return recover(self.directory, EventLog(self.directory / "events.jsonl", max_bytes=1 << 30))


@pytest.fixture
def log(tmp_path: Path) -> _Log:
    return _Log(tmp_path / "session")


def test_an_empty_log_is_an_idle_session_with_nothing_pending(log: _Log) -> None:
    # when
    recovered = log.recover()

    # then
    assert recovered == Recovered(keys={}, unsettled=[], status="idle", last_checkpoint=None)


def test_idempotency_keys_map_to_the_offset_of_their_message(log: _Log) -> None:
    # given
    first = log.message(A, key="k-1")
    log.status("running", input_id=A)
    log.status("idle", input_id=A)
    second = log.message(B, key="k-2")
    log.message(C)

    # when
    recovered = log.recover()

    # then
    assert recovered.keys == {"k-1": first, "k-2": second}


@pytest.mark.parametrize(
    "key",
    [pytest.param(7, id="number_case"), pytest.param(None, id="absent_case"), pytest.param(["k"], id="list_case")],
)
def test_only_string_keys_are_idempotency_keys(log: _Log, key: Any) -> None:
    # given
    log.message(A, key=key)

    # when
    recovered = log.recover()

    # then
    assert recovered.keys == {}


def test_a_completed_turn_leaves_nothing_unsettled(log: _Log) -> None:
    # given
    log.message(A)
    log.status("running", input_id=A)
    log.reply(A)
    log.status("idle", input_id=A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.keys, recovered.unsettled, recovered.status) == ({}, [], "idle")


def test_a_queued_chain_that_finished_leaves_nothing_unsettled(log: _Log) -> None:
    # given running A, B queued, then running B, then idle B
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.reply(A)
    log.status("running", input_id=B)
    log.reply(B)
    log.status("idle", input_id=B)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "idle")


def test_a_turn_cut_off_midway_leaves_it_and_the_queue_unsettled_in_order(log: _Log) -> None:
    # given running A with B queued, and no end (the server died)
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.reply(A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([A, B], "running")


def test_a_chain_cut_off_in_its_second_turn_leaves_only_that_turn_and_later_ones(log: _Log) -> None:
    # given A finished, B running, C queued, no end
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.message(C)
    log.status("running", input_id=B)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([B, C], "running")


def test_a_message_accepted_but_not_yet_started_is_unsettled(log: _Log) -> None:
    # given
    log.message(A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([A], "idle")


def test_an_interrupted_turn_with_a_session_error_is_settled(log: _Log) -> None:
    # given
    log.message(A)
    log.status("running", input_id=A)
    log.error(A)
    log.status("interrupted", input_id=A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "interrupted")


def test_an_interrupt_that_cancels_queued_inputs_settles_them_all(log: _Log) -> None:
    # given running A with B and C queued, then an interrupt cancelling the queue
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.message(C)
    log.error(B, code="conflict")
    log.error(C, code="conflict")
    log.status("interrupted", input_id=A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "interrupted")


def test_a_failed_turn_with_a_brain_error_is_settled(log: _Log) -> None:
    # given
    log.message(A)
    log.status("running", input_id=A)
    log.error(A, code="brain_error")
    log.status("failed", input_id=A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "failed")


def test_a_session_error_alone_settles_its_input(log: _Log) -> None:
    # given an error recorded for the running turn before its final status
    log.message(A)
    log.status("running", input_id=A)
    log.error(A)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "running")


def test_closing_a_running_session_settles_the_running_turn(log: _Log) -> None:
    # given a close, which carries no input_id, while A ran
    log.message(A)
    log.status("running", input_id=A)
    log.status("closed")

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "closed")


def test_closing_an_idle_session_leaves_nothing_unsettled(log: _Log) -> None:
    # given
    log.message(A, key="k")
    log.status("running", input_id=A)
    log.status("idle", input_id=A)
    log.status("closed")

    # when
    recovered = log.recover()

    # then
    assert (recovered.keys, recovered.unsettled, recovered.status) == ({"k": 0}, [], "closed")


def test_a_session_resumed_after_an_interruption_runs_again(log: _Log) -> None:
    # given an interrupted turn and a later completed one
    log.message(A)
    log.status("running", input_id=A)
    log.error(A)
    log.status("interrupted", input_id=A)
    log.status("idle")
    log.message(B)
    log.status("running", input_id=B)
    log.status("idle", input_id=B)

    # when
    recovered = log.recover()

    # then
    assert (recovered.unsettled, recovered.status) == ([], "idle")


# --- recover(): the session directory ---------------------------------------------------------


def test_the_offset_of_a_key_is_where_its_message_starts_in_the_log(log: _Log) -> None:
    # given a keyed message after a long turn
    log.message(A)
    log.status("running", input_id=A)
    log.reply(A)
    log.status("idle", input_id=A)
    log.message(B, key="k")

    # when
    recovered = log.recover()

    # then
    [event] = log.log.read(recovered.keys["k"], limit=1)
    assert (event.id, event.type) == (B, "user.message")


def test_recover_trims_a_torn_tail_before_scanning(log: _Log) -> None:
    # given a crash in the middle of appending B's message
    log.message(A)
    size = log.log.size
    log.log.close()
    with (log.directory / "events.jsonl").open("ab") as handle:
        handle.write(b'{"id":"' + B.encode() + b'","type":"user.message","time":"')
    reopened = EventLog(log.directory / "events.jsonl", max_bytes=1 << 30)

    # when
    recovered = recover(log.directory, reopened)

    # then
    assert (recovered.unsettled, recovered.status) == ([A], "idle")
    assert reopened.size == size
    assert (log.directory / "events.jsonl").stat().st_size == size


def test_recover_returns_the_last_checkpoint(log: _Log) -> None:
    # given
    store = CheckpointStore(log.directory)
    store.native.mkdir()
    (store.native / "conversation.jsonl").write_bytes(b"turn\n")
    store.record("c0", offset=0, time=TIME, reported=[])
    log.message(A)
    log.status("running", input_id=A)
    log.status("idle", input_id=A)
    last = store.record(
        "c1",
        offset=log.log.size,
        time=TIME,
        reported=[{"path": "conversation.jsonl", "size": 5, "append_only": True}],
    )

    # when
    recovered = log.recover()

    # then
    assert recovered == Recovered(keys={}, unsettled=[], status="idle", last_checkpoint=last, inputs=frozenset({A}))


def test_recover_names_the_offset_of_a_corrupt_log_line(log: _Log) -> None:
    # given a whole line that is not JSON between two messages
    log.message(A)
    offset = log.log.size
    log.log.close()
    with (log.directory / "events.jsonl").open("ab") as handle:
        handle.write(b"\x00\x00\x00\n")
    log.log = EventLog(log.directory / "events.jsonl", max_bytes=1 << 30)
    log.message(B)

    # when
    with pytest.raises(CorruptLog) as caught:
        log.recover()

    # then
    assert caught.value.offset == offset
    assert f"line at byte {offset} is not JSON" in str(caught.value)


def test_recover_reports_a_checkpoint_journal_that_does_not_decode(log: _Log) -> None:
    # given
    log.message(A)
    (log.directory / "checkpoints.jsonl").write_bytes(b"not a checkpoint\n")

    # when
    with pytest.raises(CheckpointError) as caught:
        log.recover()

    # then
    assert str(caught.value) == "checkpoint journal entry at byte 0 cannot be decoded"


def _steer(log: _Log, event_id: str, *, into: str) -> None:
    data = {"type": "user.message", "text": "steer", "delivery": "steer"}
    log._add("user.message", data, event_id=event_id, input_id=into)


@pytest.mark.parametrize(
    ("ending", "unsettled"),
    [
        pytest.param("completed", [], id="completed_case"),
        pytest.param("running", [A, B], id="killed_mid_turn_case"),
        pytest.param("failed", [B], id="failed_before_its_cancellation_case"),
        pytest.param("refused_then_running", [B], id="refused_steer_running_on_its_own_case"),
        pytest.param("refused_then_idle", [], id="refused_steer_completed_case"),
    ],
)
def test_a_steer_settles_with_the_turn_it_was_recorded_into(tmp_path: Path, ending: str, unsettled: list[str]) -> None:
    log = _Log(tmp_path / "s")
    log.message(A)
    log.status("running", input_id=A)
    _steer(log, B, into=A)
    if ending == "completed":
        log.status("idle", input_id=A)
    elif ending == "failed":
        log.error(A)
        log.status("interrupted", input_id=A)
    elif ending.startswith("refused"):
        log.status("running", input_id=B)  # its harness did not take it: it runs right after A
        if ending == "refused_then_idle":
            log.status("idle", input_id=B)
    assert log.recover().unsettled == unsettled


D = "d" * 32


def _change(log: _Log, event_id: str) -> None:
    log._add("session.configure", {"model": "openai/gpt-5-mini"}, event_id=event_id)


def test_a_change_recorded_while_idle_applied_at_once_and_is_settled(log: _Log) -> None:
    # given a change with no turn running, then a completed turn
    _change(log, A)
    log.message(B)
    log.status("running", input_id=B)
    log.status("idle", input_id=B)

    # when
    recovered = log.recover()

    # then
    assert recovered.unsettled == []
    assert recovered.inputs == {A, B}


def test_a_change_queued_behind_a_turn_cut_off_is_open_in_its_place(log: _Log) -> None:
    # given a turn running, a change and a message queued behind it, the server killed
    log.message(A)
    log.status("running", input_id=A)
    _change(log, B)
    log.message(C)

    # when
    recovered = log.recover()

    # then the turn, the change and the message are open, in the queue's order
    assert recovered.unsettled == [A, B, C]


def test_a_change_applies_when_the_turn_before_it_ends_and_one_behind_a_message_waits_for_it(log: _Log) -> None:
    # given a change queued behind A, a message C, and a change D behind C; A ended, C runs
    log.message(A)
    log.status("running", input_id=A)
    _change(log, B)
    log.message(C)
    _change(log, D)
    log.status("running", input_id=C)

    # when the server dies during C
    recovered = log.recover()

    # then B applied before C started; D still waits behind C
    assert recovered.unsettled == [C, D]


def test_a_change_an_interrupt_cancelled_is_settled_and_one_applied_at_the_turns_end_too(log: _Log) -> None:
    # given a change cancelled with the queue by an interrupt, then one applied after a turn
    log.message(A)
    log.status("running", input_id=A)
    _change(log, B)
    log.error(A, code="conflict")
    log.error(B, code="conflict")
    log.status("interrupted", input_id=A)
    log.status("idle")
    log.message(C)
    log.status("running", input_id=C)
    _change(log, D)
    log.status("idle", input_id=C)

    # when
    recovered = log.recover()

    # then
    assert recovered.unsettled == []
