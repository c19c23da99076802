"""Admin for approval rules: calls of any kind of tool (config tools, session provider bindings,
runtime executor tools) that match a rule wait for a person's decision. A rule is validated as
the host config's `approvals` entries are, and holds for new calls as soon as it is saved (other
processes within 30 s)."""

from __future__ import annotations

from typing import ClassVar

from django import forms
from django.contrib import admin
from pydantic import ValidationError

from foundation.hostconfig import APPROVAL_KINDS
from foundation.hostconfig import ApprovalRule as ApprovalRuleConfig

from ..app_object import ToolsAppObject
from ..models import ApprovalRule
from ..reloading.admin import ReloadOnChange

__all__ = ["ApprovalRuleAdmin", "ApprovalRuleForm"]

RULE_FIELDS = ("tools", "kinds", "providers", "tenants", "approval_timeout_seconds")
APPROVAL_TIMEOUT_DEFAULT = ApprovalRuleConfig.model_fields["approval_timeout_seconds"].default


class ApprovalRuleForm(forms.ModelForm[ApprovalRule]):
    kinds = forms.MultipleChoiceField(
        choices=[(kind, kind) for kind in APPROVAL_KINDS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none checked: every kind",
    )
    providers = forms.JSONField(required=False, help_text='installed providers, e.g. ["records"]; empty: any tool')
    tenants = forms.JSONField(required=False, help_text='tenant IDs, e.g. ["acme"]; empty: every tenant')

    class Meta:
        model = ApprovalRule
        fields = RULE_FIELDS
        widgets: ClassVar[dict[str, forms.Widget]] = {
            "tools": forms.Textarea(attrs={"rows": 2, "cols": 60, "placeholder": '["runtime_*", "*_delete"]'}),
        }

    def clean(self) -> dict[str, object]:
        data: dict[str, object] = super().clean() or {}
        if self.errors:
            return data
        candidate = {key: data[key] for key in RULE_FIELDS if data.get(key) not in (None, "", [])}
        try:
            ApprovalRuleConfig.model_validate(candidate)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = next((str(part) for part in first["loc"] if part in RULE_FIELDS), None)
            message = first["msg"].removeprefix("Value error, ")
            self.add_error(field, "unknown field" if first["type"] == "extra_forbidden" else message)
        return data


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(ReloadOnChange):
    """The admin's rules, matched after the host config's `approvals` (which are not listed)."""

    form = ApprovalRuleForm
    fields = RULE_FIELDS
    list_display = ("id", "patterns", "shown_kinds", "shown_providers", "shown_tenants", "approval_timeout_seconds")

    @admin.display(description="tools")
    def patterns(self, obj: ApprovalRule) -> str:
        return ", ".join(map(str, obj.tools or ["*"]))

    @admin.display(description="kinds")
    def shown_kinds(self, obj: ApprovalRule) -> str:
        return ", ".join(map(str, obj.kinds or APPROVAL_KINDS))

    @admin.display(description="providers")
    def shown_providers(self, obj: ApprovalRule) -> str:
        return ", ".join(map(str, obj.providers or ["any"]))

    @admin.display(description="tenants")
    def shown_tenants(self, obj: ApprovalRule) -> str:
        return ", ".join(map(str, obj.tenants or ["every tenant"]))

    def forget(self, brain: ToolsAppObject) -> None:
        """A rule changed: this process reloads the admin's rules on its next call."""
        brain.tool_path.approvals.forget_rules()
