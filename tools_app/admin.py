"""Admin for tool bindings. Config-declared bindings are mirrored read-only; admin-created ones
are validated exactly like the host config and serve new sessions as soon as they are saved."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone
from pydantic import ValidationError

from foundation.app_object import SCOPE_KEY
from foundation.hostconfig import ToolBindingConfig

from .app_object import brain_of
from .db import declared_token_origins
from .ingest.documents import MAX_DOCUMENT_BYTES, KnowledgeError, KnowledgeJobStatus, media_type_of
from .models import Document, KnowledgeBase, KnowledgeJob, Memory, Task, ToolBinding
from .origins import url_origin
from .provider_tools import bind_provider_tool
from .providers.base import ToolProvider
from .providers.knowledge import BASE_NAME
from .providers.knowledge.db import count_active_knowledge_jobs
from .providers.knowledge.jobs import JobBudgets, KnowledgeJobs, KnowledgeJobsBusy, submit_knowledge_job

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


class _ServingBrain(Protocol):
    """What the binding form reads of the answering server's application object."""

    @property
    def providers(self) -> Mapping[str, ToolProvider]: ...


class ToolBindingForm(forms.ModelForm[ToolBinding]):
    # Tool URLs are written out in full (startup rejects a missing scheme); no scheme is assumed.
    url = forms.URLField(max_length=2048, assume_scheme="https", required=False)  # provider tools have none
    # only tools that require approval use it; left out, it is the host config's default
    approval_timeout_seconds = forms.IntegerField(min_value=1, required=False, initial=APPROVAL_TIMEOUT_DEFAULT)
    brain: _ServingBrain | None = None  # the application object of the server answering (ToolBindingAdmin.get_form)

    class Meta:
        model = ToolBinding
        fields = _FORM_FIELDS

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
        self, request: HttpRequest, obj: ToolBinding | None = None, change: bool = False, **kwargs: object
    ) -> type[forms.ModelForm[ToolBinding]]:
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = getattr(request, "scope", None)
        # its installed providers; ToolBindingForm declares the attribute get_form's subclass sets
        form.brain = scope.get("brain") if isinstance(scope, dict) else None  # type: ignore[attr-defined]
        return form

    def save_model(
        self, request: HttpRequest, obj: ToolBinding, form: forms.ModelForm[ToolBinding], change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        _forget_bindings(request)

    def delete_model(self, request: HttpRequest, obj: ToolBinding) -> None:
        super().delete_model(request, obj)
        _forget_bindings(request)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:  # a QuerySet: django.db is db.py's
        super().delete_queryset(request, queryset)
        _forget_bindings(request)


def _forget_bindings(request: HttpRequest) -> None:
    """A binding changed: this process's registry reloads admin bindings on next use (other
    processes' caches expire within 30 s)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and SCOPE_KEY in scope:
        brain_of(scope).registry.forget_bindings()


def _knowledge_jobs(request: HttpRequest) -> KnowledgeJobs | None:
    """The answering server's knowledge jobs (None outside runbrain: a runner's poll finds the job)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and SCOPE_KEY in scope:
        jobs: KnowledgeJobs | None = getattr(scope[SCOPE_KEY], "knowledge_jobs", None)
        return jobs
    return None


def _job_budgets(request: HttpRequest) -> JobBudgets:
    jobs = _knowledge_jobs(request)
    return jobs.budgets if jobs is not None else JobBudgets.from_environment(os.environ)


class KnowledgeBaseForm(forms.ModelForm[KnowledgeBase]):
    """A knowledge base, and optionally one file to add to it: checked here (size, type, the
    tenant's share of jobs), then read, chunked and indexed by a background job on save."""

    upload = forms.FileField(
        required=False,
        help_text="a text, Markdown, HTML or PDF file to add (at most 20 MiB); it is indexed in the background",
        label="Add a document",
    )
    document_title = forms.CharField(
        required=False, max_length=300, help_text="the added document's title (default: its own or the file name)"
    )
    request: HttpRequest | None = None  # set by KnowledgeBaseAdmin.get_form's subclass

    class Meta:
        model = KnowledgeBase
        fields = ("tenant", "name", "description")

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if not BASE_NAME.fullmatch(name):
            raise forms.ValidationError("1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit")
        return name

    def clean(self) -> dict[str, object] | None:
        cleaned = super().clean()
        upload = self.cleaned_data.get("upload")
        tenant = self.cleaned_data.get("tenant")
        if upload is None or not tenant:
            return cleaned
        if upload.size is not None and upload.size > MAX_DOCUMENT_BYTES:
            self.add_error("upload", f"file too large: {upload.size} bytes; at most {MAX_DOCUMENT_BYTES} bytes")
            return cleaned
        try:
            media_type_of(upload.name or "upload")
        except KnowledgeError as exc:
            self.add_error("upload", str(exc))
            return cleaned
        budgets = _job_budgets(self.request) if self.request is not None else JobBudgets.from_environment(os.environ)
        if count_active_knowledge_jobs(tenant) >= budgets.jobs_per_tenant:
            self.add_error("upload", KnowledgeJobsBusy(tenant, budgets.jobs_per_tenant).message)
        return cleaned


