"""The built-in `tasks` tool (`manage_tasks`): the provider (provider.py) and its queries
(db.py), which GET /tasks reads too. Operators install it as
`tools_app.providers.tasks.TasksProvider`; the Task model stays in tools_app.models."""

from __future__ import annotations

from .provider import MAX_TASK_PAGE, TasksProvider

__all__ = ["MAX_TASK_PAGE", "TasksProvider"]
