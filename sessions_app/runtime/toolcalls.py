"""A running turn's tool calls: each `tool.call` frame becomes exactly one result for the runner.

Records `tool.call`, dispatches once through the tool registry, records `tool.result`. Every
path, a failed append or an unexpected error included, ends in one ToolResult.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from brainsite.logs import logger
from brainsite.telemetry import TurnTrace
from sessions_app.eventlog import RecordTooLarge, new_id, public_message
from tools_app.registry import CallCancelled, CallContext, ToolRegistry, ToolResult, error_result

__all__ = ["ToolCallTurn", "ToolCalls"]


class ToolCallTurn(Protocol):
    """What the session lends its tool calls while a turn runs."""

    @property
    def current_input_id(self) -> str | None: ...

    def record_event(self, type_: str, data: Any, *, input_id: str) -> None:
        """Append and publish one event; raises OSError or RecordTooLarge."""

    def fail_running_turn(self, message: str) -> None: ...


class ToolCalls:
    """The in-flight calls of one session."""

    def __init__(self, registry: ToolRegistry, *, tenant: str, session_id: str, tools: tuple[str, ...]) -> None:
        self._registry = registry
        self._tenant = tenant
        self._session_id = session_id
        self._tools = tools
        self._tasks: set[asyncio.Task[ToolResult]] = set()

    def cancel_all(self) -> None:
        """Interrupt or close: every in-flight call ends with its cancellation result."""
        for task in list(self._tasks):
            task.cancel()

    async def call(
        self, turn: ToolCallTurn, params: dict[str, Any], *, traceparent: str, trace: TurnTrace | None
    ) -> ToolResult:
        input_id = turn.current_input_id
        if input_id is None:
            return error_result("the turn of this tool call is over")
        call_id = new_id()
        name = params.get("name", "")
        arguments = params.get("arguments")
        try:
            turn.record_event("tool.call", {"id": call_id, "name": name, "arguments": arguments}, input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            turn.fail_running_turn(public_message(exc))
            return error_result("tool call could not be recorded")
        call_trace = trace.tool_call(name) if trace is not None else None

        def progress(data: Any) -> None:
            if turn.current_input_id == input_id:
                turn.record_event("tool.progress", {"call_id": call_id, "data": data}, input_id=input_id)

        context = CallContext(
            tenant=self._tenant,
            session_id=self._session_id,
            call_id=call_id,
            tools=self._tools,
            progress=progress,
            traceparent=call_trace.traceparent if call_trace is not None else traceparent,
        )
        result = await self._dispatch(context, name, arguments)
        if call_trace is not None:  # an unknown name is the model's text: keep it out of metric labels
            call_trace.end(name if name in self._tools else "unknown", is_error=result.get("is_error") is True)
        try:
            turn.record_event("tool.result", {"call_id": call_id, "result": result}, input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            turn.fail_running_turn(public_message(exc))
        return result

    async def _dispatch(self, context: CallContext, name: str, arguments: Any) -> ToolResult:
        task = asyncio.get_running_loop().create_task(self._registry.invoke(context, name, arguments))
        self._tasks.add(task)
        try:
            return await task
        except asyncio.CancelledError:  # before the request was sent: nothing happened remotely
            return error_result("tool call cancelled before dispatch: turn interrupted")
        except CallCancelled:
            return error_result(
                "tool call cancelled: turn interrupted; remote outcome may be unknown", unknown_outcome=True
            )
        except Exception as exc:  # supervision boundary: the runner still gets exactly one reply
            logger.exception("tool call crashed", extra={"session_id": self._session_id})
            return error_result(f"tool call failed inside Brain: {type(exc).__name__}", unknown_outcome=True)
        finally:
            self._tasks.discard(task)
