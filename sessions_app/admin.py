"""Admin: tenants, API tokens (created here: shown once, stored as SHA-256), and sessions."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from . import db
from .auth import tokens_of
from .models import ApiToken, Session, Tenant, TokenSource


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
            messages.warning(request, f"New API token (shown once, copy it now): {token}")
        super().save_model(request, obj, form, change)
        _forget_tokens(request)

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
