"""Admin of approvals: who decided which call, when and why; a pending one is decided here, by
the logged-in operator (approve, or reject with a reason), from its own page or its session's."""

from __future__ import annotations

from typing import Any

import orjson
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from foundation.errors import BrainError

from .admin_controls import decide_approval
from .models import Approval
from .records import ApprovalStatus
from .runtime.approvals import MAX_REASON_CHARS

__all__ = ["MAX_PENDING_SHOWN", "ApprovalAdmin", "pending_approvals"]

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

    @admin.display(description="approval id", ordering="id")
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

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST decision=approve|reject, reason: decide as the operator, then back to the page the
        form was on (`back=session`: the session's) with the outcome as a message."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
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
