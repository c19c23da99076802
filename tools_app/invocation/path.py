"""The one path of a tool call, for every kind of tool: the kind that serves the name resolves
it, then the arguments are checked (once), approval is asked (once), the kind dispatches, and
the kind's result check ends it in one Invocation.

Kinds plug in behind `ToolKind`: config tools (invocation.config_tools), a session's provider
bindings (bindings.providers) and its runtime executor tools (bindings.runtime). Approval is
asked for a call of any kind: when its target requires it (a config tool's own setting) or the
operator's rules (invocation.approvals) match it. Imports no runtime or API module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from jsonschema.protocols import Validator

from foundation.errors import Overloaded
from foundation.hostconfig import ToolKindName
from foundation.schema_workers import SchemaWorkers

from .approvals import ApprovalPolicy, RulesUnavailable
from .results import Invocation, Outcome, detail

__all__ = ["ApprovalGate", "CallContext", "Dispatch", "Target", "ToolKind", "invoke_tool"]


class ApprovalGate(Protocol):
    """Asks a person to decide on one call of a tool that requires approval (the session
    runtime's, per call), so tools_app never imports sessions_app."""

    async def __call__(self, name: str, arguments: dict[str, object], *, timeout_seconds: int) -> Invocation | None:
        """None once approved (dispatch the call); else the result that replaces it (rejected,
        expired). Raises CancelledError when an interrupt cancels the wait."""


@dataclass(frozen=True, slots=True)
class CallContext:
    """The trusted identity of one call, kept apart from the model's arguments."""

    tenant: str
    session_id: str
    call_id: str
    tools: tuple[str, ...]  # the config tools enabled for the session
    progress: Callable[[object], None]
    traceparent: str = ""  # W3C trace context of the turn, forwarded to the tool when set
    approval: ApprovalGate | None = None  # None: calls of tools that require approval are refused
    environment: str = ""  # the environment the harness named for a placed tool ("" for others)
    # a placed tool's extension events: returns once the event is committed (EmitRefused otherwise)
    emit: Callable[[str, object], Awaitable[None]] | None = None
    # the committed position of the call's tool.call event in the session's log (-1: not recorded)
    sequence: int = -1


# A kind's dispatch of one checked, approved call: sends it once and checks the result.
Dispatch = Callable[[CallContext, dict[str, object]], Awaitable[Invocation]]


@dataclass(frozen=True, slots=True)
class Target:
    """A name resolved by its kind: what the path checks before the kind dispatches it, the
    pool its kind checks values on (`schemas`), and what approval rules match it by (`kind`, the
    installed `provider` serving it or "")."""

    arguments: Validator
    dispatch: Dispatch
    schemas: SchemaWorkers
    kind: ToolKindName
    provider: str = ""
    require_approval: bool = False
    approval_timeout_seconds: int = 0
    invalid_input: Outcome = Outcome.ERROR  # a placed tool's refused input is `invalid_input`


class ToolKind(Protocol):
    """One kind of tool: the names it serves and how it resolves one for a call."""

    def __contains__(self, name: object) -> bool: ...

    async def resolve(self, context: CallContext, name: str) -> Target | Invocation:
        """The target of `name`, or the result that refuses the call before anything is sent."""


async def invoke_tool(
    context: CallContext,
    name: str,
    arguments: object,
    *,
    kinds: Sequence[ToolKind],
    approvals: ApprovalPolicy | None = None,
) -> Invocation:
    """Run one call through the first kind that serves `name` (the last kind answers for any
    other name, with its refusal), asking for approval when the target or `approvals` requires
    it. Never raises for tool failures.

    Cancellation (interrupt, close) propagates: as CancelledError before the request is sent,
    as CallCancelled once it may have reached the tool, so the caller can set the outcome."""
    kind = next((kind for kind in kinds if name in kind), kinds[-1])
    target = await kind.resolve(context, name)
    if isinstance(target, Invocation):
        return target
    if not isinstance(arguments, dict):
        return Invocation.failed(
            f"invalid arguments for {name}: arguments must be a JSON object", outcome=target.invalid_input
        )
    try:  # off the loop, within the validation budgets: a tenant's schema decides the cost
        problem = await target.schemas.first_error(target.arguments, arguments)
    except Overloaded as exc:
        return Invocation.failed(f"the arguments for {name} could not be checked: {exc.message}; the call was not sent")
    if problem is not None:
        where = "/".join(str(part) for part in problem.absolute_path)
        return Invocation.failed(
            detail(f"invalid arguments for {name}{' at ' + where if where else ''}: {problem.message}"),
            outcome=target.invalid_input,
        )
    wait = target.approval_timeout_seconds if target.require_approval else None
    if wait is None and approvals is not None:
        try:
            wait = await approvals.timeout_for(
                tenant=context.tenant, name=name, kind=target.kind, provider=target.provider
            )
        except RulesUnavailable as exc:
            return Invocation.failed(detail(f"the approval rules could not be read ({exc}); the call was not sent"))
    if wait is not None:
        if context.approval is None:
            return Invocation.failed(f"tool {name!r} requires approval, which this call cannot ask for")
        refused = await context.approval(name, arguments, timeout_seconds=wait)
        if refused is not None:
            return refused
    return await target.dispatch(context, arguments)
