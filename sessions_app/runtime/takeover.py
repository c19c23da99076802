"""What a loaded session makes of the state recovery rebuilt: the turn a dead server left
running, and in a fleet the journaled inputs a dead owner acknowledged past its last checkpoint.

Pure planning: the actor applies the plan (appends, queues, statuses).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runners.media import Media, MediaError, read_media
from sessions_app.storage import Recovered

from .ownership import JournalBacklog, JournaledInput
from .retooling import CONFIGURE
from .session_host import ConfigChange, PendingInput

__all__ = [
    "LOST_MESSAGE",
    "QUEUED_INPUT_CANCELLED",
    "REFUSED_CHANGE_MESSAGE",
    "RESTART_MESSAGE",
    "Adoption",
    "journaled_event",
    "plan_adoption",
    "unsettled",
]

QUEUED_INPUT_CANCELLED = "queued input interrupted before execution"
RESTART_MESSAGE = "turn interrupted: server restarted"
LOST_MESSAGE = "turn lost with the instance that ran it"
REFUSED_CHANGE_MESSAGE = "configuration change not applied"


@dataclass(slots=True)
class Adoption:
    """Journaled inputs to take on: `append` are missing from the log (appended with their own
    event id), `requeue` never started (they run once, in order), `lost` had started and have
    no outcome in the log (their turn is reported lost), `cancelled` were cancelled while queued
    and have no outcome in the log (their cancellation is reported again), `refused` are
    configuration changes that can no longer apply (input id, why).

    A session.configure entry that started (the dead owner applied it: its row has it), or that
    an input started after it proves applied, is done; one that never applied queues again in
    its place, so it applies between the same turns."""

    append: list[JournaledInput] = field(default_factory=list)
    requeue: list[PendingInput] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)

    @property
    def lost_message(self) -> str:
        return f"{LOST_MESSAGE}: input {', '.join(self.lost)}"

    def errors(self) -> list[tuple[str, str]]:
        """The (input id, message) of each session.error it reports, in order: the lost turn,
        the refused changes, the inputs cancelled on the dead owner after its last upload."""
        lost = [(self.lost[0], self.lost_message)] if self.lost else []
        refused = [(input_id, f"{REFUSED_CHANGE_MESSAGE}: {why}") for input_id, why in self.refused]
        return lost + refused + [(input_id, QUEUED_INPUT_CANCELLED) for input_id in self.cancelled]


def journaled_event(payload: Mapping[str, Any]) -> tuple[str, Any]:
    """The type and data of the event a journaled input records: a message's data as sent, a
    change's fields (with its key when it has one)."""
    if payload.get("type") != CONFIGURE:
        return "user.message", payload
    config, key = payload.get("config"), payload.get("key")
    return CONFIGURE, {**config, "key": key} if isinstance(config, dict) and isinstance(key, str) else config


def journaled_media(value: object) -> list[Media]:
    """The images of a journaled input (checked when it was sent; none when it had none)."""
    if not value:
        return []
    try:
        return read_media(value, decode=False)
    except MediaError:  # a damaged entry: its turn runs on the text, as the log's record shows it
        return []


def unsettled(recovered: Recovered, backlog: JournalBacklog | None) -> list[str]:
    """The inputs a dead server left without an outcome that no journal entry accounts for."""
    if backlog is None:
        return list(recovered.unsettled)
    journaled = {entry.input_id for entry in (*backlog.lost, *backlog.requeue, *backlog.cancelled)}
    return [input_id for input_id in recovered.unsettled if input_id not in journaled]


def plan_adoption(
    recovered: Recovered, backlog: JournalBacklog, changes: Mapping[str, ConfigChange | str] | None = None
) -> Adoption:
    """The journal's backlog against the log: entries whose outcome is in the log are done.
    `changes`: the configuration changes to queue again (retooling.journaled_changes)."""
    left_open = set(recovered.unsettled)
    started = {entry.input_id for entry in backlog.lost}
    last_started = max((entry.seq for entry in backlog.lost), default=0)
    cancelled = {entry.input_id for entry in backlog.cancelled}
    plan = Adoption()
    for entry in sorted((*backlog.lost, *backlog.requeue, *backlog.cancelled), key=lambda entry: entry.seq):
        if entry.input_id in recovered.inputs and entry.input_id not in left_open:
            continue  # its outcome is in the log already
        if entry.input_id not in recovered.inputs:
            plan.append.append(entry)
        if entry.payload.get("type") == CONFIGURE:
            if entry.input_id in cancelled:
                plan.cancelled.append(entry.input_id)
            elif entry.input_id not in started and entry.seq > last_started:
                change = (changes or {}).get(entry.input_id, "its journal entry is damaged")
                if isinstance(change, ConfigChange):
                    plan.requeue.append(
                        PendingInput(entry.input_id, "", "", time.monotonic(), entry.seq, change=change)
                    )
                else:
                    plan.refused.append((entry.input_id, change))
            continue
        if entry.input_id in started:
            plan.lost.append(entry.input_id)
        elif entry.input_id in cancelled:
            plan.cancelled.append(entry.input_id)
        else:
            text = str(entry.payload.get("text", ""))
            media = journaled_media(entry.payload.get("media"))
            plan.requeue.append(PendingInput(entry.input_id, text, "", time.monotonic(), entry.seq, media))
    return plan
