"""Celery wrappers of the sync job: session ids in, the result in the sync-state row.

A worker process builds its publisher once, from the host config named by $BRAIN_CONFIG (set
by `manage.py syncworker --config FILE`). Retries happen inside the job (Publisher.run), so a
task never re-queues itself; a worker killed mid-upload loses only its task, which the server
dispatches again.

In a fleet the worker also forgets the input-journal entries a checkpoint it published covers,
as the server does for its own publishes, but only while the session's lease is still at the
epoch the job carries (the job may have waited in the queue while the session moved).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Task, shared_task

from fleet_app.db import owner_of
from fleet_app.journal import InputJournal
from foundation.hostconfig import load_host_config
from foundation.logs import logger
from persistence_app.discovery import DiscoveryIndex
from persistence_app.stores import open_store
from persistence_app.sync import Publisher

__all__ = ["PUBLISH_TASK", "prune_covered", "publish_session"]

PUBLISH_TASK = "brain.sync.publish"


class PublishTask(Task):  # type: ignore[misc]  # celery ships no type hints
    """Holds this worker process's publisher (Celery makes one task instance per process)."""

    _publisher: Publisher | None = None
    _journal: InputJournal | None = None  # a fleet's input journal, once the publisher is built

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
            self._journal = InputJournal() if config.cluster is not None else None
        return self._publisher

    @property
    def journal(self) -> InputJournal | None:
        """A fleet's input journal (PostgreSQL, Django's database); None without a cluster block."""
        if self._publisher is None:
            self.publisher  # noqa: B018  # built from the same host config
        return self._journal


def prune_covered(journal: InputJournal, session_id: str, covered_seq: int, *, epoch: int) -> bool:
    """Forget the journal entries up to `covered_seq` (a checkpoint `latest` now names, written
    under lease `epoch`) while the session's live lease is still at `epoch`. A lease that moved,
    lapsed or was released keeps them: its next owner may be replaying them from an older
    checkpoint, and the entries are pruned by a later publish that covers them."""
    owner = owner_of(session_id, using=journal.database)
    if owner is None or owner.epoch != epoch:
        logger.info(
            "journal kept: the lease moved since the publish was dispatched",
            extra={"session_id": session_id, "epoch": epoch, "lease_epoch": owner.epoch if owner else None},
        )
        return False
    journal.prune_published(session_id, covered_seq)
    return True


@shared_task(  # type: ignore[untyped-decorator]  # celery ships no type hints
    bind=True, base=PublishTask, name=PUBLISH_TASK, acks_late=True, reject_on_worker_lost=True
)
def publish_session(self: PublishTask, session_id: str, seq: int, lease_epoch: int | None = None) -> dict[str, Any]:
    result = self.publisher.run(session_id, seq, lease_epoch=lease_epoch)
    journal = self.journal
    if journal is not None and lease_epoch is not None and result.covered_seq > 0:
        try:
            prune_covered(journal, session_id, result.covered_seq, epoch=lease_epoch)
        except Exception:  # the task's boundary: the publish stands; a later one prunes what it covers
            logger.warning("journal prune failed", exc_info=True, extra={"session_id": session_id})
    return {"outcome": result.outcome.value, "error": result.error}
