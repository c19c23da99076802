"""Admin for tool bindings, memories and tasks (the knowledge bases' is
providers/knowledge/admin.py, registered from here). Config-declared bindings are mirrored
read-only; admin-created ones are validated exactly like the host config and serve new sessions
as soon as they are saved."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from pydantic import ValidationError

from foundation.hostconfig import ToolBindingConfig
from foundation.rest_templates import METHODS

from .app_object import ToolsAppObject
from .approval_rules import admin as approval_rules_admin  # registers the approval rules' admin
from .db import declared_token_origins
from .listing import MAX_LISTED_NAME, MAX_LISTED_TEXT, cut
from .models import Memory, Task, ToolBinding
from .origins import url_origin
from .provider_tools import bind_provider_tool
from .providers.base import ToolProvider
from .providers.knowledge import admin as knowledge_admin  # registers the knowledge bases' admin
from .reloading.admin import ReloadOnChange

__all__ = ["ToolBindingAdmin", "ToolBindingForm", "approval_rules_admin", "knowledge_admin"]

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


APPROVAL_TIMEOUT_DEFAULT = ToolBindingConfig.model_fields["approval_timeout_seconds"].default
TRANSPORT_CHOICES = (
    ("http", "http: a tool service (JSON or SSE)"),
    ("mcp", "mcp: an MCP server (Streamable HTTP)"),
    ("rest", "rest: a plain REST API"),
    ("provider", "provider: an installed tool provider"),
)
METHOD_CHOICES = tuple((method, method) for method in METHODS)
# The fields each transport takes beside the common ones (name, description, schemas, tenants,
# limits, approval); the form shows only these (templates/admin/tools_app/toolbinding/change_form.html).
TRANSPORT_FIELDS = {
    "http": ("url", "token_env", "inspect_session"),
    "mcp": ("url", "token_env", "mcp_tool"),
    "rest": ("method", "url", "query", "headers", "body", "token_env"),
    "provider": ("provider", "operation", "parameters"),
}
JSON_PLACEHOLDERS = {
    "input_schema": '{"type": "object", "properties": {"text": {"type": "string"}}}',
    "output_schema": "optional: a JSON Schema the results must match",
    "tenants": '["acme"]',
    "query": '{"page": "{{page}}"}',
    "headers": '{"X-Request-Source": "brain"}',
    "body": '{"quantity": "{{quantity}}"}',
    "parameters": '{"space": "support"}',
}


class OptionalJSONField(forms.JSONField):
    """A JSON field that shows an empty box, not `null`, when it has no value (empty is None)."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


class _ServingBrain(Protocol):
    """What the binding form reads of the answering server's application object."""

    @property
    def providers(self) -> Mapping[str, ToolProvider]: ...


