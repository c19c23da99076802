"""MCP servers run as owned stdio processes: one process per operation (a discovery or a call).

Each operation gets a fresh private working directory (0700, also the child's HOME and TMPDIR)
under the provider's work root, and a process in a session of its own. When the operation ends,
however it ends, stdin is closed, the leader gets a short grace to exit, then the whole process
group is killed and the directory removed. The child sees only a whitelisted environment.
Every stdout byte counts against the call's max_output_bytes. Imports nothing from Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import Process
from mcp import types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from .base import OutboundCall
from .mcp import McpStreams, McpTransport, OutputMeter, OutputTooLarge

__all__ = ["INHERITED_VARIABLES", "McpStdioTransport", "resolve_command", "stdio_environment"]

# Only these variables of Brain's environment reach a stdio server, beside the ones its
# provider lists (as for harness children: no credentials by default).
INHERITED_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ")
STOP_GRACE_SECONDS = 1.0  # after stdin closes, before the process group is killed
REAP_SECONDS = 2.0  # for the event loop to observe the killed leader's exit
EXIT_POLL_SECONDS = 0.01
READ_CHUNK = 64 * 1024
WORKDIR_PREFIX = "op-"


def stdio_environment(environ: Mapping[str, str], extra: Sequence[str]) -> dict[str, str]:
    """The inherited part of a stdio server's environment: the whitelist plus `extra` names
    (values read once, at startup)."""
    return {name: environ[name] for name in (*INHERITED_VARIABLES, *extra) if name in environ}


def resolve_command(command: Sequence[str]) -> list[str]:
    """Relative paths that exist resolve from Brain's working directory, because the server
    runs in a private one (as harness commands do)."""
    resolved = [command[0]]
    if "/" in command[0] and not Path(command[0]).is_absolute():
        resolved[0] = str(Path(command[0]).resolve())
    for argument in command[1:]:
        if not argument.startswith("-") and not Path(argument).is_absolute() and Path(argument).exists():
            argument = str(Path(argument).resolve())
        resolved.append(argument)
    return resolved


def _death_signal_prefix() -> list[str]:
    """util-linux setpriv makes the server die with Brain (a kill -9 leaves no orphan leader)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _private_directory(root: Path) -> Path:
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=root))  # mkdtemp creates it 0700


def _kill_group(pid: int) -> None:
    """SIGKILL to the server's process group (its session: the leader and everything it
    started that did not leave the group). The group outlives an exited leader while members
    remain, so this also reaches orphans."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _exited(process: Process, seconds: float) -> bool:
    """Polls returncode: Process.wait() on asyncio also waits for pipe EOF, which a grandchild
    holding stdout would delay."""
    deadline = asyncio.get_running_loop().time() + seconds
    while process.returncode is None:
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(EXIT_POLL_SECONDS)
    return True


class McpStdioTransport(McpTransport):
    """`command` is the server's argv; `environment` its inherited variables; `workroot` the
    directory the per-operation working directories are made in."""

    def __init__(self, command: Sequence[str], environment: Mapping[str, str], workroot: Path) -> None:
        super().__init__()
        self._command = resolve_command(command)
        self._environment = dict(environment)
        self._workroot = workroot

    def __repr__(self) -> str:  # never the environment's values
        return f"McpStdioTransport(command={self._command[0]!r})"

    def open_streams(self, call: OutboundCall, meter: OutputMeter) -> McpStreams:
        return self._streams(meter)

    @contextlib.asynccontextmanager
    async def _streams(self, meter: OutputMeter) -> AsyncIterator[TransportStreams]:
        workdir = await asyncio.to_thread(_private_directory, self._workroot)
        try:
            env = {**self._environment, "HOME": str(workdir), "TMPDIR": str(workdir)}
            program = shutil.which(self._command[0], path=env.get("PATH", os.defpath))
            if program is None:
                raise FileNotFoundError(f"MCP server command {self._command[0]!r} not found")
            process = await anyio.open_process(
                [*_death_signal_prefix(), program, *self._command[1:]],
                env=env,
                cwd=workdir,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed as a whole afterwards
            )
            try:
                async with _bridge(process, meter) as streams:
                    yield streams
            finally:
                await _stop(process)
        finally:
            await _remove(workdir)


@contextlib.asynccontextmanager
async def _bridge(process: Process, meter: OutputMeter) -> AsyncIterator[TransportStreams]:
    """The session's streams over the child's pipes: NDJSON JSON-RPC messages both ways."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_stdout() -> None:
        assert process.stdout is not None
        pending = b""
        async with read_writer:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                while True:
                    chunk = await process.stdout.receive(READ_CHUNK)
                    try:
                        meter.take(chunk)
                    except OutputTooLarge:
                        return  # the meter cancelled the operation; the session sees the stream end
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            await read_writer.send(_message(line))

    async def pump_stdin() -> None:
        assert process.stdin is not None
        async with write_reader:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")

    async with anyio.create_task_group() as group:
        group.start_soon(pump_stdout)
        group.start_soon(pump_stdin)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()
            read_stream.close()
            write_stream.close()


def _message(line: bytes) -> SessionMessage | Exception:
    """One stdout line; a malformed one reaches the session as an error value (as the SDK's own
    stdio client does)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _stop(process: Process) -> None:
    """Close stdin, give the leader a grace to exit, then kill the whole group in any case. The
    kill is sent before any await a cancellation could interrupt has the last word."""
    try:
        assert process.stdin is not None
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
        await _exited(process, STOP_GRACE_SECONDS)
    finally:
        _kill_group(process.pid)
    await _exited(process, REAP_SECONDS)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdout is not None:
            await process.stdout.aclose()


async def _remove(workdir: Path) -> None:
    try:
        await asyncio.to_thread(shutil.rmtree, workdir, True)
    except asyncio.CancelledError:
        shutil.rmtree(workdir, ignore_errors=True)  # cancelled while removing: finish on the loop
        raise
