"""`tasks`: a tenant's persistent work items through one tool, `manage_tasks` (actions create,
create_subtask, update_status, list), kept in the database (tasks/db.py). The trusted tenant of
the call scopes every action: another tenant's task is "no such task", never a different error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runners.protocol import ToolDescriptor

from ..base import ProviderCall, ProviderEnvironment, ToolProvider
from ..options import CommonOptions, parse_parameterless_options, select_parameterless
from .db import TaskFields, acreate_task, alist_tasks, aupdate_task_status

__all__ = ["MAX_TASK_PAGE", "TasksProvider"]

MAX_TITLE_CHARS = 200  # the model column's width
MAX_DESCRIPTION_CHARS = 8000  # a task describes work; documents belong elsewhere
MAX_TASK_PAGE = 100  # tasks listed by one call
ACTIONS = ("create", "create_subtask", "update_status", "list")
STATUSES = ["pending", "in_progress", "completed", "cancelled"]  # tools_app.models.TaskStatus

OPERATIONS: dict[str, ToolDescriptor] = {
    "manage_tasks": {
        "name": "manage_tasks",
        "description": "Create and track work tasks that persist across sessions. Actions: create {title, "
        "description?}; create_subtask {parent_id, title, description?}; update_status {task_id, status}; "
        "list {status?, parent_id?, after?, limit?}. Statuses: " + ", ".join(STATUSES) + ".",
        "input_schema": {
            "type": "object",
            "properties": {
                "action": {"enum": list(ACTIONS)},
                "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS},
                "description": {"type": "string", "maxLength": MAX_DESCRIPTION_CHARS},
                "parent_id": {"type": "integer", "minimum": 1},
                "task_id": {"type": "integer", "minimum": 1},
                "status": {"enum": STATUSES},
                "after": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_TASK_PAGE},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
    }
}
REQUIRED = {"create": ("title",), "create_subtask": ("parent_id", "title"), "update_status": ("task_id", "status")}


def _error(message: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": message}], "is_error": True}


def _task(row: TaskFields, summary: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": summary}], "structured_content": {"task": row}}


class TasksProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_parameterless_options(CommonOptions, options, kind="task")

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        return select_parameterless(OPERATIONS, operations, parameters, kind="task")

    async def handle(self, call: ProviderCall) -> object:
        arguments = call.arguments
        action = str(arguments["action"])  # one of the descriptor's enum
        missing = [key for key in REQUIRED.get(action, ()) if key not in arguments]
        if missing:
            return _error(f"action {action} needs {', '.join(missing)}")
        if action in ("create", "create_subtask"):
            parent_id = arguments.get("parent_id") if action == "create_subtask" else None
            row = await acreate_task(
                call.tenant,
                arguments["title"],
                description=arguments.get("description", ""),
                session_id=call.session_id,
                parent_id=parent_id,
            )
            if row is None:
                return _error(f"no task {parent_id}")
            return _task(row, f"created task {row['id']}")
        if action == "update_status":
            updated = await aupdate_task_status(call.tenant, arguments["task_id"], arguments["status"])
            if updated is None:
                return _error(f"no task {arguments['task_id']}")
            return _task(updated, f"task {updated['id']} is {updated['status']}")
        limit = arguments.get("limit", MAX_TASK_PAGE)
        rows = await alist_tasks(
            call.tenant,
            after=arguments.get("after", 0),
            limit=limit,
            status=arguments.get("status", ""),
            parent_id=arguments.get("parent_id"),
        )
        page: dict[str, object] = {"tasks": list(rows)}
        if len(rows) == limit:
            page["next_after"] = rows[-1]["id"]
        return {"content": [], "structured_content": page}
