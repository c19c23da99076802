"""Whether a session takes a user.message now: refusals by status (409) and by capacity (429)."""

from __future__ import annotations

from foundation.errors import Conflict, Overloaded
from foundation.hostconfig import Limits
from sessions_app.eventlog import MAX_RECORD_BYTES
from sessions_app.records import SessionStatus

__all__ = ["LOG_RESERVE_BYTES", "check_capacity", "check_status"]

# Room kept in the log for the running turn's last events when a send is near session_bytes.
LOG_RESERVE_BYTES = MAX_RECORD_BYTES


def check_status(status: str) -> None:
    """Conflict unless the session may queue input (a resent key is answered after this)."""
    if status == SessionStatus.CLOSED:
        raise Conflict("session is closed")
    if status in (SessionStatus.INTERRUPTED, SessionStatus.FAILED):  # clients match this text: keep it
        raise Conflict("resume the interrupted session before sending input")


def check_capacity(*, limits: Limits, draining: bool, queued: int, log_size: int, input_size: int) -> None:
    """Overloaded while shutting down, with a full queue, or with the log near its limit."""
    if draining:
        raise Overloaded("server is shutting down")
    if queued >= limits.queue:
        raise Overloaded("session input queue is full")
    if log_size + input_size + LOG_RESERVE_BYTES > limits.session_bytes:
        raise Overloaded("session event log is near its session_bytes limit")
