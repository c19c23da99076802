"""Shared by the credential commands: the host config they act for, and publishing the sessions
they changed so the archive's latest checkpoint carries the changed records."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from django.core.management.base import CommandError

from foundation.hostconfig import ConfigError, HostConfig, Secrets, load_config_and_secrets


def load_config(path: str) -> tuple[HostConfig, Secrets]:
    try:
        return load_config_and_secrets(path)
    except ConfigError as exc:
        raise CommandError(exc.report(path)) from exc


def publish_sessions(config: HostConfig, session_ids: Iterable[str], write: Callable[[str], None]) -> int:
    """Publish each session's checkpoint (a rotation or revocation changed its records); the
    number that failed. Nothing to do without `persistence`."""
    if config.persistence is None:
        return 0
    from persistence_app.discovery import DiscoveryIndex
    from persistence_app.stores import open_store
    from persistence_app.sync import Publisher, PublishOutcome

    settings = config.persistence
    index = DiscoveryIndex(os.environ[settings.postgres_env]) if settings.postgres_env else None
    store = open_store(settings, os.environ)
    failed = 0
    try:
        publisher = Publisher(store, Path(config.data_dir).resolve(), index=index)
        for session_id in sorted(set(session_ids)):
            result = publisher.run(session_id, time.time_ns(), wait=True)
            if result.outcome == PublishOutcome.FAILED:
                failed += 1
                write(f"session {session_id}: publish failed: {result.error}")
            else:
                write(f"session {session_id}: checkpoint {result.outcome.value}")
    finally:
        store.close()
        if index is not None:
            index.close()
    return failed
