"""Where the server's background work goes when a Celery broker is configured: archive publishes
and knowledge jobs sent to workers, and the watch that pings them (brainsite.application wires them)."""

from __future__ import annotations

from collections.abc import Callable

from foundation.hostconfig import HostConfig
from foundation.logs import logger
from foundation.telemetry import Telemetry
from persistence_app.workerwatch import WorkerWatch

__all__ = ["celery_dispatch", "celery_send", "log_upload_mode", "worker_watch"]

# How long a ping of the broker waits for Celery workers' answers (in a thread of its own).
WORKER_PING_SECONDS = 1.0


def celery_dispatch(job_lease: Callable[[str], tuple[int | None, ...]]) -> Callable[[str, int], None] | None:
    """Hands publishes to `manage.py syncworker` when a broker is configured; in a fleet each
    job carries the lease epoch held now (only the server holds leases, fleet_app.fleet), None
    when none is."""
    from django.conf import settings

    if not settings.CELERY_BROKER_URL:
        return None
    from brainsite.celery import app
    from persistence_app.tasks import PUBLISH_TASK

    def dispatch(session_id: str, seq: int) -> None:
        app.send_task(PUBLISH_TASK, args=(session_id, seq, *job_lease(session_id)))

    return dispatch


def worker_watch(telemetry: Telemetry) -> WorkerWatch | None:
    """With a broker, pings its Celery workers (sync publishes and knowledge jobs go there)."""
    from django.conf import settings

    if not settings.CELERY_BROKER_URL:
        return None
    from brainsite.celery import app

    def ping() -> int:
        with app.connection_for_write() as connection:
            # one try: a broker that refuses fails this ping at once, the next one tries again
            connection.ensure_connection(max_retries=0)
            return len(app.control.ping(timeout=WORKER_PING_SECONDS, connection=connection))

    return WorkerWatch(ping, broker=settings.CELERY_BROKER_URL, telemetry=telemetry)


def log_upload_mode(config: HostConfig, workers: WorkerWatch | None) -> None:
    """Where this server's archive uploads run: its own threads, or Celery workers on a broker."""
    assert config.persistence is not None
    if workers is None:
        logger.info("archive uploads run in this process", extra={"archive": config.persistence.provider})
    else:
        logger.info(
            "archive uploads go to Celery workers",
            extra={"archive": config.persistence.provider, "broker": workers.broker},
        )


def celery_send(task: str) -> Callable[[int], None] | None:
    """Sends a job id to the Celery task `task` when a broker is configured."""
    from django.conf import settings

    if not settings.CELERY_BROKER_URL:
        return None
    from brainsite.celery import app

    def send(job_id: int) -> None:
        app.send_task(task, args=(job_id,))

    return send
