"""Sync state: one row per session, written by whoever publishes it (the server's in-process
publisher or a Celery worker), read by the server for GET /sync, readiness and the 429."""

from __future__ import annotations

from django.db import models


class SyncState(models.Model):
    session_id = models.CharField(max_length=32, primary_key=True)
    tenant = models.CharField(max_length=128)
    # restore bumps it; a publish that started under an older epoch never writes `latest`
    epoch = models.BigIntegerField(default=0)
    # the newest dirty mark a publish has covered (marks are nanosecond timestamps)
    synced_seq = models.BigIntegerField(default=0)
    checkpoint = models.CharField(max_length=32, blank=True)
    history_bytes = models.BigIntegerField(default=0)
    resume_offset = models.BigIntegerField(default=0)
    native_checkpoint = models.CharField(max_length=32, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    failed_seq = models.BigIntegerField(default=0)  # the dirty mark whose publish failed last
    error_permanent = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "sync state"

    def __str__(self) -> str:
        return self.session_id
