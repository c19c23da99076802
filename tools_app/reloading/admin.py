"""Admin pages whose rows a running process caches: every save or delete tells this process to
reload them on next use (other processes' caches expire on their own clock)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from foundation.app_object import SCOPE_KEY

from ..app_object import ToolsAppObject, brain_of

__all__ = ["ReloadOnChange"]


class ReloadOnChange(admin.ModelAdmin[Any]):  # any model: django.db is models.py's
    """A ModelAdmin that calls `forget(brain)` after each save and delete made through it."""

    def forget(self, brain: ToolsAppObject) -> None:
        raise NotImplementedError

    def save_model(self, request: HttpRequest, obj: Any, form: forms.ModelForm[Any], change: bool) -> None:
        super().save_model(request, obj, form, change)
        self._changed(request)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        super().delete_model(request, obj)
        self._changed(request)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:  # a QuerySet: django.db is db.py's
        super().delete_queryset(request, queryset)
        self._changed(request)

    def _changed(self, request: HttpRequest) -> None:
        scope = getattr(request, "scope", None)
        if isinstance(scope, dict) and SCOPE_KEY in scope:
            self.forget(brain_of(scope))
