"""Worker processes: started for one call each, or ahead of the calls as spares.

A spare is a worker started before any call needs it, told its component (`prepare`) so it
imports Wasmtime and loads the compiled component while it waits. A call that finds a spare for
its component skips both (most of a cached call's time) and the spare is used for that call
only, like any worker: nothing of one call survives into the next. A take starts a replacement
while fewer than `capacity` spares wait or start, or when none waits for its component (the
oldest is stopped beyond `capacity`). A spare exits by itself when its stdin closes, so none
outlives the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import deque
from pathlib import Path

from toolkits.wasm.frames import encode_frame

__all__ = ["ROOT", "WORKER", "SpareWorkers", "spawn_worker", "worker_environment"]

ROOT = Path(__file__).resolve().parents[2]
WORKER = (sys.executable, "-m", "toolkits.wasm.worker")


def worker_environment() -> dict[str, str]:
    """The worker inherits nothing of the server's environment (no credentials, no settings)."""
    return {"PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


async def spawn_worker() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *WORKER,
        cwd=ROOT,
        env=worker_environment(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


class SpareWorkers:
    """Up to `capacity` spares, each prepared for one component (0: none are kept). Bound to the
    event loop of its first use; on another loop the old spares are stopped and it starts over."""

    def __init__(self, capacity: int, *, cache_dir: Path) -> None:
        self.capacity = capacity
        self.cache_dir = cache_dir
        self._spares: deque[tuple[str, asyncio.subprocess.Process]] = deque()
        self._starting: dict[asyncio.Task[None], str] = {}  # spares being started, by component
        self._loop: asyncio.AbstractEventLoop | None = None

    async def take(self, component: Path) -> asyncio.subprocess.Process | None:
        """A live spare prepared for `component`, or None; a replacement starts behind it."""
        if self.capacity <= 0:
            return None
        self._bind()
        key = str(component.resolve())
        found = None
        for entry in list(self._spares):
            name, process = entry
            if process.returncode is not None:
                self._spares.remove(entry)
            elif found is None and name == key:
                self._spares.remove(entry)
                found = process
        # a burst of calls starts one replacement, not one each; calls of a component with no
        # spare waiting or starting get one (in place of the oldest, when spares are full)
        waiting = len(self._spares) + len(self._starting)
        ahead = any(name == key for name, _process in self._spares) or key in self._starting.values()
        if waiting < self.capacity or not ahead:
            task = asyncio.get_running_loop().create_task(self._start(key), name="wasm-spare")
            self._starting[task] = key
            task.add_done_callback(self._forget_start)
        return found

    def _forget_start(self, task: asyncio.Task[None]) -> None:
        self._starting.pop(task, None)

    def pids(self) -> list[int]:
        return [process.pid for _name, process in self._spares if process.returncode is None]

    async def close(self) -> None:
        for task in list(self._starting):
            task.cancel()
        spares, self._spares = list(self._spares), deque()
        await asyncio.gather(*(_stop(process) for _name, process in spares), return_exceptions=True)

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        for _name, process in self._spares:  # of a loop gone: its transports are of no use here
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        self._spares.clear()
        self._loop = loop

    async def _start(self, key: str) -> None:
        try:
            process = await spawn_worker()
        except OSError:
            return  # the next call starts its own worker, and says so if that fails too
        assert process.stdin is not None
        process.stdin.write(encode_frame({"type": "prepare", "component": key, "cache_dir": str(self.cache_dir)}))
        self._spares.append((key, process))
        while len(self._spares) > self.capacity:
            _name, oldest = self._spares.popleft()
            await _stop(oldest)


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    await process.wait()
