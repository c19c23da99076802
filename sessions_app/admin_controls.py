"""What the admin asks of the runtime: interrupting, resuming and closing a session, deciding a
pending approval. Each goes through sessions_app.operations, as the API's route does, run on the
server's event loop from the admin view's worker thread; an operator decides as themselves (their
user name is the decision's `decided_by`), never as a token."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.http import HttpRequest

from foundation.app_object import SCOPE_KEY
from foundation.errors import Unavailable

from . import operations
from .app_object import SessionsAppObject, brain_of
from .records import ApprovalRecord, Principal
from .runtime.engine import Engine

__all__ = ["CONTROLS", "Control", "decide_approval", "on_server_loop", "operator_name", "request_brain"]

T = TypeVar("T")

# Django's own limit on user names (AbstractUser.username), so a decision's `decided_by` stays short.
MAX_OPERATOR_CHARS = 150


@dataclass(frozen=True, slots=True)
class Control:
    """An admin action on sessions that the runtime carries out, as the API's route would."""

    name: str
    title: str  # the verb on buttons and the confirmation page
    operation: Callable[[Engine, Principal, str], Coroutine[Any, Any, object]]
    explanation: str
    requested: str  # the message once it was asked of the runtime
    logged: str  # the admin history's entry


CONTROLS = {
    "interrupt": Control(
        name="interrupt",
        title="Interrupt",
        operation=operations.interrupt_session,
        explanation="A running turn stops and the session becomes interrupted; it waits for a resume. "
        "A session without a running turn is left as it is.",
        requested="Interrupt requested: a running turn stops",
        logged="Interrupted in the admin.",
    ),
    "resume": Control(
        name="resume",
        title="Resume",
        operation=operations.resume_session,
        explanation="An interrupted session runs its queued input again, as the API's resume does.",
        requested="Resume requested: the session runs its queued input",
        logged="Resumed in the admin.",
    ),
    "close": Control(
        name="close",
        title="Close",
        operation=operations.close_session,
        explanation="A closed session accepts no more input, its streams end and its executor tokens "
        "are revoked; a running turn stops first. Its history stays readable. This cannot be undone.",
        requested="Close requested: the session closes as soon as no turn runs",
        logged="Closed in the admin.",
    ),
}


def operator_name(request: HttpRequest) -> str:
    """Who decides from the admin: the logged-in user's name."""
    return str(request.user.get_username())[:MAX_OPERATOR_CHARS]


def decide_approval(
    request: HttpRequest, *, tenant: str, session_id: str, approval_id: str, approve: bool, reason: str
) -> ApprovalRecord:
    """Decide a pending approval as the logged-in operator. BrainError as the API's route answers
    (404 unknown, 409 settled, 400 a reason too long); Unavailable outside a running server."""
    brain = request_brain(request)
    if brain is None:
        raise Unavailable("the session runtime is not reachable from this request")
    principal = Principal(tenant=tenant, manage=True, label=operator_name(request))
    decision = "approve" if approve else "reject"
    return on_server_loop(
        functools.partial(
            operations.decide_approval,
            brain.engine,
            principal,
            session_id,
            approval_id,
            decision=decision,
            reason=reason,
        )
    )


def on_server_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on the server's event loop, where the runtime lives, from an admin view's
    worker thread, and wait for its result.

    The coroutine runs as a task in a fresh context: the view's context would send the database
    calls of the coroutine, and of every task it starts (a turn, a status write), back to this
    worker thread, which is gone once the response is sent. In a fresh one they go where the API's
    go.
    """

    async def detached() -> T:
        return await asyncio.get_running_loop().create_task(make(), context=contextvars.Context())

    return async_to_sync(detached)()


def request_brain(request: HttpRequest) -> SessionsAppObject | None:
    """The application object of the server answering the request; None outside one (a WSGI
    test client)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and SCOPE_KEY in scope:
        return brain_of(scope)
    return None
