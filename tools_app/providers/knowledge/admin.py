"""Admin for knowledge bases, their documents and the jobs that index uploads (registered when
tools_app.admin is imported). A base's form takes one file to add, checked here (size, type, the
tenant's share of jobs) and indexed by a background job on save."""

from __future__ import annotations

import os

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone

from foundation.app_object import SCOPE_KEY

from ...ingest.documents import MAX_DOCUMENT_BYTES, KnowledgeError, KnowledgeJobStatus, media_type_of
from ...listing import MAX_LISTED_NAME, MAX_LISTED_TEXT, cut
from ...models import Document, KnowledgeBase, KnowledgeJob
from . import BASE_NAME
from .db import count_active_knowledge_jobs
from .jobs import JobBudgets, KnowledgeJobs, KnowledgeJobsBusy, submit_knowledge_job

__all__ = ["DocumentAdmin", "KnowledgeBaseAdmin", "KnowledgeJobAdmin"]


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
    list_display = ("name", "tenant", "short_description", "created_at")

    @admin.display(description="description")
    def short_description(self, obj: KnowledgeBase) -> str:
        return cut(obj.description, MAX_LISTED_TEXT)

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

    list_display = ("short_source", "base", "status", "progress", "short_error", "created_at")

    @admin.display(description="source", ordering="source")
    def short_source(self, obj: KnowledgeJob) -> str:
        return cut(obj.source, MAX_LISTED_NAME)

    @admin.display(description="error")
    def short_error(self, obj: KnowledgeJob) -> str:
        return cut(obj.error, MAX_LISTED_TEXT)

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

    list_display = ("short_title", "base", "short_source", "media_type", "size", "chunk_count", "created_at")

    @admin.display(description="title", ordering="title")
    def short_title(self, obj: Document) -> str:
        return cut(obj.title, MAX_LISTED_TEXT)

    @admin.display(description="source", ordering="source")
    def short_source(self, obj: Document) -> str:
        return cut(obj.source, MAX_LISTED_NAME)

    list_filter = ("base__tenant", "media_type")
    search_fields = ("title", "source")
    ordering = ("-created_at",)
    readonly_fields = ("base", "title", "source", "media_type", "size", "chunk_count", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Document | None = None) -> bool:
        return False
