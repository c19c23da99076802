"""Fleet rows in Django's database (PostgreSQL in a fleet): instances, session leases and the
input journal. Written only through fleet_app.db, whose conditional statements fence owners."""

from __future__ import annotations

from django.db import models

MAX_INSTANCE_CHARS = 63  # foundation.hostconfig.cluster.INSTANCE_NAME: a DNS label
SESSION_ID_CHARS = 32  # 32 hex characters, like every session id
EVENT_ID_CHARS = 32
INCARNATION_CHARS = 32  # fleet_app.leases: 16 random bytes in hex, new for every process


class Instance(models.Model):
    """One running Brain process of the fleet. Its heartbeat is renewed with its leases."""

    name = models.CharField(primary_key=True, max_length=MAX_INSTANCE_CHARS)
    url = models.CharField(max_length=2048)
    # random per process start: a second live process with the same name cannot join
    incarnation = models.CharField(max_length=INCARNATION_CHARS)
    started = models.DateTimeField()
    heartbeat = models.DateTimeField()
    expires_at = models.DateTimeField()  # alive while expires_at > now() on the database's clock
    draining = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.name


class SessionLease(models.Model):
    """Who owns a session: an instance name and the process (incarnation) that took it under
    that name. Every change of owner or of process (a release included) increments the epoch,
    so a process that re-joined a name never shares an epoch with the one before it."""

    session_id = models.CharField(primary_key=True, max_length=SESSION_ID_CHARS)
    owner = models.CharField(max_length=MAX_INSTANCE_CHARS, blank=True)  # "" once released
    incarnation = models.CharField(max_length=INCARNATION_CHARS, blank=True, default="")
    epoch = models.BigIntegerField()
    expires_at = models.DateTimeField()
    updated = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["owner"], name="fleet_lease_owner")]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.owner or '-'}#{self.epoch}"


class JournalState(models.TextChoices):
    QUEUED = "queued"  # acknowledged (202), no turn has taken it yet
    STARTED = "started"  # a turn took it; its effects may have happened
    CANCELLED = "cancelled"  # cancelled while queued (an interrupt, a close): it never runs


class JournalEntry(models.Model):
    """An acknowledged input, durable before its 202. `seq` orders a session's inputs as its
    queue takes them; a checkpoint covers every entry up to the seq it records."""

    seq = models.BigAutoField(primary_key=True)
    input_id = models.CharField(max_length=EVENT_ID_CHARS)  # the user.message event's id
    session_id = models.CharField(max_length=SESSION_ID_CHARS)
    # UTF-8 bytes of the idempotency key, NULL without one. bytea, not text: PostgreSQL text
    # refuses NUL, which a key may hold.
    key = models.BinaryField(null=True)
    # the input as JSON bytes (orjson). bytea, not jsonb: jsonb refuses "\u0000" in a message,
    # and nothing queries inside the payload.
    payload = models.BinaryField()
    epoch = models.BigIntegerField()  # the lease epoch of the owner that accepted it
    state = models.CharField(max_length=9, choices=JournalState.choices, default=JournalState.QUEUED)
    created = models.DateTimeField()

    class Meta:
        verbose_name_plural = "journal entries"
        constraints = [
            models.UniqueConstraint(
                fields=["session_id", "key"], condition=models.Q(key__isnull=False), name="fleet_journal_key"
            )
        ]
        indexes = [models.Index(fields=["session_id", "seq"], name="fleet_journal_session")]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.seq}"
