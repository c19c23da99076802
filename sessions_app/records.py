"""Plain values passed between db, runtime and operations: no ORM objects leave db.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from foundation.principal import Principal
from runners.protocol import ToolDescriptor

__all__ = ["ApprovalRecord", "ApprovalStatus", "Principal", "SessionRecord", "SessionStatus"]


class SessionStatus(StrEnum):
    IDLE = "idle"  # no turn is running
    RUNNING = "running"  # a turn runs, or messages wait in the queue
    INTERRUPTED = "interrupted"  # a turn stopped early (interrupt, provider error, restart)
    FAILED = "failed"  # Brain's own failure stopped a turn
    CLOSED = "closed"  # permanently closed; history stays readable


@dataclass(slots=True)
class SessionRecord:
    id: str
    tenant: str
    harness: str
    config: dict[str, Any]
    descriptors: list[ToolDescriptor]
    status: str
    created_at: str
    updated_at: str
    checkpoint: dict[str, Any] = field(default_factory=dict)  # {id, offset, time}
    # aliases of the bindings created with a private credential: fixed at create, so a loaded
    # session answers GET without a query; a revoked one stays listed (its calls stop)
    credential_bindings: list[str] = field(default_factory=list)
    # a sub-agent's parent session and call, and its depth (0 without a parent): kept in the
    # row, the admin and the archive, not on the wire (the Session schema is closed)
    parent_session: str = ""
    parent_call: str = ""
    depth: int = 0

    def as_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": self.id,
            "harness": self.harness,
            "config": self.config,
            "descriptors": self.descriptors,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "checkpoint": self.checkpoint,
        }
        if self.credential_bindings:
            wire["credential_bindings"] = self.credential_bindings
        return wire


class ApprovalStatus(StrEnum):
    PENDING = "pending"  # the call waits for a decision
    APPROVED = "approved"  # a person approved: the call was dispatched
    REJECTED = "rejected"  # a person rejected: the model got an error result
    EXPIRED = "expired"  # no decision before expires_at: the model got an error result
    CANCELLED = "cancelled"  # an interrupt, close or restart ended the call first


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One call's approval (sessions_app.models.Approval); times are RFC 3339 strings."""

    id: str
    session_id: str
    tenant: str
    call_id: str
    tool: str
    arguments: Any
    status: str
    created_at: str
    expires_at: str
    decided_by: str = ""
    decided_at: str | None = None
    reason: str = ""

    def as_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "status": self.status,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "decided_by": self.decided_by or None,
            "decided_at": self.decided_at,
            "reason": self.reason or None,
        }
