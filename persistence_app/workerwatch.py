"""Whether any Celery worker answers on the broker the server dispatches to: a ping in a thread
of its own, every ANSWERED_SECONDS while workers answer and every SILENT_SECONDS while none
does, each change logged once. A broker without a live worker shows in the log, in the
`brain.sync.workers` gauge and as the `error` of a pending session's sync status, instead of
`pending: true` with no reason. Knows nothing of Celery: the server hands it the ping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

from foundation.logs import logger
from foundation.telemetry import Telemetry

__all__ = ["NO_WORKER", "UNREACHABLE", "Ping", "WorkerWatch", "public_broker_url"]

ANSWERED_SECONDS = 10.0  # a worker that stops answering is noticed within this (plus the ping's wait)
SILENT_SECONDS = 2.0  # a worker that starts is noticed this soon
NO_WORKER = "no sync worker answers on the broker"
UNREACHABLE = "the sync broker cannot be reached"

Ping = Callable[
    [], int
]  # the workers that answered one ping (blocking, network I/O); raises when the broker cannot be reached


class WorkerState(StrEnum):
    UNKNOWN = "unknown"  # no ping has finished yet
    ANSWERING = "answering"  # at least one worker answered the last ping
    SILENT = "silent"  # the broker took the ping, no worker answered
    UNREACHABLE = "unreachable"  # the broker could not be reached


def public_broker_url(url: str) -> str:
    """The broker URL as logs may show it: scheme, host, port and path, never a user, password
    or query (which may carry one)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class WorkerWatch:
    def __init__(self, ping: Ping, *, broker: str, telemetry: Telemetry | None = None) -> None:
        self._ping = ping
        self.broker = public_broker_url(broker)
        self.state = WorkerState.UNKNOWN
        self.workers = 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="brain-worker-watch")
        self._task: asyncio.Task[None] | None = None
        if telemetry is not None:
            telemetry.observe_sync_workers(lambda: self.workers)

    def problem(self) -> str | None:
        """What keeps dispatched work from running, in a fixed phrase; None while workers answer
        (or before the first ping has finished)."""
        if self.state == WorkerState.SILENT:
            return NO_WORKER
        if self.state == WorkerState.UNREACHABLE:
            return UNREACHABLE
        return None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="brain-worker-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._thread.shutdown(wait=False, cancel_futures=True)  # a ping in flight ends on its own timeout

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                answered = await loop.run_in_executor(self._thread, self._ping)
            except Exception as exc:  # supervision boundary: any broker failure is "unreachable"
                self._change(WorkerState.UNREACHABLE, 0, error=str(exc))
            else:
                self._change(WorkerState.ANSWERING if answered else WorkerState.SILENT, answered)
            await asyncio.sleep(ANSWERED_SECONDS if self.state == WorkerState.ANSWERING else SILENT_SECONDS)

    def _change(self, state: WorkerState, workers: int, *, error: str = "") -> None:
        self.workers = workers
        if state == self.state:
            return
        self.state = state
        if state == WorkerState.ANSWERING:
            logger.info("sync workers answer on the broker", extra={"broker": self.broker, "workers": workers})
        elif state == WorkerState.SILENT:
            logger.warning(
                NO_WORKER + ": uploads wait until `manage.py syncworker` runs", extra={"broker": self.broker}
            )
        else:
            logger.warning(UNREACHABLE, extra={"broker": self.broker, "error": error})
