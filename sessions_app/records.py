"""Plain values passed between db, runtime and operations: no ORM objects leave db.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NotRequired, TypedDict, cast

from foundation.principal import Principal
from foundation.rfc3339 import now_rfc3339, parse_time
from runners.protocol import ToolDescriptor

__all__ = [
    "ApprovalRecord",
    "ApprovalStatus",
    "CheckpointRef",
    "Principal",
    "SessionConfig",
    "SessionRecord",
    "SessionStatus",
    "model_credential_source",
]

MAX_SUBAGENT_DEPTH = 32767  # the column's range; an archived depth outside it is not trusted
SEALED = "sealed"  # a model_credential's api_key as a record keeps it: the value is in the vault
MAX_REFERENCE_CHARS = 64  # foundation.hostconfig.MAX_REFERENCE_CHARS: a declared name


def model_credential_source(value: object) -> dict[str, str]:
    """Where a session's model key comes from, as its row and the archive keep it: {} (its
    provider's configured key), {"api_key": "sealed"} (its own key, sealed in the vault) or
    {"reference": NAME} (a key the host config declares). ValueError for anything else."""
    if value is None or value == {}:
        return {}
    if value == {"api_key": SEALED}:
        return {"api_key": SEALED}
    if isinstance(value, dict) and value.keys() == {"reference"}:
        name = value["reference"]
        if isinstance(name, str) and 0 < len(name) <= MAX_REFERENCE_CHARS:
            return {"reference": name}
    raise ValueError("model_credential is not {}, a sealed api_key or a reference")


class SessionStatus(StrEnum):
    IDLE = "idle"  # no turn is running
    RUNNING = "running"  # a turn runs, or messages wait in the queue
    INTERRUPTED = "interrupted"  # a turn stopped early (interrupt, provider error, restart)
    FAILED = "failed"  # Brain's own failure stopped a turn
    CLOSED = "closed"  # permanently closed; history stays readable


class SessionConfig(TypedDict):
    """A session's config as the create request gives it (schemas.SessionConfig); `bindings` as
    tools_app saved them."""

    model: str
    tools: list[str]
    instructions: NotRequired[str | None]
    reasoning_effort: NotRequired[str | None]
    bindings: NotRequired[Sequence[Mapping[str, object]] | None]
    placement: NotRequired[Mapping[str, Any] | None]  # tool environments (tools_app.environments)


class CheckpointRef(TypedDict):
    """The session's last completed checkpoint: its id, event-log offset and time."""

    id: str
    offset: int
    time: str


class SessionBody(TypedDict):
    """A session on the wire (the spec's Session schema)."""

    id: str
    harness: str
    config: SessionConfig
    descriptors: list[ToolDescriptor]
    status: str
    created_at: str
    updated_at: str
    checkpoint: CheckpointRef
    credential_bindings: NotRequired[list[str]]


class ApprovalBody(TypedDict):
    """An approval on the wire (the Approval schema)."""

    id: str
    session_id: str
    call_id: str
    tool: str
    arguments: object
    status: str
    created_at: str
    expires_at: str
    decided_by: str | None
    decided_at: str | None
    reason: str | None


