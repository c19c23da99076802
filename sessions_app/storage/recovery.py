"""Rebuilding a session's state from its directory: events.jsonl and checkpoints.jsonl.

Blocking file I/O, run by the caller in a worker thread. No Django, no asyncio.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sessions_app.eventlog import EventLog, ScannedEvent
from sessions_app.records import SessionStatus

from .checkpoints import CheckpointEntry, CheckpointStore

__all__ = ["Recovered", "rebuild_state", "recover"]


@dataclass(frozen=True, slots=True)
class Recovered:
    keys: dict[str, int]  # idempotency key -> byte offset of its user.message or session.configure
    unsettled: list[str]  # input ids accepted but never settled, in order
    status: str  # the last session.status, "idle" for a log without one
    last_checkpoint: CheckpointEntry | None
    inputs: frozenset[str] = frozenset()  # every user.message and session.configure id in the log


def recover(directory: Path, log: EventLog) -> Recovered:
    """Trim a torn tail from `log`, then rebuild the session's state from a streaming scan.

    Raises CorruptLog for a whole log line that does not decode, CheckpointError for a
    checkpoint journal whose last whole line does not decode, and OSError.
    """
    log.repair()
    inputs: set[str] = set()
    keys, unsettled, status = rebuild_state(log.scan_for_recovery(), inputs=inputs)
    return Recovered(
        keys=keys,
        unsettled=unsettled,
        status=status,
        last_checkpoint=CheckpointStore(directory).last(),
        inputs=frozenset(inputs),
    )


def rebuild_state(
    events: Iterable[ScannedEvent], *, inputs: set[str] | None = None
) -> tuple[dict[str, int], list[str], str]:
    """From scanned events: idempotency keys, inputs accepted but never settled, last status;
    `inputs` collects every user.message and session.configure id.

    A steer recorded into a running turn (a user.message with delivery "steer" and that turn's
    input_id) settles when its turn completes; when the turn ends in a session.error it stays
    open until its own outcome (the cancellation the runtime records next). One that later runs
    as an input of its own (its harness did not take it) is open again from its running status.

    A session.configure recorded while no turn runs applied at once. One recorded behind a
    running turn waited in the queue: it applied when a later message's turn started or the turn
    ended (the runtime records a cancelled change's session.error before the status that ends
    its turn), unless its session.error says it was cancelled; until then it is open.
    """
    keys: dict[str, int] = {}
    unsettled: list[str] = []
    steers: dict[str, list[str]] = {}  # a running turn's input id -> the steers recorded into it
    steer_ids: set[str] = set()
    running = ""
    changes: set[str] = set()  # the open session.configure ids
    status = SessionStatus.IDLE.value
    for event in events:
        if event.type == "session.configure":
            key = event.data.get("key") if isinstance(event.data, dict) else None
            if isinstance(key, str):
                keys[key] = event.offset
            if inputs is not None:
                inputs.add(event.id)
            if running:
                unsettled.append(event.id)
                changes.add(event.id)
        elif event.type == "user.message":
            key = event.data.get("key")
            if isinstance(key, str):
                keys[key] = event.offset
            unsettled.append(event.id)
            if inputs is not None:
                inputs.add(event.id)
            if event.data.get("delivery") == "steer" and event.input_id:
                steers.setdefault(event.input_id, []).append(event.id)
                steer_ids.add(event.id)
        elif event.type == "session.status":
            value = event.data.get("status", status)
            status = value if isinstance(value, str) else status
            input_id = event.input_id
            # a new status for another input (or none, as on close) ends the running turn
            if running and running != input_id:
                _settle(unsettled, running, steers.pop(running, ()))
            # the running input stays unsettled until its turn ends
            running = input_id if status == SessionStatus.RUNNING else ""
            if running in steer_ids and running not in unsettled:
                unsettled.insert(0, running)  # a steer its harness did not take runs on its own
            if status != SessionStatus.RUNNING and input_id:
                _settle(unsettled, input_id, steers.pop(input_id, ()))
            if changes:
                _apply_changes(unsettled, changes, before=running if status == SessionStatus.RUNNING else "")
        elif event.type == "session.error":
            changes.discard(event.input_id)
            steers.pop(event.input_id, None)  # its steers get their own outcomes
            with contextlib.suppress(ValueError):
                unsettled.remove(event.input_id)
            if running == event.input_id:
                running = ""
    return keys, unsettled, status


def _settle(unsettled: list[str], input_id: str, steers: Iterable[str]) -> None:
    for settled in (input_id, *steers):
        with contextlib.suppress(ValueError):
            unsettled.remove(settled)


def _apply_changes(unsettled: list[str], changes: set[str], *, before: str) -> None:
    """The open changes queued ahead of input `before` (all of them for ""): applied."""
    end = unsettled.index(before) if before in unsettled else len(unsettled)
    applied = [input_id for input_id in unsettled[:end] if input_id in changes]
    for input_id in applied:
        unsettled.remove(input_id)
        changes.discard(input_id)
