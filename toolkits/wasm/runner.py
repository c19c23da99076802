"""Run a component's tool in a worker process and wait for its outcome, relaying its committed
extension events; list a component's tools at startup. Nothing of the component runs in this
process: wasmtime is imported by the worker only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from toolkits.events import event_refusal, too_many_events
from toolkits.wasm.frames import FrameError, encode_frame, read_frame
from toolkits.wasm.spares import ROOT, WORKER, SpareWorkers, spawn_worker, worker_environment
from toolkits.wasm.types import (
    MAX_OUTPUT_BYTES,
    ComponentError,
    ComponentLimits,
    ComponentOutcome,
    EmitCallback,
    WorkspaceGrant,
)

__all__ = ["CHECK_TIMEOUT_S", "default_cache_dir", "check_component", "run_component"]

# A worker frame holds at most one event (bounded by the worker) or one output (re-encoded
# JSON of at most MAX_OUTPUT_BYTES); anything longer is a protocol violation.
MAX_WORKER_FRAME_BYTES = 2 * MAX_OUTPUT_BYTES + 64 * 1024
# Compiling a large component (CPython inside) takes seconds on two cores; check_component
# compiles once at startup and caches the artifact for every call after it.
CHECK_TIMEOUT_S = 300.0
# The worker's stderr is kept (its tail) to explain a worker that died.
STDERR_TAIL_BYTES = 2048


def default_cache_dir() -> Path:
    """Compiled artifacts, per user (a cached artifact is trusted native code: 0700)."""
    return Path(tempfile.gettempdir()) / f"brain-wasm-cache-{os.getuid()}"


@dataclass(slots=True)
class _Emitted:
    count: int = 0  # the call's events relayed to the commit so far


class _ProtocolViolation(Exception):
    pass


async def _relay_emit(message: dict[str, Any], emitted: _Emitted, emit: EmitCallback) -> dict[str, Any]:
    """The answer to the worker's `emit` frame, under the one rule of extension events
    (toolkits.events) the commit applies too."""
    kind, raw = message.get("kind"), message.get("data")
    if not isinstance(raw, str):
        raise _ProtocolViolation("an emit frame without its data")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"type": "refused", "error": "event data is not JSON"}
    refusal = event_refusal(kind, data) or too_many_events(emitted.count)
    if refusal is not None:
        return {"type": "refused", "error": refusal}
    assert isinstance(kind, str)
    emitted.count += 1
    try:
        await emit(kind, data)
    except Exception as error:  # the callback refused the event: the component is told why
        return {"type": "refused", "error": str(error) or type(error).__name__}
    return {"type": "emitted"}


def _outcome(message: dict[str, Any]) -> ComponentOutcome:
    status = message.get("status")
    if status == "ok" and "output" in message:
        return ComponentOutcome("ok", message["output"], None)
    error = message.get("error")
    if status in ("error", "timeout") and isinstance(error, str):
        return ComponentOutcome(status, None, error)
    raise _ProtocolViolation("malformed outcome")


async def _converse(process: asyncio.subprocess.Process, request: bytes, emit: EmitCallback) -> ComponentOutcome:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(request)
    await process.stdin.drain()
    emitted = _Emitted()
    while True:
        message = await read_frame(process.stdout, limit=MAX_WORKER_FRAME_BYTES)
        if message["type"] == "outcome":
            return _outcome(message)
        if message["type"] != "emit":
            raise _ProtocolViolation(f"unexpected frame {message['type']!r}")
        reply = await _relay_emit(message, emitted, emit)
        process.stdin.write(encode_frame(reply))
        await process.stdin.drain()


async def _keep_tail(stream: asyncio.StreamReader, tail: bytearray) -> None:
    while chunk := await stream.read(4096):
        tail += chunk
        del tail[:-STDERR_TAIL_BYTES]


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    await process.wait()


def _request(
    component: Path,
    *,
    tool: str,
    input: Any,
    config: Any,
    limits: ComponentLimits,
    grants: Sequence[WorkspaceGrant],
    cache_dir: Path | None,
) -> bytes:
    return encode_frame(
        {
            "type": "run",
            "component": str(component.resolve()),
            "cache_dir": str(cache_dir) if cache_dir is not None else None,
            "tool": tool,
            "input": orjson.dumps(input).decode(),
            "config": orjson.dumps(config).decode(),
            "limits": {"deadline_s": limits.deadline_s, "memory_bytes": limits.memory_bytes, "fuel": limits.fuel},
            "remaining_s": limits.deadline_s,
            "grants": [{"path": str(grant.path.resolve()), "mode": grant.mode} for grant in grants],
        }
    )


def _refused_grant(grants: Sequence[WorkspaceGrant]) -> str | None:
    for grant in grants:
        if grant.mode not in ("read", "read-write"):
            return f"workspace grant mode {grant.mode!r} is neither read nor read-write"
        if not grant.path.is_dir():
            return f"granted workspace {grant.path} is not a directory"
    return None


async def run_component(
    component: Path,
    *,
    tool: str,
    input: Any,
    config: Any,
    limits: ComponentLimits,
    grants: Sequence[WorkspaceGrant],
    emit: EmitCallback,
    cache_dir: Path | None = None,
    spares: SpareWorkers | None = None,
) -> ComponentOutcome:
    """Run `tool` of `component` in a fresh worker process within `limits`, with only `grants`
    (a spare of `spares` prepared for the component when one waits, else one started now).

    Each event the component emits is passed to `emit`, and the component continues once
    `emit` returns (the event committed). The outcome is `timeout` once `limits.deadline_s`
    passed (the worker killed), `cancelled` when the awaiting task is cancelled (the worker
    killed, the cancellation absorbed into the outcome), `error` for a failure of the
    component, a limit it hit, or a worker that broke the protocol or died. Never raises for
    what the component does."""
    refusal = _refused_grant(grants)
    if refusal is not None:
        return ComponentOutcome("error", None, refusal)
    try:
        request = _request(
            component,
            tool=tool,
            input=input,
            config=config,
            limits=limits,
            grants=grants,
            cache_dir=cache_dir or default_cache_dir(),
        )
    except (TypeError, orjson.JSONEncodeError) as error:
        return ComponentOutcome("error", None, f"input or config is not JSON: {error}")
    process = await spares.take(component) if spares is not None else None
    if process is None:
        process = await spawn_worker()
    assert process.stderr is not None
    tail = bytearray()
    tail_task = asyncio.ensure_future(_keep_tail(process.stderr, tail))
    try:
        async with asyncio.timeout(limits.deadline_s):
            return await _converse(process, request, emit)
    except TimeoutError:
        return ComponentOutcome("timeout", None, f"deadline {limits.deadline_s:g} s passed")
    except asyncio.CancelledError:
        return ComponentOutcome("cancelled", None, "the call was cancelled")
    except (FrameError, _ProtocolViolation, ConnectionError) as error:
        await _stop(process)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(tail_task, 1.0)
        last = [line for line in tail.decode("utf-8", "replace").splitlines() if line.strip()][-1:]
        detail = f" ({last[0].strip()[:200]})" if last else ""
        message = f"the component's worker failed: {error}; exit {process.returncode}{detail}"
        return ComponentOutcome("error", None, message)
    finally:
        await _stop(process)
        tail_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tail_task


def check_component(component: Path, *, cache_dir: Path | None = None) -> list[str]:
    """The tool names `component` exports, after loading it in a worker process (which compiles
    it and caches the artifact, so calls after it start fast). ComponentError otherwise."""
    if not component.is_file():
        raise ComponentError(f"component {component} is not a file")
    request = encode_frame(
        {"type": "check", "component": str(component.resolve()), "cache_dir": str(cache_dir or default_cache_dir())}
    )
    try:
        completed = subprocess.run(
            WORKER,
            cwd=ROOT,
            env=worker_environment(),
            input=request,
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ComponentError(f"component {component} did not load within {CHECK_TIMEOUT_S:g} s") from None
    reply = _parse_reply(completed.stdout)
    if reply is None:
        last = completed.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        detail = f"worker exit {completed.returncode} {last[0][:200]}"
        raise ComponentError(f"component {component} could not be checked: {detail}")
    if reply.get("type") == "checked" and isinstance(reply.get("tools"), list):
        return [str(name) for name in reply["tools"]]
    raise ComponentError(str(reply.get("error") or f"component {component} could not be checked"))


def _parse_reply(stdout: bytes) -> dict[str, Any] | None:
    if len(stdout) < 4 or int.from_bytes(stdout[:4], "big") != len(stdout) - 4:
        return None
    try:
        reply = orjson.loads(stdout[4:])
    except orjson.JSONDecodeError:
        return None
    return reply if isinstance(reply, dict) else None
