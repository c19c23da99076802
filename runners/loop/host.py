"""The runner host: frame I/O on stdin/stdout and dispatch to attachments (many per process).

Requests are handled in arrival order; `prompt` starts a turn task so the reader keeps serving
tool results, steers and interrupts. Reverse `tool.call` requests are correlated by frame id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import traceback

from runners.accounting import RequestRecord
from runners.media import Media, MediaError, read_media
from runners.protocol import (
    BRAIN_METHODS,
    END_TURN,
    MAX_FRAME,
    MAX_TOOL_CALLS,
    DeltaData,
    ErrorBody,
    Frame,
    FrameError,
    JSONObject,
    MessageData,
    NativeFile,
    PromptResult,
    ToolCallParams,
    decode_frame,
    encode_frame,
)

from .attachment import AttachedSession
from .catalog import media_support
from .errors import BrainFailure, RunnerFailure
from .messages import ToolCall, ToolResult
from .providers import ProviderPool
from .settings import parse_open_params
from .state import NativeState
from .turn import run_turn

__all__ = ["Host", "serve_stdio"]

# Exit status when Brain breaks the framing: the stream cannot be trusted any more.
EXIT_FRAMING_ERROR = 2
# Frames waiting for the end of the loop iteration are written at once beyond this many bytes.
MAX_PENDING_BYTES = 64 * 1024
# Note appended to a tool result whose remote side effect may or may not have happened.
UNKNOWN_OUTCOME_NOTE = "(The tool call may or may not have taken effect.)"
# Brain answers every tool.call within the binding's timeout_seconds (at most 86,400 s); a reply
# later than that plus a margin is never coming, and the turn fails instead of hanging.
TOOL_REPLY_SECONDS = 86_400.0 + 60.0


def _log(message: str) -> None:
    print(f"loop: {message}", file=sys.stderr, flush=True)


class FrameWriter:
    """Frames to stdout, one line each; stdout carries nothing else.

    Lines sent within one event-loop iteration (a generation's last delta, its message and the
    prompt reply, say) leave in one write at the end of that iteration: one pipe write and one
    wake-up of Brain instead of three, and no frame waits longer than the current iteration.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    async def send(self, frame: Frame) -> None:
        try:
            line = encode_frame(frame)
        except FrameError as exc:
            raise BrainFailure(str(exc)) from exc
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(line)
        self._pending_bytes += len(line)
        if self._pending_bytes >= MAX_PENDING_BYTES:
            self._flush()
        await self._writer.drain()  # back-pressure, and ConnectionError once Brain is gone

    def _flush(self) -> None:
        if self._pending:
            lines, self._pending, self._pending_bytes = self._pending, [], 0
            self._writer.write(b"".join(lines))

    async def flush(self) -> None:
        self._flush()
        await self._writer.drain()


class _TurnChannel:
    """The TurnIO of one running turn: events and tool calls tagged with its attachment and turn."""

    def __init__(self, host: Host, attachment: AttachedSession, turn_id: str) -> None:
        self._host = host
        self._attachment = attachment
        self._turn_id = turn_id

    async def emit(self, event: str, data: DeltaData | MessageData | RequestRecord) -> None:
        await self._host.out.send(
            {"attachment": self._attachment.attachment_id, "turn": self._turn_id, "event": event, "data": data}
        )

    async def call_tool(self, call: ToolCall) -> ToolResult:
        return await self._host.call_tool(self._attachment.attachment_id, self._turn_id, call)

    def take_steers(self) -> list[str]:
        return self._attachment.take_steers()


