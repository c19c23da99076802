"""Admin for tool bindings. Config-declared bindings are mirrored read-only; admin-created ones
are validated exactly like the host config and serve new sessions as soon as they are saved."""

from __future__ import annotations

import os
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin
from django.http import HttpRequest
from pydantic import ValidationError

from brainsite.hostconfig import ToolBindingConfig

from .db import declared_token_envs
from .models import Memory, Task, ToolBinding
from .provider_tools import bind_provider_tool
from .registry import registry_of

# The config fields an admin edits; form errors name the same fields as startup errors.
_FORM_FIELDS = (
    "name",
    "description",
    "input_schema",
    "output_schema",
    "url",
    "tenants",
    "token_env",
    "transport",
    "mcp_tool",
    "timeout_seconds",
    "max_output_bytes",
    "inspect_session",
    "method",
    "query",
    "headers",
    "body",
    "require_approval",
    "approval_timeout_seconds",
    "provider",
    "operation",
    "parameters",
)


class ToolBindingForm(forms.ModelForm[ToolBinding]):
    # Tool URLs are written out in full (startup rejects a missing scheme); no scheme is assumed.
    url = forms.URLField(max_length=2048, assume_scheme="https", required=False)  # provider tools have none
    brain: Any = None  # the application object of the server answering (ToolBindingAdmin.get_form)

    class Meta:
        model = ToolBinding
        fields = _FORM_FIELDS

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        candidate: dict[str, Any] = {key: data[key] for key in _FORM_FIELDS if data.get(key) not in (None, "")}
        candidate.setdefault("inspect_session", False)
        try:
            ToolBindingConfig.model_validate(candidate)
        except ValidationError as exc:
            first = exc.errors()[0]
            problem = first.get("ctx", {}).get("error")
            field = getattr(problem, "field", None) or next((str(p) for p in first["loc"] if p in _FORM_FIELDS), None)
            message = str(problem) if problem is not None else first["msg"]
            if first["type"] == "extra_forbidden":
                message = "unknown field"
            self.add_error(field if field in _FORM_FIELDS else None, message)
            return data
        if candidate.get("transport") == "provider":
            self._bind_provider(candidate, data)
            return data
        token_env = data.get("token_env")
        if token_env and token_env not in declared_token_envs():
            # one answer whether or not the variable exists: the form reveals nothing of the environment
            self.add_error("token_env", "must be a tool token variable the host config declares")
        elif token_env and not os.environ.get(token_env):
            self.add_error("token_env", f"environment variable {token_env} is not set for this server")
        return data

    def _bind_provider(self, candidate: dict[str, Any], data: dict[str, Any]) -> None:
        """A provider-backed binding is bound as at startup, by the server's installed providers;
        the descriptor it gets fills the description and schemas the operator left empty."""
        brain = getattr(self, "brain", None)
        providers = brain.providers if brain is not None else {}
        try:
            bound = async_to_sync(bind_provider_tool)(ToolBindingConfig.model_validate(candidate), providers)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            self.add_error(field if field in _FORM_FIELDS else None, message or str(exc))
            return
        data["description"] = bound.description
        data["input_schema"] = bound.input_schema
        data["output_schema"] = bound.output_schema
        for key in ("description", "input_schema", "output_schema"):
            setattr(self.instance, key, data[key])


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin[Memory]):
    """Memories are the agents' to write: the admin lists, reads and deletes them."""

    list_display = ("id", "tenant", "space", "short_content", "created_at")
    list_filter = ("tenant", "space")
    search_fields = ("content",)
    ordering = ("-created_at",)
    readonly_fields = ("tenant", "space", "content", "session_id", "created_at")

    @admin.display(description="content")
    def short_content(self, obj: Memory) -> str:
        return obj.content if len(obj.content) <= 80 else obj.content[:79] + "…"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Memory | None = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin[Task]):
    list_display = ("id", "tenant", "title", "status", "parent", "updated_at")
    list_filter = ("tenant", "status")
    search_fields = ("title", "description")
    ordering = ("-id",)
    readonly_fields = ("tenant", "parent", "session_id", "created_at", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(ToolBinding)
class ToolBindingAdmin(admin.ModelAdmin[ToolBinding]):
    form = ToolBindingForm
    list_display = ("name", "transport", "url", "timeout_seconds", "from_config")
    search_fields = ("name",)

    def has_change_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

    def has_delete_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

    def get_form(
        self, request: HttpRequest, obj: ToolBinding | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = getattr(request, "scope", None)
        # its installed providers; ToolBindingForm declares the attribute get_form's subclass sets
        form.brain = scope.get("brain") if isinstance(scope, dict) else None  # type: ignore[attr-defined]
        return form

    def save_model(self, request: HttpRequest, obj: ToolBinding, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        _forget_bindings(request)

    def delete_model(self, request: HttpRequest, obj: ToolBinding) -> None:
        super().delete_model(request, obj)
        _forget_bindings(request)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        super().delete_queryset(request, queryset)
        _forget_bindings(request)


def _forget_bindings(request: HttpRequest) -> None:
    """A binding changed: this process's registry reloads admin bindings on next use (other
    processes' caches expire within 30 s)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and "brain" in scope:
        registry_of(scope).forget_bindings()
