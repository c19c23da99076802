"""What a loaded session's turns leave on disk: the checkpoint a completed turn's harness
reports, native/ put back to the last one on resume, and the bytes the event log and native
files grew by (telemetry)."""

from __future__ import annotations

import asyncio

from foundation.telemetry import Telemetry
from runners.protocol import NativeFile
from sessions_app.eventlog import EventLog, new_id, now_rfc3339
from sessions_app.storage import CheckpointEntry, CheckpointError, SessionFiles

__all__ = ["TurnRecords"]


class TurnRecords:
    def __init__(self, files: SessionFiles, log: EventLog, telemetry: Telemetry) -> None:
        self._store = files.checkpoints
        self._log = log
        self._telemetry = telemetry
        self._native_sizes: dict[str, int] | None = None  # native file sizes of the last checkpoint
        self._reported_log_size = log.size  # event log bytes already counted in brain.transcript.bytes

    @property
    def native(self) -> str:
        return str(self._store.native)

    async def record(self, reported: object, *, measure: bool, covered_seq: int = 0) -> CheckpointEntry:
        """Check the harness's file list and append its checkpoint; `measure`: count the native
        bytes it grew by since the previous one (telemetry)."""
        if measure and self._native_sizes is None:  # first checkpoint since loading
            last = await asyncio.to_thread(self._store.last)
            self._native_sizes = {item["path"]: item["size"] for item in last["files"]} if last else {}
        # one thread hop for the checks, the journal line and both fsyncs
        entry = await asyncio.to_thread(self._persist, reported, offset=self._log.size, covered_seq=covered_seq)
        if self._native_sizes is not None:
            self._record_native_growth(entry["files"])
        return entry

    def _persist(self, reported: object, *, offset: int, covered_seq: int) -> CheckpointEntry:
        """In a worker thread: the log up to `offset` on disk, then the checkpoint naming it."""
        self._log.sync()
        return self._store.record(
            new_id(), offset=offset, time=now_rfc3339(), reported=reported, covered_seq=covered_seq
        )

    def _record_native_growth(self, files: list[NativeFile]) -> None:
        previous = self._native_sizes or {}
        sizes = {item["path"]: item["size"] for item in files}
        self._native_sizes = sizes
        self._telemetry.record_native_bytes(sum(max(0, size - previous.get(path, 0)) for path, size in sizes.items()))

    def count_log_growth(self) -> None:
        size = self._log.size
        self._telemetry.record_transcript_bytes(size - self._reported_log_size)
        self._reported_log_size = size

    def restore_last(self) -> None:
        """Blocking: native/ as the last checkpoint left it. CheckpointError, OSError."""
        last = self._store.last()
        if last is None:
            raise CheckpointError("the checkpoint journal is missing or unreadable")
        self._store.restore(last)
