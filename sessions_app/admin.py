"""Admin: tenants, API tokens (created here: shown once, stored as SHA-256), and sessions (read-only,
with their transcripts; interrupted and closed through sessions_app.operations)."""

from __future__ import annotations

import functools
import secrets
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from fleet_app import db as fleet_db
from fleet_app.admin import in_fleet
from fleet_app.models import SessionLease
from foundation.app_object import SCOPE_KEY
from foundation.errors import BrainError, CursorUnavailable
from foundation.session_ids import SESSION_ID

from . import db
from .auth import tokens_of
from .console.admin import (
    CONTROLS,
    ApprovalAdmin,
    Control,
    live_sessions,
    on_server_loop,
    pending_approvals,
    request_brain,
)
from .eventlog import decode_cursor
from .models import ApiToken, Approval, Session, Tenant, TokenSource
from .records import Principal, SessionRecord, SessionStatus
from .runtime.approvals import MAX_REASON_CHARS
from .storage import SessionFiles, SessionStorage
from .transcript import measure_session, read_transcript

__all__ = ["ApiTokenAdmin", "ApprovalAdmin", "SessionAdmin", "TenantAdmin", "on_server_loop"]

ISSUED_TOKEN_TEMPLATE = "admin/sessions_app/apitoken/issued_token.html"
LIVE_TEMPLATE = "admin/sessions_app/session/live_sessions.html"
CONTROL_TEMPLATE = "admin/sessions_app/session/control_confirmation.html"
RAW_PAGE_EVENTS = 100  # events per raw JSON page (the API's default page)
MAX_LISTED_CHILDREN = 50  # sub-agent sessions linked on a session's page
RAW_PAGE_BYTES = 8 << 20  # a raw page stops at the first event past this many log bytes (records reach 4 MiB)
# The request that created a token carries its value to the response, and nowhere else.
ISSUED_TOKEN_ATTRIBUTE = "brain_issued_token"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ("name", "created_at")
    search_fields = ("name",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ("__str__", "tenant", "manage", "read_only", "session", "source", "created_at")
    list_filter = ("source", "manage", "read_only")
    fields = ("tenant", "label", "manage", "read_only", "session", "source", "digest")
    readonly_fields = ("source", "digest")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is not None and obj.source == TokenSource.CONFIG:
            return [field.name for field in ApiToken._meta.fields]  # mirrored from the host config
        return self.readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return obj is None or obj.source != TokenSource.CONFIG

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if obj.source == TokenSource.CONFIG:
            return
        if not change:
            token = secrets.token_hex(32)
            obj.digest = db.digest_token(token)
            obj.source = TokenSource.ADMIN
            setattr(request, ISSUED_TOKEN_ATTRIBUTE, token)
        super().save_model(request, obj, form, change)
        _forget_tokens(request)

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> HttpResponse:
        """The token's only appearance: this response, not a redirect, so the value goes into no
        message, cookie, session or URL; a reload cannot show it again (nothing kept it)."""
        token = getattr(request, ISSUED_TOKEN_ATTRIBUTE, None)
        if token is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "title": "API token created",
            "opts": self.opts,
            "original": obj,
            "token": token,
        }
        response = TemplateResponse(request, ISSUED_TOKEN_TEMPLATE, context)
        add_never_cache_headers(response)  # Cache-Control: no-store, so Back does not show it again
        return response

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        super().delete_model(request, obj)
        _forget_tokens(request)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        super().delete_queryset(request, queryset.exclude(source=TokenSource.CONFIG))
        _forget_tokens(request)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin[Session]):
    """Sessions, read-only: what a session is, its files, and its transcript from the event log.
    Interrupting and closing go through the runtime's own use-cases (sessions_app.operations), as the
    API's interrupt and close do, after a confirmation page."""

    list_display = ("id", "tenant", "status", "harness", "model", "created_at", "updated_at")
    list_filter = ("status", "tenant", "harness")
    search_fields = ("^id",)
    search_help_text = "A session ID, or its first characters."
    ordering = ("-created_at",)
    fieldsets = (
        (None, {"fields": ("id", "tenant", "status", "harness", "model", "created_at", "updated_at")}),
        ("Tools", {"fields": ("tool_names", "configured_tools")}),
        ("Checkpoint", {"fields": ("checkpoint_id", "checkpoint_offset", "checkpoint_time")}),
        ("Sub-agents", {"fields": ("parent_link", "parent_call", "depth", "children")}),
        ("Configuration", {"classes": ("collapse",), "fields": ("instructions", "config_json")}),
    )
    readonly_fields = ("tool_names", "configured_tools", "parent_link", "children", "instructions", "config_json")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # sessions are created through the API, which owns their files

    def has_change_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        return False

    def has_control_permission(self, request: HttpRequest) -> bool:
        """Interrupting and closing: Django's change permission on sessions (superusers have it)."""
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    # -- what the pages show -----------------------------------------------------------------

    @admin.display(description="tools")
    def tool_names(self, obj: Session) -> str:
        names = [str(item.get("name", "")) for item in obj.descriptors if isinstance(item, dict)]
        return ", ".join(names) or "-"

    @admin.display(description="config.tools")
    def configured_tools(self, obj: Session) -> str:
        return ", ".join(str(name) for name in obj.config.get("tools", ())) or "-"

    @admin.display(description="parent session")
    def parent_link(self, obj: Session) -> SafeString | str:
        if not obj.parent_session:
            return "-"
        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.parent_session])
        return format_html('<a href="{}">{}</a>', url, obj.parent_session)

    @admin.display(description="sub-agent sessions")
    def children(self, obj: Session) -> SafeString | str:
        ids = list(
            Session.objects.filter(parent_session=obj.id)
            .order_by("created_at")
            .values_list("id", flat=True)[:MAX_LISTED_CHILDREN]
        )
        if not ids:
            return "-"
        name = f"admin:{self.opts.app_label}_{self.opts.model_name}_change"
        return format_html_join(", ", '<a href="{}">{}</a>', ((reverse(name, args=[child]), child) for child in ids))

    @admin.display(description="instructions")
    def instructions(self, obj: Session) -> str:
        return str(obj.config.get("instructions") or "-")

    @admin.display(description="config")
    def config_json(self, obj: Session) -> SafeString:
        return format_html("<pre>{}</pre>", orjson.dumps(obj.config, option=orjson.OPT_INDENT_2).decode())

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Session | None = None,
    ) -> HttpResponse:
        if obj is not None:
            live = _live_record(request, obj.id)
            if live is not None:
                obj.status = live.status  # shown only: the database hears of statuses write-behind
            context.update(self._session_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _session_context(self, request: HttpRequest, obj: Session) -> dict[str, Any]:
        files = _session_files(request, obj.id)
        context: dict[str, Any] = {
            "sizes": measure_session(files.directory, checkpoint_offset=obj.checkpoint_offset),
            "can_control": self.has_control_permission(request) and obj.status != SessionStatus.CLOSED,
            "transcript": None,
            "transcript_error": "",
            "fleet": _fleet_lease(request, obj.id),
            "pending_approvals": pending_approvals(obj.id),
            "can_decide": self.admin_site.is_registered(Approval)
            and request.user.has_perm("sessions_app.change_approval"),
            "max_reason_chars": MAX_REASON_CHARS,
        }
        before, after = request.GET.get("before", ""), request.GET.get("after", "")
        context["live_after"] = None  # the newest page streams what follows its last event
        try:
            page = context["transcript"] = read_transcript(files.event_log, before=before, after=after)
            if not page.newer:
                context["live_after"] = page.entries[-1].cursor if page.entries else after
        except FileNotFoundError:
            context["transcript_error"] = "This server has no event log for the session."
        except CursorUnavailable:
            context["transcript_error"] = "That position is not in this session's event log."
            context["transcript"] = read_transcript(files.event_log)
        return context

    # -- raw JSON ------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("live/", wrap(self.live_view), name=f"{name}_live"),
            path("<str:object_id>/json/", wrap(self.session_json_view), name=f"{name}_json"),
            path("<str:object_id>/events/", wrap(self.events_json_view), name=f"{name}_events"),
            path("<str:object_id>/interrupt/", wrap(self.interrupt_view), name=f"{name}_interrupt"),
            path("<str:object_id>/stream/", wrap(self.stream_view), name=f"{name}_stream"),
            path("<str:object_id>/approvals/<str:approval_id>/decide/", wrap(self.decide_view), name=f"{name}_decide"),
            path("<str:object_id>/resume/", wrap(self.resume_view), name=f"{name}_resume"),
            path("<str:object_id>/close/", wrap(self.close_view), name=f"{name}_close"),
            *super().get_urls(),
        ]

    def live_view(self, request: HttpRequest) -> HttpResponse:
        """The sessions live right now (sessions_app.admin_live), with status, owner and age."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        sessions, more = live_sessions(request)
        context = {
            **self.admin_site.each_context(request),
            "title": "Live sessions",
            "opts": self.opts,
            "sessions": sessions,
            "more": more,
            "fleet": in_fleet(request),
        }
        return TemplateResponse(request, LIVE_TEMPLATE, context)

    def _viewable(self, request: HttpRequest, object_id: str) -> Session:
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404("session not found")
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        return obj

    def session_json_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The session as the API shows it (GET /sessions/{id}), live status included."""
        obj = self._viewable(request, object_id)
        record = _live_record(request, obj.id) or db.get_session_by_id(obj.id)
        if record is None:
            raise Http404("session not found")
        return _json_response(record.as_wire())

    def events_json_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A page of events as the API shows it (GET /sessions/{id}/events): `after` a cursor,
        or only the event `at` a cursor; up to RAW_PAGE_EVENTS (`limit`) events, fewer past
        RAW_PAGE_BYTES."""
        obj = self._viewable(request, object_id)
        log = _session_files(request, obj.id).open_log(max_bytes=0)
        at, after = request.GET.get("at", ""), request.GET.get("after", "")
        raw_limit = request.GET.get("limit", "")
        limit = int(raw_limit) if raw_limit.isdigit() and 1 <= int(raw_limit) <= RAW_PAGE_EVENTS else RAW_PAGE_EVENTS
        try:
            if at:
                offset, event_id = decode_cursor(at)
                if not log.starts_event(offset, event_id):
                    raise CursorUnavailable("cursor is not in this session's retained history")
                events = log.read(offset, limit=1)
            else:
                start = log.position_after(after)
                events = log.read(start, end=min(log.size, start + RAW_PAGE_BYTES), limit=limit)
        except CursorUnavailable as exc:
            return _json_response({"error": {"code": exc.code, "message": exc.message}}, status=exc.status)
        except FileNotFoundError:
            events = []
        body = b'{"events":[' + b",".join(event.wire() for event in events) + b'],"next_cursor":'
        next_cursor = events[-1].cursor if events else after
        return HttpResponse(body + orjson.dumps(next_cursor) + b"}", content_type="application/json")

    def stream_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The live transcript's URL: brainsite.asgi hands a GET of it to the SSE consumer
        (sessions_app.console_stream) before Django; anything else reaching here is refused."""
        self._viewable(request, object_id)
        return HttpResponseNotAllowed(["GET"])

    def decide_view(self, request: HttpRequest, object_id: str, approval_id: str) -> HttpResponse:
        """A pending approval of the session decided from its page: under the session's URL, so a
        fleet forwards it to the session's owner (fleet_app.decision.CONSOLE_PATH)."""
        approvals = self.admin_site.get_model_admin(Approval)
        assert isinstance(approvals, ApprovalAdmin)
        return approvals.decide_view(request, approval_id, session_id=unquote(object_id))

    # -- interrupt, resume and close -------------------------------------------------------------------

    def interrupt_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._control_view(request, object_id, CONTROLS["interrupt"])

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._control_view(request, object_id, CONTROLS["resume"])

    def close_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._control_view(request, object_id, CONTROLS["close"])

    def _control_view(self, request: HttpRequest, object_id: str, control: Control) -> HttpResponse:
        """GET: the confirmation page. POST (the confirmation): ask the runtime, then back to the
        session's page with the outcome as a message."""
        obj = self._viewable(request, object_id)
        if not self.has_control_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            context = {
                **self.admin_site.each_context(request),
                "title": f"{control.title} session",
                "opts": self.opts,
                "control": control,
                "session": obj,
                "status": (_live_record(request, obj.id) or obj).status,
            }
            return TemplateResponse(request, CONTROL_TEMPLATE, context)
        self._control(request, obj, control)
        change_url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk])
        return HttpResponseRedirect(change_url)

    def _control(self, request: HttpRequest, obj: Session, control: Control) -> None:
        brain = request_brain(request)
        if brain is None:
            self.message_user(request, "The session runtime is not reachable from this request.", messages.ERROR)
            return
        principal = Principal(tenant=obj.tenant_id, manage=True)  # as the API's route, with the session's tenant
        try:
            on_server_loop(functools.partial(control.operation, brain.engine, principal, obj.id))
        except BrainError as exc:
            self.message_user(request, f"{control.title} refused: {exc.message}", messages.ERROR)
            return
        self.log_change(request, obj, control.logged)
        self.message_user(request, f"{control.requested}.", messages.SUCCESS)


