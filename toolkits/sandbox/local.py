"""`local`: sandboxes on this machine, no cloud account: bubblewrap (toolkits/sandbox/bubblewrap.py
draws the isolation). Each sandbox is a private directory `<data_dir>/sandboxes/<id>/work` (0700);
each command is a fresh bubblewrap over it, killed with everything it started when it ends, at
its deadline, past its output limit, on terminate and on expiry. Files persist between commands
until the sandbox's lifetime ends, then the directory is removed.

    <data_dir>/sandboxes/<id>/created   issue time (Unix seconds): expiry survives a restart
    <data_dir>/sandboxes/<id>/work/     the sandbox's /work (owned by its uid when running as root)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .backend import COMMAND_DEADLINE_SECONDS, OUTPUT_LIMIT_BYTES, ExecResult, SandboxFailure
from .bubblewrap import Limits, check_bubblewrap, find_bubblewrap, sandbox_argv

__all__ = ["LIFETIME_SECONDS", "MAX_LIVE_SANDBOXES", "LocalBackend"]

LIFETIME_SECONDS = 300.0  # spec (tools/sandboxes): a sandbox lives five minutes, like Modal's and E2B's
MAX_LIVE_SANDBOXES = 32  # on this machine at once, all tenants: each may run commands of 64 processes
# Far above any uid a distribution hands out (Debian's dynamic range ends at 65535, subordinate
# uid ranges start at 100000 and take 65536 per user), one per live sandbox: nothing else owns it.
UID_BASE = 1_500_000_000
READ_BYTES = 16 << 10  # one pipe read
# bwrap exits as soon as the namespace's init reports the command's status; the kernel then
# kills what is left in the namespace. A command's call returns once that is done, or after this.
NAMESPACE_END_SECONDS = 5.0
SANDBOX_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class _Sandbox:
    sandbox_id: str
    directory: Path
    uid: int | None
    expires_at: float  # wall clock: it is written to disk and read back after a restart
    processes: set[asyncio.subprocess.Process] = field(default_factory=set)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    # bwrap leads its own process group (start_new_session); its PID-namespace init dies with it
    # (--die-with-parent), and the kernel then kills every process left in the namespace.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class LocalBackend:
    name = "local"

    def __init__(
        self,
        *,
        data_dir: Path,
        lifetime_seconds: float = LIFETIME_SECONDS,
        max_live: int = MAX_LIVE_SANDBOXES,
        limits: Limits | None = None,
    ) -> None:
        """Checks bubblewrap (BubblewrapUnavailable, a ValueError, refuses startup) and takes
        back the sandboxes a previous process left, removing the expired ones."""
        self.root = data_dir / "sandboxes"
        self.lifetime_seconds = lifetime_seconds
        self.max_live = max_live
        self.limits = limits or Limits()
        self.privileged = os.geteuid() == 0
        self.bwrap = find_bubblewrap()
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        scratch = self.root / ".check"
        scratch.mkdir(mode=0o700, exist_ok=True)
        check_bubblewrap(self.bwrap, scratch, uid=UID_BASE + max_live if self.privileged else None)
        self._sandboxes: dict[str, _Sandbox] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._recover()

    def __repr__(self) -> str:
        return f"LocalBackend(root={str(self.root)!r}, live={len(self._sandboxes)})"

    def _recover(self) -> None:
        for directory in self.root.iterdir():
            if not SANDBOX_ID.fullmatch(directory.name):
                continue
            try:
                expires_at = int((directory / "created").read_text()) + self.lifetime_seconds
                uid = (directory / "work").stat().st_uid if self.privileged else None
            except (OSError, ValueError):
                expires_at, uid = 0.0, None
            if expires_at <= time.time() or len(self._sandboxes) >= self.max_live:
                shutil.rmtree(directory, ignore_errors=True)
            else:
                self._sandboxes[directory.name] = _Sandbox(directory.name, directory, uid, expires_at)

    def _free_uid(self) -> int | None:
        if not self.privileged:
            return None
        taken = {sandbox.uid for sandbox in self._sandboxes.values()}
        return next(UID_BASE + slot for slot in range(self.max_live) if UID_BASE + slot not in taken)

    def _live(self, sandbox_id: str) -> _Sandbox | None:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None or sandbox.expires_at > time.time():
            return sandbox
        return None  # expired: the reaper removes it

    def _ensure_reaper(self) -> None:
        if not self._sandboxes:
            return
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap(), name="local-sandbox-reaper")

    async def _reap(self) -> None:
        while self._sandboxes:
            now = time.time()
            for sandbox in [item for item in self._sandboxes.values() if item.expires_at <= now]:
                await self._remove(sandbox)
            if self._sandboxes:
                soonest = min(item.expires_at for item in self._sandboxes.values())
                await asyncio.sleep(max(0.05, soonest - time.time()))

    async def _remove(self, sandbox: _Sandbox) -> None:
        self._sandboxes.pop(sandbox.sandbox_id, None)
        for process in list(sandbox.processes):
            _kill_group(process)
        await asyncio.to_thread(shutil.rmtree, sandbox.directory, True)

    async def create(self, settings: Mapping[str, str], credential: Mapping[str, str]) -> str:
        if settings or credential:
            raise SandboxFailure("local sandboxes take no parameters and no credential", reached=False)
        if len(self._sandboxes) >= self.max_live:
            raise SandboxFailure(f"this machine runs at most {self.max_live} local sandboxes at once", reached=False)
        sandbox_id, uid = secrets.token_hex(16), self._free_uid()
        directory = self.root / sandbox_id
        created = int(time.time())
        await asyncio.to_thread(self._make_directory, directory, uid, created)
        self._sandboxes[sandbox_id] = _Sandbox(sandbox_id, directory, uid, created + self.lifetime_seconds)
        self._ensure_reaper()
        return sandbox_id

    @staticmethod
    def _make_directory(directory: Path, uid: int | None, created: int) -> None:
        directory.mkdir(mode=0o700)
        (directory / "work").mkdir(mode=0o700)
        if uid is not None:
            os.chown(directory / "work", uid, uid)
        (directory / "created").write_text(str(created))

    async def exec(
        self,
        sandbox_id: str,
        command: str,
        *,
        settings: Mapping[str, str],
        credential: Mapping[str, str],
        deadline_seconds: float = COMMAND_DEADLINE_SECONDS,
        output_limit: int = OUTPUT_LIMIT_BYTES,
    ) -> ExecResult:
        self._ensure_reaper()
        sandbox = self._live(sandbox_id)
        if sandbox is None:
            raise SandboxFailure("this sandbox is gone (terminated or expired)", reached=False)
        info_read, info_write = os.pipe()
        argv = sandbox_argv(
            self.bwrap, sandbox.directory / "work", command, uid=sandbox.uid, limits=self.limits, info_fd=info_write
        )
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=(info_write,),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # never the server's environment
            )
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        sandbox.processes.add(process)
        output = _Output(output_limit, process)
        timed_out = False
        try:
            assert process.stdout is not None and process.stderr is not None
            work = asyncio.gather(output.read(process.stdout, 0), output.read(process.stderr, 1), process.wait())
            try:
                await asyncio.wait_for(work, deadline_seconds)
            except TimeoutError:
                timed_out = True
        finally:
            _kill_group(process)  # also on cancellation (an interrupt): nothing outlives the call
            await process.wait()
            await _end_namespace(info_read)
            sandbox.processes.discard(process)
        killed = timed_out or output.truncated
        return ExecResult(
            exit_code=None if killed else process.returncode,
            stdout=bytes(output.parts[0]).decode(errors="replace"),
            stderr=bytes(output.parts[1]).decode(errors="replace"),
            truncated=output.truncated,
            timed_out=timed_out,
        )

    async def inspect(
        self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> dict[str, object]:
        self._ensure_reaper()
        sandbox = self._live(sandbox_id)
        if sandbox is None:
            return {"state": "terminated"}
        return {"state": "running", "expires_in_seconds": max(0, round(sandbox.expires_at - time.time()))}

    async def terminate(self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]) -> None:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is not None:
            await self._remove(sandbox)

    async def aclose(self) -> None:
        """Kill running commands (shutdown); the directories stay for a restart within their lifetime."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for sandbox in self._sandboxes.values():
            for process in list(sandbox.processes):
                _kill_group(process)