class ToolBindingForm(forms.ModelForm[ToolBinding]):
    # Tool URLs are written out in full (startup rejects a missing scheme); no scheme is assumed.
    url = forms.URLField(
        label="URL", max_length=2048, assume_scheme="https", required=False
    )  # provider tools have none
    # only tools that require approval use it; left out, it is the host config's default
    approval_timeout_seconds = forms.IntegerField(min_value=1, required=False, initial=APPROVAL_TIMEOUT_DEFAULT)
    brain: _ServingBrain | None = None  # the application object of the server answering (ToolBindingAdmin.get_form)

    class Meta:
        model = ToolBinding
        fields = _FORM_FIELDS
        field_classes = {name: OptionalJSONField for name in JSON_PLACEHOLDERS}
        widgets: ClassVar[dict[str, forms.Widget]] = {
            # validated as the host config's (an unknown one names the field), chosen from a list here
            "transport": forms.Select(choices=TRANSPORT_CHOICES),
            "method": forms.Select(choices=METHOD_CHOICES),
            **{
                name: forms.Textarea(attrs={"rows": 4, "cols": 60, "placeholder": placeholder})
                for name, placeholder in JSON_PLACEHOLDERS.items()
            },
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a row saved without a transport shows the one it has (mcp when it names an MCP tool)
        binding = self.instance
        self.initial["transport"] = binding.transport or ("mcp" if binding.mcp_tool else "http")
        self.initial["method"] = binding.method or "GET"

    def clean(self) -> dict[str, object]:
        data: dict[str, object] = super().clean() or {}
        if data.get("approval_timeout_seconds") is None:
            data["approval_timeout_seconds"] = APPROVAL_TIMEOUT_DEFAULT
        if self.errors:
            return data
        candidate: dict[str, object] = {key: data[key] for key in _FORM_FIELDS if data.get(key) not in (None, "")}
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
        token_env = str(data.get("token_env") or "")
        declared = declared_token_origins() if token_env else {}
        if token_env and token_env not in declared:
            # one answer whether or not the variable exists: the form reveals nothing of the environment
            self.add_error("token_env", "must be a tool token variable the host config declares")
        elif token_env and url_origin(str(data.get("url") or "")) not in declared[token_env]:
            # the operator's secret goes only where the host config sends it
            self.add_error("token_env", f"{token_env} may only be sent to the origins of the config tools declaring it")
        elif token_env and not os.environ.get(token_env):
            self.add_error("token_env", f"environment variable {token_env} is not set for this server")
        return data

    def _bind_provider(self, candidate: dict[str, object], data: dict[str, object]) -> None:
        """A provider-backed binding is bound as at startup, by the server's installed providers;
        the descriptor it gets fills the description and schemas the operator left empty."""
        providers = self.brain.providers if self.brain is not None else {}
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
        return cut(obj.content, MAX_LISTED_TEXT)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Memory | None = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin[Task]):
    list_display = ("id", "tenant", "short_title", "status", "parent", "updated_at")

    @admin.display(description="title", ordering="title")
    def short_title(self, obj: Task) -> str:
        return cut(obj.title, MAX_LISTED_TEXT)

    list_filter = ("tenant", "status")
    search_fields = ("title", "description")
    ordering = ("-id",)
    readonly_fields = ("tenant", "parent", "session_id", "created_at", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


BINDING_FIELDS = (
    "name", "transport", "description", "tenants", "input_schema", "output_schema",
    "url", "method", "token_env", "mcp_tool", "inspect_session", "query", "headers", "body",
    "provider", "operation", "parameters",
    "timeout_seconds", "max_output_bytes", "require_approval", "approval_timeout_seconds",
)  # fmt: skip
COMMON_FIELDS = (
    "name",
    "transport",
    "description",
    "tenants",
    "input_schema",
    "output_schema",
    "timeout_seconds",
    "max_output_bytes",
    "require_approval",
    "approval_timeout_seconds",
)


@admin.register(ToolBinding)
class ToolBindingAdmin(ReloadOnChange):
    """Bindings of the host config are shown read-only with a note saying so; the add and change
    form shows the fields of the chosen transport only (its template toggles them)."""

    form = ToolBindingForm
    fields = BINDING_FIELDS
    list_display = ("name", "shown_transport", "target", "timeout_seconds", "source")
    search_fields = ("name",)
    change_form_template = "admin/tools_app/toolbinding/change_form.html"

    @admin.display(description="transport", ordering="transport")
    def shown_transport(self, obj: ToolBinding) -> str:
        return _transport_of(obj)

    @admin.display(description="calls")
    def target(self, obj: ToolBinding) -> str:
        if _transport_of(obj) == "provider":
            return f"{obj.provider}: {obj.operation}"
        return cut(obj.url, MAX_LISTED_NAME)

    @admin.display(description="source", ordering="from_config")
    def source(self, obj: ToolBinding) -> str:
        return "host config" if obj.from_config else "admin"

    def get_fields(self, request: HttpRequest, obj: ToolBinding | None = None) -> Any:  # the stubs' union
        if obj is None or not obj.from_config:
            return BINDING_FIELDS  # every field: the template shows the chosen transport's
        shown = set(COMMON_FIELDS) | set(TRANSPORT_FIELDS[_transport_of(obj)])
        return tuple(field for field in BINDING_FIELDS if field in shown)

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        context["transport_fields"] = {key: list(fields) for key, fields in TRANSPORT_FIELDS.items()}
        return super().render_change_form(request, context, *args, **kwargs)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        entry = actions.get("delete_selected")
        if entry is not None:
            _, name, description = entry
            actions["delete_selected"] = (_delete_admin_bindings, name, description)
        return actions

    def has_change_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

    def has_delete_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

    def get_form(
        self, request: HttpRequest, obj: ToolBinding | None = None, change: bool = False, **kwargs: object
    ) -> type[forms.ModelForm[ToolBinding]]:
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = getattr(request, "scope", None)
        # its installed providers; ToolBindingForm declares the attribute get_form's subclass sets
        form.brain = scope.get("brain") if isinstance(scope, dict) else None  # type: ignore[attr-defined]
        return form

    def forget(self, brain: ToolsAppObject) -> None:
        """A binding changed: this process's registry reloads admin bindings on next use (other
        processes' caches expire within 30 s)."""
        brain.registry.forget_bindings()


def _transport_of(binding: ToolBinding) -> str:
    return binding.transport or ("mcp" if binding.mcp_tool else "http")


def _delete_admin_bindings(modeladmin: ToolBindingAdmin, request: HttpRequest, queryset: Any) -> Any:
    """Django's delete action for the admin's own bindings; those of the host config are left as
    they are, with a note saying where they come from (not a permission error)."""
    from django.contrib.admin.actions import delete_selected

    configured = sorted(queryset.filter(from_config=True).values_list("name", flat=True))
    if configured:
        names = ", ".join(f"“{name}”" for name in configured)
        modeladmin.message_user(
            request,
            f"{names}: from the host config, not deleted; change the config's `tools` and restart Brain",
            level=messages.WARNING,
        )
    remaining = queryset.exclude(from_config=True)
    if not remaining.exists():
        return None
    return delete_selected(modeladmin, request, remaining)