def _live_record(request: HttpRequest, session_id: str) -> SessionRecord | None:
    """The record of a session loaded on this server, with its live status. A dict lookup and an
    attribute read, each atomic under the GIL: safe from the admin's worker thread."""
    brain = request_brain(request)
    return brain.engine.loaded_record(session_id) if brain is not None else None


def _fleet_lease(request: HttpRequest, session_id: str) -> dict[str, Any] | None:
    """In a fleet (a `cluster` block): the session's live owner (None without one) and its
    lease row (None when never leased). None without a `cluster` block."""
    if not in_fleet(request):
        return None
    lease = SessionLease.objects.filter(session_id=session_id).first()
    return {"owner": fleet_db.owner_of(session_id), "lease": lease}


def _session_files(request: HttpRequest, session_id: str) -> SessionFiles:
    brain = request_brain(request)
    if not SESSION_ID.fullmatch(session_id):  # ids come from the database; a path never takes anything else
        raise Http404("session not found")
    if brain is not None:
        return brain.engine.storage.files(session_id)
    return SessionStorage(Path(settings.DATA_DIR)).files(session_id)


def _json_response(value: Any, *, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(value, option=orjson.OPT_INDENT_2), status=status, content_type="application/json")


def _forget_tokens(request: HttpRequest) -> None:
    """A token changed: this process's token cache drops its grants at once (other processes'
    caches expire within 30 s)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and SCOPE_KEY in scope:
        tokens_of(scope).forget()
