"""One harness child process: spawn, NDJSON frames on stdin/stdout, request/reply, teardown.

A host serves several attachments (sessions). Broken framing or an exit fails everything
pending on this host and no other. Imports no Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from foundation.logs import logger
from runners.accounting import MODEL_REQUEST, check_request_record
from runners.protocol import EVENT_NAMES, MAX_FRAME, MAX_TOOL_CALLS, Frame, FrameError, decode_frame, encode_frame

from .launch import launch_command

__all__ = ["AttachmentHandler", "HarnessHost", "HostLost", "RunnerError", "child_environment"]

STOP_GRACE_SECONDS = 3.0  # wait after stdin EOF, then after SIGTERM, before SIGKILL
# spec: only these variables of Brain's environment reach a harness child
INHERITED_VARIABLES = ("PATH", "SystemRoot", "WINDIR", "COMSPEC", "PATHEXT", "TMP", "TEMP", "TMPDIR", "LANG", "LC_ALL")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Bytes written to a child's stdin that it has not read yet. Every concurrent tool reply and a
# request at the frame cap fit; a child this far behind has stopped reading, and is lost.
MAX_UNREAD_STDIN = (MAX_TOOL_CALLS + 2) * MAX_FRAME
UNREAD_STDIN_REASON = "harness stopped reading its stdin"


class RunnerError(Exception):
    """An error reply from the runner (provider_error or brain_error)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class HostLost(Exception):
    """The host exited, broke the framing, or was stopped; its pending work is lost."""


class AttachmentHandler(Protocol):
    def on_runner_event(self, turn: str, name: str, data: dict[str, Any]) -> None: ...

    async def on_tool_call(self, turn: str, params: dict[str, Any]) -> Mapping[str, object]: ...

    def on_host_lost(self, reason: str) -> None: ...

    def on_frame_error(self, reason: str) -> None:
        """A frame of this attachment broke the protocol (`reason`, the whole message); other
        attachments go on."""


def child_environment(command: list[str], home: Path) -> dict[str, str]:
    """The whitelisted environment of a harness child. No credentials: those go in `open`."""
    env = {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ}
    env["NO_COLOR"] = "1"
    env["HOME"] = str(home)
    if command and Path(command[0]) == Path(sys.executable):
        env["PYTHONPATH"] = str(PROJECT_ROOT)  # lets `python -m runners.x` import this project's runners
    return env


def resolve_command(command: list[str]) -> list[str]:
    """A bare `python` means the interpreter Brain itself runs on; relative paths that exist
    resolve from Brain's working directory, because the child runs in a private one, and else
    from the project's root (`node runners/pi/src/main.mjs` wherever Brain was started)."""
    resolved = [sys.executable if command[0] in ("python", "python3") else command[0]]
    for argument in command[1:]:
        if not argument.startswith("-") and not Path(argument).is_absolute():
            if Path(argument).exists():
                argument = str(Path(argument).resolve())
            elif (PROJECT_ROOT / argument).exists():
                argument = str(PROJECT_ROOT / argument)
        resolved.append(argument)
    if "/" in resolved[0] and not Path(resolved[0]).is_absolute():
        resolved[0] = str(Path(resolved[0]).resolve())
    return resolved


