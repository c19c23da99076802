"""What a session actor sees of the runtime that loaded it (SessionHost), and the values its
turns pass around: an accepted input waiting for its turn, and why a turn stopped early."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from foundation.hostconfig import Limits
from foundation.logs import logger
from runners.media import Media, PromptParams
from runners.protocol import ToolDescriptor
from sessions_app.eventlog import RecordTooLarge, public_message
from sessions_app.harness.host import HostLost, RunnerError
from sessions_app.harness.pool import Attachment, HostUnavailable
from sessions_app.records import SessionRecord
from sessions_app.storage import CheckpointError

from .deltas import DeltaBudget
from .turnslots import TurnSlot

# the actor type a host serves (SessionActor): a parameter here keeps this module below actor.py
Actor = TypeVar("Actor", contravariant=True)

__all__ = ["ConfigChange", "PendingInput", "SessionHost", "SpawnCount", "Stateful", "TurnFailure", "turn_failure"]


class Stateful(Protocol):
    """What the write-behind and the archive's dirty list read of a session."""

    @property
    def id(self) -> str: ...

    @property
    def record(self) -> SessionRecord: ...


class SessionHost(Protocol[Actor]):
    """What an actor needs of the runtime that loaded it."""

    @property
    def draining(self) -> bool: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def delta_budget(self) -> DeltaBudget:
        """The server's bound on the streamed text its sessions keep for reconnects."""

    def turn_slot(self) -> AbstractAsyncContextManager[TurnSlot]: ...

    async def attach(self, actor: Actor) -> Attachment: ...

    async def detach(self, actor: Actor) -> None: ...

    def release(self, actor: Actor) -> None:
        """Detach in the background."""

    def attachment_of(self, actor: Actor) -> Attachment | None: ...

    def forget_attachment(self, actor: Actor) -> None: ...

    def mark_dirty(self, actor: Stateful) -> None: ...

    def mark_settled(self, actor: Stateful) -> None: ...

    async def save_config(self, actor: Stateful) -> None:
        """Write the session's applied configuration (session.configure) to its row."""

    def track(self, task: asyncio.Task[None]) -> None: ...


class TurnFailure(Exception):
    """Why a turn stopped early: a session.error code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """A checked session.configure: the fields it changes, the session's tool descriptors for
    its new tools (None: the tools do not change) and its idempotency key."""

    fields: dict[str, Any]
    descriptors: list[ToolDescriptor] | None = None
    key: str | None = None

    @property
    def data(self) -> dict[str, Any]:
        """Its session.configure event's data: the fields, and the key when it has one."""
        return {**self.fields, "key": self.key} if self.key else self.fields


@dataclass(slots=True)
class PendingInput:
    id: str
    text: str
    traceparent: str = ""  # W3C trace context of the request that sent it
    accepted: float = 0.0  # time.monotonic() when it was accepted
    seq: int = 0  # its input journal entry in a fleet (0: not journaled)
    media: list[Media] = field(default_factory=list)  # its images (runners.media), checked at the send
    change: ConfigChange | None = None  # a session.configure: applied in its place in the queue, no turn

    def prompt(self) -> PromptParams:
        """The `prompt` request's params: the text, and its images when it has any."""
        params: PromptParams = {"text": self.text}
        if self.media:
            params["media"] = self.media
        return params


def turn_failure(exc: Exception, *, earlier: TurnFailure | None, session_id: str) -> TurnFailure:
    """The session.error a turn that raised `exc` ends with; `earlier`: the failure a callback
    recorded first (a lost host, a frame error), which a resulting harness error keeps."""
    if isinstance(exc, TurnFailure):
        return exc
    if isinstance(exc, RunnerError):
        code = "provider_error" if exc.code == "provider_error" else "brain_error"
        return earlier or TurnFailure(code, exc.message or f"harness reported {exc.code}")
    if isinstance(exc, HostLost | HostUnavailable | CheckpointError | OSError | RecordTooLarge | TimeoutError):
        return earlier or TurnFailure("brain_error", public_message(exc))
    # supervision boundary: an unexpected bug fails this turn only
    logger.exception("turn crashed", extra={"session_id": session_id}, exc_info=exc)
    return TurnFailure("brain_error", f"internal error: {type(exc).__name__}")


class SpawnCount:
    """The sub-agent sessions one turn started, against the per-turn limit."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def claim(self, limit: int) -> bool:
        """Count one more; False (and nothing counted) when `limit` are started already."""
        if self._count >= limit:
            return False
        self._count += 1
        return True

    def unclaim(self) -> None:
        """A counted spawn that did not start a session."""
        self._count = max(0, self._count - 1)
