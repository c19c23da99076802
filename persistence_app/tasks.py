"""Celery wrappers of the sync job: session ids in, the result in the sync-state row.

A worker process builds its publisher once, from the host config named by $BRAIN_CONFIG (set
by `manage.py syncworker --config FILE`). Retries happen inside the job (Publisher.run), so a
task never re-queues itself; a worker killed mid-upload loses only its task, which the server
dispatches again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Task, shared_task

from foundation.hostconfig import load_host_config
from persistence_app.discovery import DiscoveryIndex
from persistence_app.stores import open_store
from persistence_app.sync import Publisher

__all__ = ["PUBLISH_TASK", "publish_session"]

PUBLISH_TASK = "brain.sync.publish"


class PublishTask(Task):  # type: ignore[misc]  # celery ships no type hints
    """Holds this worker process's publisher (Celery makes one task instance per process)."""

    _publisher: Publisher | None = None

    @property
    def publisher(self) -> Publisher:
        if self._publisher is None:
            config = load_host_config(os.environ.get("BRAIN_CONFIG", "brain.json"))
            settings = config.persistence
            if settings is None:
                raise RuntimeError("the host config has no persistence block")
            index = DiscoveryIndex(os.environ[settings.postgres_env]) if settings.postgres_env else None
            self._publisher = Publisher(
                open_store(settings, os.environ),
                Path(config.data_dir).resolve(),
                index=index,
                timeout_seconds=settings.publish_timeout_seconds,
                fleet=config.cluster is not None,  # then each job carries the server's lease epoch
            )
        return self._publisher


@shared_task(  # type: ignore[untyped-decorator]  # celery ships no type hints
    bind=True, base=PublishTask, name=PUBLISH_TASK, acks_late=True, reject_on_worker_lost=True
)
def publish_session(self: PublishTask, session_id: str, seq: int, lease_epoch: int | None = None) -> dict[str, Any]:
    result = self.publisher.run(session_id, seq, lease_epoch=lease_epoch)
    return {"outcome": result.outcome.value, "error": result.error}
