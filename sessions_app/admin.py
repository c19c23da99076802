"""Admin: tenants, API tokens (created here: shown once, stored as SHA-256), and sessions."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

from . import db
from .auth import tokens_of
from .models import ApiToken, Session, Tenant, TokenSource

ISSUED_TOKEN_TEMPLATE = "admin/sessions_app/apitoken/issued_token.html"
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
    list_display = ("id", "tenant", "status", "harness", "model", "created_at", "updated_at")
    list_filter = ("status", "harness", "tenant")
    search_fields = ("id", "model")
    ordering = ("-created_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # sessions are created through the API, which owns their files

    def has_change_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        return False


def _forget_tokens(request: HttpRequest) -> None:
    """A token changed: this process's token cache drops its grants at once (other processes'
    caches expire within 30 s)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and "brain" in scope:
        tokens_of(scope).forget()
