"""A running turn's tool calls: each `tool.call` frame becomes exactly one result for the runner.

Records `tool.call` before anything is dispatched, runs the call once through tools_app's call
path (the session's runtime tools and provider bindings, then the config tools), records `tool.result` with the call's
outcome. A call of a tool that requires approval waits for a decision in between (approvals.py).
Every path, a failed append or an unexpected error included, ends in one CallResult.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol, cast

from foundation.logs import logger
from foundation.telemetry import TurnTrace
from runners.protocol import END_TURN
from sessions_app.eventlog import RecordTooLarge, new_id, public_message
from tools_app.environments.events import CallEvents
from tools_app.invocation import (
    ApprovalGate,
    CallCancelled,
    CallContext,
    CallResult,
    Invocation,
    Outcome,
    ToolKind,
    error_result,
)
from tools_app.tool_path import ToolPath

from .approvals import Approvals

__all__ = ["ToolCallTurn", "ToolCalls"]

MAX_ENVIRONMENT_CHARS = 32  # an environment name's longest (foundation.hostconfig.ENVIRONMENT_NAME)


class ToolCallTurn(Protocol):
    """What the session lends its tool calls while a turn runs."""

    @property
    def current_input_id(self) -> str | None: ...

    def record_event(self, type_: str, data: Any, *, input_id: str) -> int:
        """Append and publish one event; its committed position in the session's log (the byte
        offset of its line). Raises OSError or RecordTooLarge."""

    def fail_running_turn(self, message: str) -> None: ...


class ToolCalls:
    """The in-flight calls of one session."""

    def __init__(
        self,
        path: ToolPath,
        *,
        tenant: str,
        session_id: str,
        tools: tuple[str, ...],
        bindings: tuple[ToolKind, ...] = (),
        sequential: bool = False,
        approvals: Approvals | None = None,
    ) -> None:
        self._path = path
        # calls of tools that require approval wait here; without it they are refused
        self.approvals = approvals
        # sequential execution: one call at a time, in the order the runner sent them (the
        # model's order); asyncio.Lock wakes its waiters first come, first served
        self._one_at_a_time = asyncio.Lock() if sequential else None
        self._tenant = tenant
        self._session_id = session_id
        self._tools = tools
        self._bindings = bindings
        self._tasks: set[asyncio.Task[Invocation]] = set()

    def retool(self, tools: tuple[str, ...]) -> None:
        """A session.configure changed the session's tools: calls from now on are authorized
        against these (a call already dispatched keeps the authorization it had)."""
        self._tools = tools

    def cancel_all(self) -> None:
        """Interrupt or close: every in-flight call ends with its cancellation result."""
        for task in list(self._tasks):
            task.cancel()

    async def call(
        self, turn: ToolCallTurn, params: dict[str, Any], *, traceparent: str, trace: TurnTrace | None
    ) -> CallResult:
        input_id = turn.current_input_id
        if input_id is None:
            return error_result("the turn of this tool call is over")
        call_id = new_id()
        name = params.get("name", "")
        arguments = params.get("arguments")
        environment = params.get("environment")
        environment = environment[:MAX_ENVIRONMENT_CHARS] if isinstance(environment, str) else ""
        start: dict[str, Any] = {"id": call_id, "name": name, "arguments": arguments}
        if environment:  # a placed tool's call names the environment the harness chose
            start["environment"] = environment
        try:
            sequence = turn.record_event("tool.call", start, input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            turn.fail_running_turn(public_message(exc))
            return error_result("tool call could not be recorded")
        call_trace = trace.tool_call(name) if trace is not None else None

        def progress(data: Any) -> None:
            if turn.current_input_id == input_id:
                turn.record_event("tool.progress", {"call_id": call_id, "data": data}, input_id=input_id)

        def record(type_: str, data: object) -> None:  # an extension event (CallEvents checks it)
            if turn.current_input_id != input_id:
                raise RuntimeError("the turn of this call is over")
            try:
                turn.record_event(type_, data, input_id=input_id)
            except (OSError, RecordTooLarge) as exc:
                turn.fail_running_turn(public_message(exc))
                raise

        events = CallEvents(record, call_id=call_id, environment=environment)

        context = CallContext(
            tenant=self._tenant,
            session_id=self._session_id,
            call_id=call_id,
            tools=self._tools,
            progress=progress,
            traceparent=call_trace.traceparent if call_trace is not None else traceparent,
            approval=self._approval_gate(turn, input_id=input_id, call_id=call_id),
            environment=environment,
            emit=events.emit if environment else None,
            sequence=sequence,
        )
        try:
            invocation = await self._dispatch(context, name, arguments)
        finally:
            events.close()
        result = invocation.result
        if call_trace is not None:  # an unknown name is the model's text: keep it out of metric labels
            known = name in self._tools or any(name in kind for kind in self._bindings)
            call_trace.end(name if known else "unknown", is_error=result.get("is_error") is True)
        data: dict[str, Any] = {"call_id": call_id, "result": result, "outcome": invocation.outcome.value}
        if environment:
            data["environment"] = environment
        try:
            for type_, event in invocation.events:  # what the tool shows the user, before its result
                turn.record_event(type_, event, input_id=input_id)
            turn.record_event("tool.result", data, input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            turn.fail_running_turn(public_message(exc))
            return result
        if invocation.end_turn:
            # runner protocol: the runner ends the model's turn once it has this result
            return cast(CallResult, {**result, END_TURN: True})
        return result

    def _approval_gate(self, turn: ToolCallTurn, *, input_id: str, call_id: str) -> ApprovalGate | None:
        approvals = self.approvals
        if approvals is None:
            return None

        async def approve(name: str, arguments: dict[str, object], *, timeout_seconds: int) -> Invocation | None:
            return await approvals.request(
                turn, name, arguments, input_id=input_id, call_id=call_id, timeout_seconds=timeout_seconds
            )

        return approve

    @staticmethod
    async def _after_the_previous_call(call: Coroutine[Any, Any, Invocation], lock: asyncio.Lock) -> Invocation:
        """Sequential execution: run `call` once the calls before it are done. Cancelled while it
        waits (an interrupt), it never starts: cancelled before dispatch."""
        try:
            async with lock:
                return await call
        finally:
            call.close()  # a no-op once it ran

    async def _dispatch(self, context: CallContext, name: str, arguments: Any) -> Invocation:
        call = self._path.invoke_call(context, name, arguments, kinds=self._bindings)
        if self._one_at_a_time is not None:
            call = self._after_the_previous_call(call, self._one_at_a_time)
        task = asyncio.get_running_loop().create_task(call)
        self._tasks.add(task)
        try:
            return await task
        except asyncio.CancelledError:  # before the request was sent: nothing happened remotely
            return Invocation(error_result("tool call cancelled before dispatch: turn interrupted"), Outcome.CANCELLED)
        except CallCancelled:
            return Invocation.failed(
                "tool call cancelled: turn interrupted; remote outcome may be unknown", outcome=Outcome.CANCELLED
            )
        except Exception as exc:  # supervision boundary: the runner still gets exactly one reply
            logger.exception("tool call crashed", extra={"session_id": self._session_id})
            return Invocation.failed(f"tool call failed inside Brain: {type(exc).__name__}", outcome=Outcome.UNKNOWN)
        finally:
            self._tasks.discard(task)
