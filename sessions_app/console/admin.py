"""The admin's operator console: what it asks of the runtime (interrupting, resuming and closing
a session, deciding a pending approval, each through sessions_app.operations as the API's route
does, run on the server's event loop from the admin view's worker thread), the approvals' admin
(a pending one decided by the logged-in operator: their user name is its `decided_by`, never a
token's), and the list of live sessions (those loaded somewhere right now, with status, owning
instance and age: in a fleet every session whose lease is held and not expired, statuses from the
database, which hears of them write-behind, except this instance's own, read live; on a single
server the sessions loaded in it)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson
from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from fleet_app.admin import in_fleet
from fleet_app.models import SessionLease
from foundation.app_object import SCOPE_KEY
from foundation.errors import BrainError, Unavailable

from .. import operations
from ..app_object import SessionsAppObject, brain_of
from ..models import Approval, Session
from ..records import ApprovalRecord, ApprovalStatus, Principal
from ..runtime.approvals import MAX_REASON_CHARS
from ..runtime.engine import Engine

__all__ = [
    "CONTROLS",
    "MAX_LIVE_LISTED",
    "ApprovalAdmin",
    "Control",
    "LiveSession",
    "decide_approval",
    "live_sessions",
    "on_server_loop",
    "operator_name",
    "pending_approvals",
    "request_brain",
]


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


MAX_PENDING_SHOWN = 20  # pending approvals listed on a session's page (a turn rarely waits on more)
SHOWN_ARGUMENT_CHARS = 2000  # a call's arguments on the session's page; the approval's page has all


def pending_approvals(session_id: str) -> list[dict[str, str]]:
    """The session's pending approvals as its page lists them: id, tool, arguments (JSON, cut to
    SHOWN_ARGUMENT_CHARS) and expiry."""
    rows = Approval.objects.filter(session_id=session_id, status=ApprovalStatus.PENDING).order_by("created_at")
    return [
        {
            "id": row.id,
            "tool": row.tool,
            "arguments": orjson.dumps(row.arguments).decode()[:SHOWN_ARGUMENT_CHARS],
            "expires_at": row.expires_at.isoformat(),
        }
        for row in rows[:MAX_PENDING_SHOWN]
    ]


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin[Approval]):
    """Approvals of tool calls: read-only rows, decided (while pending) by an operator with the
    change permission on approvals through POST <id>/decide/, as the API's approvals route does."""

    change_form_template = "admin/sessions_app/approval/change_form.html"
    list_display = ("approval_id", "tool", "status", "tenant", "session", "created_at", "decided_by", "decided_at")
    list_filter = ("status", "tenant")
    search_fields = ("^id", "^session__id", "tool")
    ordering = ("-created_at",)
    readonly_fields = (
        "id",
        "session",
        "tenant",
        "call_id",
        "tool",
        "arguments",
        "status",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "reason",
    )

    @admin.display(description="id", ordering="id")
    def approval_id(self, obj: Approval) -> SafeString:
        return format_html('<span class="approval-id">{}</span>', obj.id)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Approval | None = None) -> bool:
        return False  # the row itself never changes in a form; deciding is has_decide_permission

    def has_delete_permission(self, request: HttpRequest, obj: Approval | None = None) -> bool:
        return False

    def has_decide_permission(self, request: HttpRequest) -> bool:
        """Deciding: Django's change permission on approvals (superusers have it)."""
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_decide"
        return [
            path("<str:object_id>/decide/", self.admin_site.admin_view(self.decide_view), name=name),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        can_decide = obj is not None and obj.status == ApprovalStatus.PENDING and self.has_decide_permission(request)
        context = {**(extra_context or {}), "can_decide": can_decide, "max_reason_chars": MAX_REASON_CHARS}
        return super().change_view(request, object_id, form_url, context)

    def decide_view(self, request: HttpRequest, object_id: str, *, session_id: str = "") -> HttpResponse:
        """POST decision=approve|reject, reason: decide as the operator, then back to the page the
        form was on (`back=session`: the session's) with the outcome as a message. `session_id`:
        asked under that session's URL, so an approval of another session is not found."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None or (session_id and obj.session_id != session_id):
            raise Http404("approval not found")
        if not (self.has_view_permission(request, obj) and self.has_decide_permission(request)):
            raise PermissionDenied
        decision = request.POST.get("decision", "")
        reason = request.POST.get("reason", "")
        if decision not in ("approve", "reject"):
            self.message_user(request, "Choose approve or reject.", messages.ERROR)
        elif len(reason) > MAX_REASON_CHARS:
            self.message_user(request, f"The reason exceeds {MAX_REASON_CHARS} characters.", messages.ERROR)
        else:
            self._decide(request, obj, approve=decision == "approve", reason=reason)
        if request.POST.get("back") == "session":
            return HttpResponseRedirect(reverse("admin:sessions_app_session_change", args=[obj.session_id]))
        return HttpResponseRedirect(
            reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk])
        )

    def _decide(self, request: HttpRequest, obj: Approval, *, approve: bool, reason: str) -> None:
        try:
            record = decide_approval(
                request,
                tenant=obj.tenant,
                session_id=obj.session_id,
                approval_id=obj.id,
                approve=approve,
                reason=reason,
            )
        except BrainError as exc:
            self.message_user(request, f"The decision was refused: {exc.message}", messages.ERROR)
            return
        self.log_change(request, obj, f"{record.status.capitalize()} in the admin.")
        self.message_user(request, f"The {obj.tool} call was {record.status}.", messages.SUCCESS)


MAX_LIVE_LISTED = 500  # rows on the page: a page view stays one bounded query whatever the fleet holds
THIS_SERVER = "this server"  # the owner column without a `cluster` block


@dataclass(frozen=True, slots=True)
class LiveSession:
    id: str
    tenant: str
    status: str
    owner: str  # the owning instance's name (THIS_SERVER on a single server)
    created_at: datetime
    age: timedelta


def live_sessions(request: HttpRequest) -> tuple[list[LiveSession], bool]:
    """(the live sessions, newest first, up to MAX_LIVE_LISTED; whether more were left off)."""
    brain = request_brain(request)
    now = datetime.now(UTC)
    if in_fleet(request):
        leases = SessionLease.objects.exclude(owner="").filter(expires_at__gt=now)
        owners = dict(leases.values_list("session_id", "owner")[: MAX_LIVE_LISTED + 1])
    else:
        loaded = list(brain.engine.actors) if brain is not None else []  # a snapshot of the dict's keys
        owners = {session_id: THIS_SERVER for session_id in loaded[: MAX_LIVE_LISTED + 1]}
    rows = Session.objects.filter(id__in=list(owners)[:MAX_LIVE_LISTED]).order_by("-created_at")
    listed = []
    for row in rows.values("id", "tenant_id", "status", "created_at"):
        record = brain.engine.loaded_record(row["id"]) if brain is not None else None
        listed.append(
            LiveSession(
                id=row["id"],
                tenant=row["tenant_id"],
                status=str(record.status if record is not None else row["status"]),
                owner=owners[row["id"]],
                created_at=row["created_at"],
                age=now - row["created_at"],
            )
        )
    return listed, len(owners) > MAX_LIVE_LISTED