class DocumentInline(admin.TabularInline[Document, KnowledgeBase]):
    model = Document
    fields = ("title", "source", "media_type", "size", "chunk_count", "created_at")
    readonly_fields = fields
    extra = 0
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: KnowledgeBase | None = None) -> bool:
        return False


class KnowledgeJobInline(admin.TabularInline[KnowledgeJob, KnowledgeBase]):
    model = KnowledgeJob
    fields = ("source", "status", "progress", "stage", "error", "created_at", "finished_at")
    readonly_fields = fields
    extra = 0
    show_change_link = True
    ordering = ("-created_at",)
    verbose_name_plural = "knowledge jobs"
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: KnowledgeBase | None = None) -> bool:
        return False


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin[KnowledgeBase]):
    """Knowledge bases per tenant; documents are added with the upload field (a background job,
    listed below with its progress) or the add_knowledge command, and deleted from the list."""

    form = KnowledgeBaseForm
    inlines = (KnowledgeJobInline, DocumentInline)
    list_display = ("name", "tenant", "description", "created_at")
    list_filter = ("tenant",)
    search_fields = ("name", "description")
    ordering = ("tenant", "name")

    def get_form(
        self, request: HttpRequest, obj: KnowledgeBase | None = None, change: bool = False, **kwargs: object
    ) -> type[forms.ModelForm[KnowledgeBase]]:
        form = super().get_form(request, obj, change=change, **kwargs)
        # the form class is made for this request (a KnowledgeBaseForm subclass): its server's job budgets
        form.request = request  # type: ignore[attr-defined]  # declared on KnowledgeBaseForm
        return form

    def save_model(
        self, request: HttpRequest, obj: KnowledgeBase, form: forms.ModelForm[KnowledgeBase], change: bool
    ) -> None:
        if obj.created_at is None:
            obj.created_at = timezone.now()
        super().save_model(request, obj, form, change)
        upload = form.cleaned_data.get("upload")
        if upload is None:
            return
        jobs = _knowledge_jobs(request)
        try:
            job = submit_knowledge_job(
                obj.pk,
                obj.tenant,
                upload.chunks(),
                source=upload.name or "upload",
                title=form.cleaned_data.get("document_title", ""),
                budgets=_job_budgets(request),
                dispatch=jobs.dispatch if jobs is not None else None,
            )
        except (KnowledgeJobsBusy, KnowledgeError) as exc:  # lost a race for the tenant's last share
            self.message_user(request, f"{upload.name}: not added: {exc}", level=messages.ERROR)
            return
        self.message_user(request, f"{job.source}: queued as knowledge job {job.id}; it is indexed in the background")


@admin.register(KnowledgeJob)
class KnowledgeJobAdmin(admin.ModelAdmin[KnowledgeJob]):
    """Uploads being indexed, and those that were: state, progress, and why one failed."""

    list_display = ("source", "base", "tenant", "status", "progress", "stage", "error", "created_at", "finished_at")
    list_filter = ("status", "tenant")
    search_fields = ("source", "error")
    ordering = ("-created_at",)
    readonly_fields = (
        "base", "tenant", "source", "title", "size", "status", "progress", "stage", "error", "document",
        "created_at", "started_at", "finished_at",
    )  # fmt: skip
    exclude = ("spool_path",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: KnowledgeJob | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: KnowledgeJob | None = None) -> bool:
        # a queued or running job's worker still needs its row and spooled file
        return obj is None or obj.status not in (KnowledgeJobStatus.QUEUED.value, KnowledgeJobStatus.RUNNING.value)


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin[Document]):
    """Documents are added through their knowledge base; here they are listed, read and deleted."""

    list_display = ("title", "base", "source", "media_type", "size", "chunk_count", "created_at")
    list_filter = ("base__tenant", "media_type")
    search_fields = ("title", "source")
    ordering = ("-created_at",)
    readonly_fields = ("base", "title", "source", "media_type", "size", "chunk_count", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Document | None = None) -> bool:
        return False
