"""The task tool's queries: a tenant's work items, scoped by the calling tenant in every query."""

from __future__ import annotations

from typing import TypedDict

from channels.db import database_sync_to_async
from django.utils import timezone

from foundation.rfc3339 import format_time

from ...models import Task, TaskStatus

__all__ = [
    "TaskFields",
    "acreate_task",
    "alist_tasks",
    "aupdate_task_status",
    "create_task",
    "list_tasks",
    "update_task_status",
]


class TaskFields(TypedDict):
    """A task as the model and GET /tasks see it."""

    id: int
    parent_id: int | None
    title: str
    description: str
    status: str
    created_at: str
    updated_at: str


def _task_fields(row: Task) -> TaskFields:
    return {
        "id": row.pk,
        "parent_id": row.parent_id,
        "title": row.title,
        "description": row.description,
        "status": row.status,
        "created_at": format_time(row.created_at),
        "updated_at": format_time(row.updated_at),
    }


def create_task(
    tenant: str, title: str, *, description: str, session_id: str, parent_id: int | None = None
) -> TaskFields | None:
    """A new pending task; None when `parent_id` names no task of this tenant."""
    if parent_id is not None and not Task.objects.filter(tenant=tenant, pk=parent_id).exists():
        return None
    now = timezone.now()
    row = Task.objects.create(
        tenant=tenant,
        parent_id=parent_id,
        title=title,
        description=description,
        session_id=session_id,
        created_at=now,
        updated_at=now,
    )
    return _task_fields(row)


def update_task_status(tenant: str, task_id: int, status: TaskStatus) -> TaskFields | None:
    """The task with its new status; None when this tenant has no such task."""
    updated = Task.objects.filter(tenant=tenant, pk=task_id).update(status=status, updated_at=timezone.now())
    if updated != 1:
        return None
    return _task_fields(Task.objects.get(tenant=tenant, pk=task_id))


def list_tasks(
    tenant: str, *, after: int = 0, limit: int, status: str = "", parent_id: int | None = None
) -> list[TaskFields]:
    """A page of the tenant's tasks in id order after `after`."""
    rows = Task.objects.filter(tenant=tenant, pk__gt=after)
    if status:
        rows = rows.filter(status=status)
    if parent_id is not None:
        rows = rows.filter(parent_id=parent_id)
    return [_task_fields(row) for row in rows.order_by("pk")[:limit]]


acreate_task = database_sync_to_async(create_task)
aupdate_task_status = database_sync_to_async(update_task_status)
alist_tasks = database_sync_to_async(list_tasks)