async def _end_namespace(info_read: int) -> None:
    """Kill the namespace's init (bwrap told its host pid on the info pipe) and wait until it
    has reaped every process of the namespace: it is then a zombie or gone."""
    try:
        os.set_blocking(info_read, False)
        raw = os.read(info_read, 4096)
    except OSError:  # bwrap wrote nothing: it never made a namespace
        raw = b""
    finally:
        os.close(info_read)
    try:
        pid = int(json.loads(raw.split(b"}")[0] + b"}")["child-pid"])
    except (ValueError, KeyError, TypeError):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + NAMESPACE_END_SECONDS
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        await asyncio.sleep(0.01)


class _Output:
    """stdout and stderr of one command under one shared byte budget; past it the process
    group is killed and the output marked truncated."""

    def __init__(self, limit: int, process: asyncio.subprocess.Process) -> None:
        self.left = limit
        self.parts = (bytearray(), bytearray())
        self.truncated = False
        self.process = process

    async def read(self, stream: asyncio.StreamReader, index: int) -> None:
        # Read to the end even past the budget (discarding): asyncio reports the process's end
        # only once its pipes reach end of file, which a paused pipe never does.
        while chunk := await stream.read(READ_BYTES):
            kept = chunk[: self.left]
            self.parts[index].extend(kept)
            self.left -= len(kept)
            if len(kept) < len(chunk) and not self.truncated:
                self.truncated = True
                _kill_group(self.process)
