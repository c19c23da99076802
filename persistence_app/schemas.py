"""Wire schemas of the persistence API, named as the contract's components (openapi.json).
Imported only by persistence_app.api and the URL wiring."""

from __future__ import annotations

from ninja import Schema
from pydantic import ConfigDict

from foundation.wire import DateTime

__all__ = ["Restore", "SyncStatus"]


class Restore(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)

    checkpoint: str


class SyncStatus(Schema):
    model_config = ConfigDict(extra="forbid")

    history_bytes: int
    resume_offset: int
    pending: bool
    checkpoint: str | None = None
    native_checkpoint: str | None = None
    error: str | None = None
    time: DateTime | None = None