class HarnessHost:
    def __init__(
        self,
        *,
        harness: str,
        tenant: str,
        command: list[str],
        workdir: Path,
        max_shared: int,
        max_active_turns: int,
        on_exit: Callable[[HarnessHost], None],
    ) -> None:
        self.harness = harness
        self.tenant = tenant  # the only tenant whose sessions this host serves
        self.command = resolve_command(command)
        self.workdir = workdir
        self.max_shared = max_shared
        self.turn_slots = asyncio.Semaphore(max_active_turns)
        self.attachments: dict[str, AttachmentHandler] = {}
        self.lost = False
        self._stopping = False
        self._on_exit = on_exit
        self._process: asyncio.subprocess.Process | None = None
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._calls: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._next_request = 0
        self.spawned_at = 0.0  # time.monotonic() of the spawn, until its first `open` is answered

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def start(self) -> None:
        work, home = self.workdir / "work", self.workdir / "home"
        work.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        self.spawned_at = time.monotonic()
        env = child_environment(self.command, home)
        # The wrapper makes the child get SIGKILL if Brain dies, so a kill -9 of Brain leaves no orphans.
        self._process = await asyncio.create_subprocess_exec(
            *launch_command(self.command, env),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,  # spec: runner diagnostics are suppressed
            cwd=work,
            env=env,
            limit=MAX_FRAME + 1,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read_loop(), name=f"host-{self.pid}-reader")

    def _write(self, frame: Frame) -> None:
        """Queue a frame on the child's stdin without waiting; a child that leaves too much
        unread is lost (HostLost), so a runner that stops reading cannot grow Brain's memory."""
        if self.lost or self._process is None or self._process.stdin is None:
            raise HostLost("harness host is gone")
        stdin = self._process.stdin
        stdin.write(encode_frame(frame))
        if stdin.transport.get_write_buffer_size() > MAX_UNREAD_STDIN:
            self._lose(UNREAD_STDIN_REASON)
            raise HostLost(UNREAD_STDIN_REASON)

    async def request(
        self, attachment: str, method: str, params: Any, *, turn: str = "", timeout: float | None = None
    ) -> Any:
        """Send a request and wait for its reply. Raises RunnerError, HostLost or TimeoutError.

        One deadline covers writing the frame into the pipe and the reply: a child that stops
        reading its stdin fails the request like one that never answers.
        """
        self._next_request += 1
        request_id = f"r{self._next_request}"
        frame: Frame = {"attachment": attachment, "id": request_id, "method": method, "params": params}
        if turn:
            frame["turn"] = turn
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            async with asyncio.timeout(timeout or None):
                self._write(frame)
                assert self._process is not None and self._process.stdin is not None
                await self._process.stdin.drain()
                return await future
        except ConnectionError as exc:
            raise HostLost("harness host closed its stdin") from exc
        finally:
            self._pending.pop(request_id, None)
            if future.done() and not future.cancelled():
                future.exception()  # a loss that failed the future while the write failed: retrieved, not logged

    async def _read_loop(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        reason = "harness process exited"
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # asyncio's LimitOverrunError surfaces as ValueError
                    reason = "harness frame exceeds 4 MiB"
                    break
                if not line:
                    break
                if not line.endswith(b"\n"):
                    reason = "harness output ended mid-frame"
                    break
                try:
                    self._dispatch(decode_frame(line))
                except FrameError as exc:
                    if self._fail_only_its_session(line, exc):
                        continue
                    reason = f"harness broke the frame protocol: {exc}"
                    break
                except HostLost as exc:  # a refusal it was sent went unread past the limit
                    reason = str(exc)
                    break
        except asyncio.CancelledError:
            reason = "harness host stopped"
            raise
        finally:
            self._lose(reason)

    def _fail_only_its_session(self, line: bytes, error: FrameError) -> bool:
        """A whole JSON line that breaks only the value rules (an integer beyond 64 bits, a lone
        surrogate, a non-finite number) still names its attachment: fail that session's request
        or turn and keep the host for the others. False when the line names no live one."""
        try:
            value = json.loads(line)
        except ValueError:
            return False
        if not isinstance(value, dict) or not isinstance(value.get("attachment"), str):
            return False
        reason = f"harness broke the frame protocol: {error}"
        future = self._pending.get(value["id"]) if isinstance(value.get("id"), str) else None
        if future is not None and "method" not in value:
            if not future.done():
                future.set_exception(RunnerError("brain_error", reason))
            return True
        handler = self.attachments.get(value["attachment"])
        if handler is None:
            return False
        handler.on_frame_error(reason)
        return True

    def _dispatch(self, frame: Frame) -> None:
        attachment = frame["attachment"]
        if "method" in frame:
            self._on_request(frame)
        elif "event" in frame:
            name, data = frame["event"], frame.get("data")
            handler = self.attachments.get(attachment)
            if handler is None:
                return  # late events of a detached attachment are dropped
            if name == MODEL_REQUEST:
                try:
                    data = dict(check_request_record(data))
                except ValueError as exc:  # one session's broken record: its turn fails, nothing is logged
                    handler.on_frame_error(f"harness sent an invalid model.request: {exc}")
                    return
            if name not in EVENT_NAMES or not isinstance(data, dict):
                # a well-formed frame of one session: that session's turn fails, the host lives on
                handler.on_frame_error(f"harness sent an invalid frame: unknown runner event {name[:64]!r}")
                return
            handler.on_runner_event(frame.get("turn", ""), name, data)
        elif "id" in frame:
            future = self._pending.get(frame["id"])
            if future is None or future.done():
                return  # a reply after its request timed out
            if "error" in frame:
                error = frame["error"]
                future.set_exception(RunnerError(error["code"], error.get("message", "")))
            else:
                future.set_result(frame.get("result"))
        else:
            raise FrameError("frame is neither a request, a reply nor an event")

    def _on_request(self, frame: Frame) -> None:
        if frame["method"] != "tool.call" or not frame.get("id"):
            raise FrameError(f"unknown runner request {frame['method'][:64]!r}")
        handler = self.attachments.get(frame["attachment"])
        reply: Frame = {"attachment": frame["attachment"], "id": frame["id"]}
        if "turn" in frame:
            reply["turn"] = frame["turn"]
        params = frame.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            # one session's bad call: an error result for the runner, the host lives on
            reply["result"] = {
                "content": [{"type": "text", "text": "tool.call params must name a tool"}],
                "is_error": True,
            }
            self._write(reply)
            return
        if handler is None or len(self._calls) >= MAX_TOOL_CALLS:
            message = "tool call refused: too many concurrent tool calls" if handler else "attachment is not open"
            reply["result"] = {"content": [{"type": "text", "text": message}], "is_error": True}
            self._write(reply)
            return
        task = asyncio.get_running_loop().create_task(self._answer_call(handler, frame.get("turn", ""), params, reply))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _answer_call(self, handler: AttachmentHandler, turn: str, params: dict[str, Any], reply: Frame) -> None:
        """Exactly one reply per call, whatever happens while it is handled."""
        try:
            result: Any = await handler.on_tool_call(turn, params)
        except Exception:  # supervision boundary: the runner must never wait for a lost reply
            logger.exception("tool call handler failed", extra={"harness": self.harness})
            text = "tool call failed inside Brain; remote outcome unknown"
            result = {"content": [{"type": "text", "text": text}], "is_error": True, "unknown_outcome": True}
        reply["result"] = result
        with contextlib.suppress(HostLost):
            self._write(reply)

    def _lose(self, reason: str) -> None:
        if self.lost:
            return
        if self._stopping:
            reason = "harness host stopped"
        self.lost = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(HostLost(reason))
        for task in self._calls:
            task.cancel()
        handlers = list(self.attachments.values())
        self.attachments.clear()
        for handler in handlers:
            handler.on_host_lost(reason)
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        self._on_exit(self)
        if reason != "harness host stopped":
            logger.warning("harness host lost", extra={"harness": self.harness, "pid": self.pid, "reason": reason})

    def forget(self, attachment: str) -> None:
        self.attachments.pop(attachment, None)

    async def stop(self) -> None:
        """Close stdin, then SIGTERM, then SIGKILL, each after a bounded wait."""
        process = self._process
        if process is None:
            return
        self._stopping = True
        if process.returncode is None and process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
            for action in (None, signal.SIGTERM, signal.SIGKILL):
                if action is not None:
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(action)
                try:
                    await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
                    break
                except TimeoutError:
                    continue
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._lose("harness host stopped")
        shutil.rmtree(self.workdir, ignore_errors=True)