@dataclass(slots=True)
class SessionRecord:
    id: str
    tenant: str
    harness: str
    config: SessionConfig
    descriptors: list[ToolDescriptor]
    status: SessionStatus
    created_at: str
    updated_at: str
    checkpoint: CheckpointRef
    # aliases of the bindings created with a private credential: fixed at create, so a loaded
    # session answers GET without a query; a revoked one stays listed (its calls stop)
    credential_bindings: list[str] = field(default_factory=list)
    # a sub-agent's parent session and call, and its depth (0 without a parent): kept in the
    # row, the admin and the archive, not on the wire (the Session schema is closed)
    parent_session: str = ""
    parent_call: str = ""
    depth: int = 0
    # where the session's model key comes from (model_credential_source): never the key itself;
    # kept in the row and the archive, not on the wire (the Session schema is closed)
    model_credential: dict[str, str] = field(default_factory=dict)

    @classmethod
    def new(
        cls,
        *,
        id: str,
        checkpoint: str,
        tenant: str,
        harness: str,
        config: SessionConfig,
        descriptors: list[ToolDescriptor],
    ) -> SessionRecord:
        """A session being created: idle, its creation checkpoint at offset 0."""
        now = now_rfc3339()
        return cls(
            id=id,
            tenant=tenant,
            harness=harness,
            config=config,
            descriptors=descriptors,
            status=SessionStatus.IDLE,
            created_at=now,
            updated_at=now,
            checkpoint={"id": checkpoint, "offset": 0, "time": now},
        )

    def as_wire(self) -> SessionBody:
        wire: SessionBody = {
            "id": self.id,
            "harness": self.harness,
            "config": self.config,
            "descriptors": self.descriptors,
            "status": self.status.value,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "checkpoint": self.checkpoint,
        }
        if self.credential_bindings:
            wire["credential_bindings"] = self.credential_bindings
        return wire

    @classmethod
    def from_index(cls, tenant: str, row: Mapping[str, Any]) -> SessionRecord | None:
        """A discovery index row (another server's as_wire); None when it does not decode."""
        try:
            return cls(
                id=str(row["id"]),
                tenant=tenant,
                harness=str(row["harness"]),
                config=_config(row["config"]),
                descriptors=list(row.get("descriptors") or []),
                status=SessionStatus(row.get("status") or SessionStatus.INTERRUPTED),
                created_at=str(row["created_at"]),
                updated_at=str(row.get("updated_at") or row["created_at"]),
                checkpoint=cast(CheckpointRef, dict(row.get("checkpoint") or {})),  # the index's copy
                credential_bindings=[str(alias) for alias in row.get("credential_bindings") or []],
            )
        except (KeyError, TypeError, ValueError):
            return None

    # -- the archive manifest's `session` ----------------------------------------------------

    def as_manifest(self) -> dict[str, object]:
        """What a server with an empty data dir needs to recreate this record."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "harness": self.harness,
            "config": self.config,
            "descriptors": self.descriptors,
            "created_at": self.created_at,
            "status": self.status.value,  # a restore never reopens a closed session from an older checkpoint
            "credential_bindings": self.credential_bindings,
            "parent_session": self.parent_session,
            "parent_call": self.parent_call,
            "depth": self.depth,
            "model_credential": self.model_credential,
        }

    @classmethod
    def from_manifest(
        cls, session: Mapping[str, Any], native: Mapping[str, Any], *, credential_bindings: list[str]
    ) -> SessionRecord:
        """A checked manifest's session restored: interrupted (closed when it was closed), its
        checkpoint the manifest's native one; times that do not parse become now. ValueError when
        its model_credential is not one a server writes (check_manifest refuses it first)."""
        now = now_rfc3339()
        closed = session.get("status") == SessionStatus.CLOSED
        return cls(
            id=session["id"],
            tenant=session["tenant"],
            harness=str(session.get("harness", "")),
            config=_config(session.get("config") or {}),  # checked by the archive
            descriptors=list(session.get("descriptors") or []),
            status=SessionStatus.CLOSED if closed else SessionStatus.INTERRUPTED,
            created_at=_time_or(session.get("created_at"), now),
            updated_at=now,
            checkpoint={
                "id": str(native.get("id", "")),
                "offset": int(native.get("offset", 0)),
                "time": _time_or(native.get("time"), now),
            },
            credential_bindings=credential_bindings,
            parent_session=str(session.get("parent_session") or ""),  # archives from before sub-agents lack them
            parent_call=str(session.get("parent_call") or ""),
            depth=_depth(session.get("depth")),
            model_credential=model_credential_source(session.get("model_credential")),  # older archives lack it
        )

    # -- the database row (sessions_app.models.Session; db.py reads rows back) ---------------

    def row_fields(self) -> dict[str, object]:
        """The row's columns but its id, as db.py writes them."""
        return {
            "tenant_id": self.tenant,
            "harness": self.harness,
            "model": str(self.config.get("model", "")),
            "config": self.config,
            "descriptors": self.descriptors,
            "status": self.status.value,
            "created_at": parse_time(self.created_at),
            "updated_at": parse_time(self.updated_at),
            "checkpoint_id": self.checkpoint["id"],
            "checkpoint_offset": self.checkpoint["offset"],
            "checkpoint_time": parse_time(self.checkpoint["time"]),
            "credential_bindings": self.credential_bindings,
            "parent_session": self.parent_session,
            "parent_call": self.parent_call,
            "depth": self.depth,
            "model_credential": self.model_credential,
        }


def _config(value: object) -> SessionConfig:
    """A copy of a config another server or the archive wrote; TypeError or ValueError when it
    is not an object."""
    return cast(SessionConfig, dict(cast(Mapping[str, object], value)))


def _time_or(value: object, default: str) -> str:
    try:
        parse_time(str(value))
    except ValueError:
        return default
    return str(value)


def _depth(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SUBAGENT_DEPTH else 0


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

    def as_wire(self) -> ApprovalBody:
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
