"""Admin for tool bindings. Config-declared bindings are mirrored read-only; admin-created ones
are validated exactly like the host config and serve new sessions as soon as they are saved."""

from __future__ import annotations

import os
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from pydantic import ValidationError

from brainsite.hostconfig import ToolBindingConfig

from .db import declared_token_envs
from .models import ToolBinding
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
)


class ToolBindingForm(forms.ModelForm[ToolBinding]):
    # Tool URLs are written out in full (startup rejects a missing scheme); no scheme is assumed.
    url = forms.URLField(max_length=2048, assume_scheme="https")

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
        token_env = data.get("token_env")
        if token_env and token_env not in declared_token_envs():
            # one answer whether or not the variable exists: the form reveals nothing of the environment
            self.add_error("token_env", "must be a tool token variable the host config declares")
        elif token_env and not os.environ.get(token_env):
            self.add_error("token_env", f"environment variable {token_env} is not set for this server")
        return data


@admin.register(ToolBinding)
class ToolBindingAdmin(admin.ModelAdmin[ToolBinding]):
    form = ToolBindingForm
    list_display = ("name", "transport", "url", "timeout_seconds", "from_config")
    search_fields = ("name",)

    def has_change_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

    def has_delete_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

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
