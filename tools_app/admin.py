"""Admin for tool bindings. Config-declared bindings are mirrored and read-only."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import ToolBinding


@admin.register(ToolBinding)
class ToolBindingAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "transport", "url", "timeout_seconds", "from_config")
    search_fields = ("name",)

    def has_change_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config

    def has_delete_permission(self, request: HttpRequest, obj: ToolBinding | None = None) -> bool:
        return obj is None or not obj.from_config