class Host:
    def __init__(self, out: FrameWriter, *, tool_reply_seconds: float = TOOL_REPLY_SECONDS) -> None:
        self.out = out
        self._tool_reply_seconds = tool_reply_seconds
        self._attachments: dict[str, AttachedSession] = {}
        self._pending_calls: dict[str, asyncio.Future[Frame]] = {}
        self._call_ids = itertools.count(1)
        # spec: at most 32 reverse tool calls outstanding per runner process.
        self._tool_slots = asyncio.Semaphore(MAX_TOOL_CALLS)
        self._pool = ProviderPool()
        self._background: set[asyncio.Task[None]] = set()

    # Reading -------------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader) -> int:
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # StreamReader's limit: a line over MAX_FRAME
                    _log(f"frame over {MAX_FRAME} bytes; stopping")
                    return EXIT_FRAMING_ERROR
                if not line:
                    return 0
                if line.isspace():  # a blank line, checked without copying up to 4 MiB
                    continue
                try:
                    frame = decode_frame(line)
                except FrameError as exc:
                    _log(f"broken frame: {exc}; stopping")
                    return EXIT_FRAMING_ERROR
                await self.dispatch(frame)
        finally:
            await self.shutdown()

    async def dispatch(self, frame: Frame) -> None:
        method = frame.get("method")
        if method is None:
            if "id" in frame and ("result" in frame or "error" in frame):
                self._resolve_call(frame)
            else:
                _log("ignoring a frame that is neither a request nor a reply")
            return
        handler = getattr(self, "on_" + method, None) if method in BRAIN_METHODS else None
        if handler is None:
            await self._reply_error(frame, BrainFailure(f"unknown method {method!r}"))
            return
        try:
            result = await handler(frame)
        except RunnerFailure as exc:
            await self._reply_error(frame, exc)
            return
        except Exception as exc:  # supervision boundary: a bug fails this request, not every session
            traceback.print_exc(file=sys.stderr)
            await self._reply_error(frame, BrainFailure(f"runner failure: {type(exc).__name__}: {exc}"))
            return
        if result is not None:
            await self._reply(frame, result)

    async def _reply(self, request: Frame, result: JSONObject | PromptResult | list[NativeFile]) -> None:
        reply: Frame = {"attachment": request["attachment"], "id": request.get("id", ""), "result": result}
        if "turn" in request:
            reply["turn"] = request["turn"]
        await self.out.send(reply)

    async def _reply_error(self, request: Frame, failure: RunnerFailure) -> None:
        reply: Frame = {
            "attachment": request["attachment"],
            "id": request.get("id", ""),
            "error": {"code": failure.code, "message": failure.message},
        }
        if "turn" in request:
            reply["turn"] = request["turn"]
        await self.out.send(reply)

    def _attachment(self, frame: Frame) -> AttachedSession:
        attachment = self._attachments.get(frame["attachment"])
        if attachment is None:
            raise BrainFailure(f"unknown attachment {frame['attachment']!r}")
        return attachment

    # Requests (handlers return the result to send, or None when a task replies later) ------

    async def on_open(self, frame: Frame) -> JSONObject:
        attachment_id = frame["attachment"]
        if attachment_id in self._attachments:
            raise BrainFailure(f"attachment {attachment_id!r} is already open")
        settings = parse_open_params(frame.get("params"))
        directory = settings.directory.resolve()
        if any(a.settings.directory.resolve() == directory for a in self._attachments.values()):
            raise BrainFailure(f"native directory {directory} is already attached")
        state = await asyncio.to_thread(NativeState.load, settings.directory)
        self._attachments[attachment_id] = AttachedSession(attachment_id=attachment_id, settings=settings, state=state)
        support = media_support(settings.model, settings.provider)
        return {"media": dict(support)} if support is not None else {}

    async def on_prompt(self, frame: Frame) -> None:
        attachment = self._attachment(frame)
        params = frame.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("text"), str):
            raise BrainFailure("prompt params need text")
        try:
            media = tuple(read_media(params.get("media") or [], decode=False))
        except MediaError as exc:
            raise BrainFailure(f"prompt params: {exc}") from None
        if attachment.running:
            raise BrainFailure("a turn is already running on this attachment")
        turn_id = frame.get("turn", "")
        attachment.turn_id = turn_id
        attachment.prompt_frame = frame
        attachment.steers = []
        attachment.turn_task = asyncio.create_task(self._run_prompt(attachment, frame, params["text"], media))
        return None

    async def _run_prompt(self, attachment: AttachedSession, frame: Frame, text: str, media: tuple[Media, ...]) -> None:
        channel = _TurnChannel(self, attachment, frame.get("turn", ""))
        result: PromptResult | None = None
        error: ErrorBody | None = None
        try:
            await run_turn(attachment.settings, attachment.state, text=text, media=media, io=channel, pool=self._pool)
            result = {}
        except asyncio.CancelledError:
            result = {"interrupted": True}
        except RunnerFailure as exc:
            error = {"code": exc.code, "message": exc.message}
        except Exception as exc:  # supervision boundary: any bug fails this turn, not the host
            traceback.print_exc(file=sys.stderr)
            error = {"code": "brain_error", "message": f"runner failure: {type(exc).__name__}: {exc}"}
        finally:
            attachment.turn_id = None
            attachment.steers = []
        reply: Frame = {
            "attachment": attachment.attachment_id,
            "turn": frame.get("turn", ""),
            "id": frame.get("id", ""),
        }
        if error is not None:
            reply["error"] = {"code": error["code"], "message": error["message"]}
        else:
            reply["result"] = result
        try:
            await self.out.send(reply)
        except (BrainFailure, ConnectionError) as exc:
            _log(f"cannot send prompt reply: {exc}")

    async def on_steer(self, frame: Frame) -> JSONObject:
        attachment = self._attachment(frame)
        params = frame.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("text"), str):
            raise BrainFailure("steer params need text")
        if not attachment.running or frame.get("turn", attachment.turn_id) != attachment.turn_id:
            raise BrainFailure("no running turn to steer")
        attachment.steers.append(params["text"])
        return {}

    async def on_interrupt(self, frame: Frame) -> JSONObject | None:
        attachment = self._attachment(frame)
        if not attachment.running or frame.get("turn", attachment.turn_id) != attachment.turn_id:
            return {}
        task = asyncio.create_task(self._finish_interrupt(attachment, frame))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return None

    async def _finish_interrupt(self, attachment: AttachedSession, frame: Frame) -> None:
        await self._stop_turn(attachment)  # the prompt's own reply ({"interrupted": true}) goes first
        await self._reply(frame, {})

    async def _stop_turn(self, attachment: AttachedSession) -> None:
        prompt = attachment.prompt_frame
        if await attachment.stop_turn() and prompt is not None:
            # cancelled before its first step, so the turn task could not reply itself
            await self._reply(prompt, {"interrupted": True})

    async def on_checkpoint(self, frame: Frame) -> list[NativeFile]:
        attachment = self._attachment(frame)
        if attachment.running:
            raise BrainFailure("checkpoint requested while a turn is running")
        return await asyncio.to_thread(attachment.state.checkpoint)

    async def on_detach(self, frame: Frame) -> JSONObject:
        attachment = self._attachment(frame)
        await self._stop_turn(attachment)
        attachment.state.close()
        del self._attachments[attachment.attachment_id]
        return {}

    # Reverse tool calls --------------------------------------------------------------------

    async def call_tool(self, attachment_id: str, turn_id: str, call: ToolCall) -> ToolResult:
        async with self._tool_slots:
            frame_id = f"tool-{next(self._call_ids)}"
            future: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
            self._pending_calls[frame_id] = future
            params: ToolCallParams = {"id": call.id, "name": call.name, "arguments": call.arguments}
            if call.environment:
                params["environment"] = call.environment
            try:
                await self.out.send(
                    {
                        "attachment": attachment_id,
                        "turn": turn_id,
                        "id": frame_id,
                        "method": "tool.call",
                        "params": params,
                    }
                )
                reply = await asyncio.wait_for(future, self._tool_reply_seconds)
            except TimeoutError:
                raise BrainFailure(
                    f"tool call {call.name!r} got no reply from Brain within {self._tool_reply_seconds:g} s"
                ) from None
            finally:
                self._pending_calls.pop(frame_id, None)  # a late reply after an interrupt is dropped
        return _tool_result(call, reply)

    def _resolve_call(self, frame: Frame) -> None:
        future = self._pending_calls.get(frame.get("id", ""))
        if future is None:
            _log(f"dropping reply to unknown or abandoned call {frame.get('id')!r}")
        elif not future.done():
            future.set_result(frame)

    # Shutdown ------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        for attachment in list(self._attachments.values()):
            await self._stop_turn(attachment)
            attachment.state.close()
        self._attachments.clear()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._pool.aclose()
        with contextlib.suppress(ConnectionError):
            await self.out.flush()  # the last replies, before the process exits


def _tool_result(call: ToolCall, reply: Frame) -> ToolResult:
    error = reply.get("error")
    if error is not None:
        raise BrainFailure(f"tool call {call.name!r} failed in Brain: {error.get('message', '')}")
    result = reply.get("result")
    if not isinstance(result, dict):
        raise BrainFailure(f"tool call {call.name!r} got a malformed result")
    parts = []
    for item in result.get("content") or ():
        if isinstance(item, dict) and item.get("type") == "text":
            parts.append(str(item.get("text", "")))
        else:
            parts.append(_json(item))
    if not parts and result.get("structured_content") is not None:
        parts.append(_json(result["structured_content"]))
    if result.get("unknown_outcome"):
        parts.append(UNKNOWN_OUTCOME_NOTE)
    return ToolResult(
        call_id=call.id,
        name=call.name,
        text="\n".join(parts),
        is_error=bool(result.get("is_error")),
        end_turn=result.get(END_TURN) is True,
    )


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def serve_stdio() -> int:
    """Serve frames on this process's stdin/stdout until stdin closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_FRAME + 1)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return await Host(FrameWriter(writer)).serve(reader)
