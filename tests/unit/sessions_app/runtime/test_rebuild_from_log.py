"""Session state rebuilt from events.jsonl on load: idempotency keys, unsettled inputs, status."""

from __future__ import annotations

from typing import Any

import pytest

from sessions_app.runtime.actor import rebuild_from_log

A = "a" * 32
B = "b" * 32
C = "c" * 32


class _Log:
    """Parsed records as EventLog.scan() returns them, with increasing offsets."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._offset = 0
        self._serial = 0

    def _add(self, type_: str, data: dict[str, Any], *, event_id: str = "", input_id: str = "") -> int:
        self._serial += 1
        record: dict[str, Any] = {"id": event_id or f"{self._serial:032x}", "type": type_, "time": "t"}
        if input_id:
            record["input_id"] = input_id
        record["data"] = data
        record["_offset"] = self._offset
        self.records.append(record)
        self._offset += 100
        return int(record["_offset"])

    def message(self, event_id: str, *, key: Any = None) -> int:
        data: dict[str, Any] = {"type": "user.message", "text": "hi", "delivery": "queue"}
        if key is not None:
            data["key"] = key
        return self._add("user.message", data, event_id=event_id)

    def status(self, status: str, *, input_id: str = "") -> None:
        self._add("session.status", {"status": status}, input_id=input_id)

    def reply(self, input_id: str) -> None:
        self._add("assistant.message", {"text": "hello", "stop_reason": "stop"}, input_id=input_id)

    def error(self, input_id: str, *, code: str = "provider_error") -> None:
        self._add("session.error", {"code": code, "message": "x"}, input_id=input_id)


def test_an_empty_log_is_an_idle_session_with_nothing_pending() -> None:
    # when
    keys, unsettled, status = rebuild_from_log([])

    # then
    assert (keys, unsettled, status) == ({}, [], "idle")


def test_idempotency_keys_map_to_the_offset_of_their_message() -> None:
    # given
    log = _Log()
    first = log.message(A, key="k-1")
    log.status("running", input_id=A)
    log.status("idle", input_id=A)
    second = log.message(B, key="k-2")
    log.message(C)

    # when
    keys, _, _ = rebuild_from_log(log.records)

    # then
    assert keys == {"k-1": first, "k-2": second}


@pytest.mark.parametrize(
    "key",
    [pytest.param(7, id="number_case"), pytest.param(None, id="absent_case"), pytest.param(["k"], id="list_case")],
)
def test_only_string_keys_are_idempotency_keys(key: Any) -> None:
    # given
    log = _Log()
    log.message(A, key=key)

    # when
    keys, _, _ = rebuild_from_log(log.records)

    # then
    assert keys == {}


def test_a_completed_turn_leaves_nothing_unsettled() -> None:
    # given
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.reply(A)
    log.status("idle", input_id=A)

    # when
    keys, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (keys, unsettled, status) == ({}, [], "idle")


def test_a_queued_chain_that_finished_leaves_nothing_unsettled() -> None:
    # given running A, B queued, then running B, then idle B
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.reply(A)
    log.status("running", input_id=B)
    log.reply(B)
    log.status("idle", input_id=B)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "idle")


def test_a_turn_cut_off_midway_leaves_it_and_the_queue_unsettled_in_order() -> None:
    # given running A with B queued, and no end (the server died)
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.reply(A)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([A, B], "running")


def test_a_chain_cut_off_in_its_second_turn_leaves_only_that_turn_and_later_ones() -> None:
    # given A finished, B running, C queued, no end
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.message(C)
    log.status("running", input_id=B)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([B, C], "running")


def test_a_message_accepted_but_not_yet_started_is_unsettled() -> None:
    # given
    log = _Log()
    log.message(A)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([A], "idle")


def test_an_interrupted_turn_with_a_session_error_is_settled() -> None:
    # given
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.error(A)
    log.status("interrupted", input_id=A)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "interrupted")


def test_an_interrupt_that_cancels_queued_inputs_settles_them_all() -> None:
    # given running A with B and C queued, then an interrupt cancelling the queue
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.message(B)
    log.message(C)
    log.error(B, code="conflict")
    log.error(C, code="conflict")
    log.status("interrupted", input_id=A)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "interrupted")


def test_a_failed_turn_with_a_brain_error_is_settled() -> None:
    # given
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.error(A, code="brain_error")
    log.status("failed", input_id=A)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "failed")


def test_a_session_error_alone_settles_its_input() -> None:
    # given an error recorded for the running turn before its final status
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.error(A)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "running")


def test_closing_a_running_session_settles_the_running_turn() -> None:
    # given a close, which carries no input_id, while A ran
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.status("closed")

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "closed")


def test_closing_an_idle_session_leaves_nothing_unsettled() -> None:
    # given
    log = _Log()
    log.message(A, key="k")
    log.status("running", input_id=A)
    log.status("idle", input_id=A)
    log.status("closed")

    # when
    keys, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (keys, unsettled, status) == ({"k": 0}, [], "closed")


def test_a_session_resumed_after_an_interruption_runs_again() -> None:
    # given an interrupted turn and a later completed one
    log = _Log()
    log.message(A)
    log.status("running", input_id=A)
    log.error(A)
    log.status("interrupted", input_id=A)
    log.status("idle")
    log.message(B)
    log.status("running", input_id=B)
    log.status("idle", input_id=B)

    # when
    _, unsettled, status = rebuild_from_log(log.records)

    # then
    assert (unsettled, status) == ([], "idle")
