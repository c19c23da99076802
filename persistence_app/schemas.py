"""Wire schemas of the persistence API, named as the contract's components (openapi.json).
Imported only by persistence_app.api and the URL wiring."""

from __future__ import annotations

from foundation.wire import DateTime, StrictSchema, WireSchema

__all__ = ["Restore", "SyncStatus"]


class Restore(StrictSchema):
    checkpoint: str


class SyncStatus(WireSchema):
    history_bytes: int
    resume_offset: int
    pending: bool
    checkpoint: str | None = None
    native_checkpoint: str | None = None
    error: str | None = None
    time: DateTime | None = None
