"""The only ORM user of fleet_app (besides models): instance rows, session leases, the input journal.

Every function is one statement (two on a rare race, said where) on PostgreSQL, so ownership is
decided by the database alone: conditional INSERT ... ON CONFLICT / UPDATE with RETURNING, times
from the database's clock (`now()`), never the instances'. Each takes `using`, the Django
database alias (the default one in a server). Sync units with `a*` twins for the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, cast

import orjson
from channels.db import database_sync_to_async
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from .models import Instance, JournalEntry, JournalState, SessionLease
from .receipts import JournalReceipt

__all__ = [
    "DEFAULT_DB_ALIAS",
    "DatabaseError",
    "JournalState",
    "Acquired",
    "InstanceRow",
    "JournalRow",
    "LeaseOwner",
    "aacquire_lease",
    "atake_lease",
    "ajoin_instance",
    "alist_instances",
    "ainstance_alive",
    "instance_alive",
    "amember_url",
    "member_url",
    "amark_started",
    "aowner_of",
    "adiscard_input",
    "aprune_journal",
    "arecord_input",
    "arelease_all",
    "arelease_lease",
    "arenew_leases",
    "Renewed",
    "aset_draining",
    "ajournal_after",
    "acquire_lease",
    "acancel_inputs",
    "cancel_inputs",
    "join_instance",
    "journal_after",
    "leave_instance",
    "aleave_instance",
    "list_instances",
    "mark_started",
    "owner_of",
    "discard_input",
    "prune_journal",
    "record_input",
    "release_all",
    "release_lease",
    "renew_leases",
    "set_draining",
    "take_lease",
]

_INSTANCE = Instance._meta.db_table
_LEASE = SessionLease._meta.db_table
_JOURNAL = JournalEntry._meta.db_table
_QUEUED = JournalState.QUEUED.value
_STARTED = JournalState.STARTED.value
_CANCELLED = JournalState.CANCELLED.value


def _execute(using: str, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


# --- instances -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceRow:
    name: str
    url: str
    started: datetime
    heartbeat: datetime
    alive: bool
    draining: bool
    sessions_owned: int  # leases it holds that have not expired
    incarnation: str  # the process holding the name now


_JOIN = f"""
INSERT INTO {_INSTANCE} AS i (name, url, incarnation, started, heartbeat, expires_at, draining)
VALUES (%s, %s, %s, now(), now(), now() + make_interval(secs => %s), false)
ON CONFLICT (name) DO UPDATE SET
    url = EXCLUDED.url, incarnation = EXCLUDED.incarnation, started = EXCLUDED.started,
    heartbeat = EXCLUDED.heartbeat, expires_at = EXCLUDED.expires_at, draining = false
WHERE i.incarnation = EXCLUDED.incarnation OR i.expires_at <= now()
RETURNING name
"""


def join_instance(
    name: str, *, url: str, incarnation: str, lease_seconds: float, using: str = DEFAULT_DB_ALIAS
) -> bool:
    """Register this process as instance `name`. False while another live process (another
    incarnation whose row has not expired) holds the name: two processes of one name would
    both believe they own its sessions."""
    return bool(_execute(using, _JOIN, [name, url, incarnation, lease_seconds]))


def leave_instance(name: str, *, incarnation: str, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Mark the instance gone at once (after releasing its leases), so routing stops at once."""
    sql = f"UPDATE {_INSTANCE} SET expires_at = now(), draining = true WHERE name = %s AND incarnation = %s"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [name, incarnation])
        return bool(cursor.rowcount == 1)


def set_draining(name: str, *, incarnation: str, draining: bool, using: str = DEFAULT_DB_ALIAS) -> bool:
    sql = f"UPDATE {_INSTANCE} SET draining = %s WHERE name = %s AND incarnation = %s"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [draining, name, incarnation])
        return bool(cursor.rowcount == 1)


def list_instances(*, using: str = DEFAULT_DB_ALIAS) -> list[InstanceRow]:
    """Every instance row, by name, with its live lease count (the admin's fleet page)."""
    sql = f"""
    SELECT i.name, i.url, i.started, i.heartbeat, i.expires_at > now(), i.draining,
           (SELECT count(*) FROM {_LEASE} l
            WHERE l.owner = i.name AND l.incarnation = i.incarnation AND l.expires_at > now()),
           i.incarnation
    FROM {_INSTANCE} i ORDER BY i.name
    """
    return [InstanceRow(*row) for row in _execute(using, sql, [])]


def instance_alive(name: str, *, incarnation: str, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether that process (name and incarnation) is still a live member of the fleet: False once
    its row expired, it left, or another process took the name."""
    sql = f"SELECT 1 FROM {_INSTANCE} WHERE name = %s AND incarnation = %s AND expires_at > now()"
    return bool(_execute(using, sql, [name, incarnation]))


def member_url(name: str, *, incarnation: str, using: str = DEFAULT_DB_ALIAS) -> str | None:
    """That process's address in the instances table while it is a live member of the fleet
    (as instance_alive), else None: the only address another instance forwards to."""
    sql = f"SELECT url FROM {_INSTANCE} WHERE name = %s AND incarnation = %s AND expires_at > now()"
    rows = _execute(using, sql, [name, incarnation])
    return str(rows[0][0]) if rows else None


# --- leases ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    instance: str
    url: str
    epoch: int
    incarnation: str = ""  # the owning process: what a signed request to it must name


# Free ('' after a release), expired, or already this process's: take it. A lease is held by
# an instance name *and* the process (incarnation) that took it: a change of either increments
# the epoch, so a new process under a re-joined name never shares an epoch with the old one,
# and waits, like any other instance, for a lease the old process still holds to expire. The
# row's lock orders concurrent acquirers, and the loser's WHERE sees the winner.
_ACQUIRE = f"""
WITH prior AS (SELECT owner, incarnation FROM {_LEASE} WHERE session_id = %s)
INSERT INTO {_LEASE} AS l (session_id, owner, incarnation, epoch, expires_at, updated)
VALUES (%s, %s, %s, 1, now() + make_interval(secs => %s), now())
ON CONFLICT (session_id) DO UPDATE SET
    epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.incarnation = EXCLUDED.incarnation
                 THEN l.epoch ELSE l.epoch + 1 END,
    owner = EXCLUDED.owner, incarnation = EXCLUDED.incarnation,
    expires_at = EXCLUDED.expires_at, updated = EXCLUDED.updated
WHERE (l.owner = EXCLUDED.owner AND l.incarnation = EXCLUDED.incarnation) OR l.owner = '' OR l.expires_at <= now()
RETURNING epoch, (SELECT owner FROM prior), (SELECT incarnation FROM prior)
"""


@dataclass(frozen=True, slots=True)
class Acquired:
    epoch: int
    previous: str  # the owner before ('' for a new or released lease); another name: it had expired
    previous_incarnation: str = ""  # the process that held it under `previous`


def take_lease(
    session_id: str, *, owner: str, incarnation: str, lease_seconds: float, using: str = DEFAULT_DB_ALIAS
) -> Acquired | None:
    """acquire_lease, also saying whose the lease was (read in the statement's snapshot)."""
    rows = _execute(using, _ACQUIRE, [session_id, session_id, owner, incarnation, lease_seconds])
    return Acquired(int(rows[0][0]), str(rows[0][1] or ""), str(rows[0][2] or "")) if rows else None


def acquire_lease(
    session_id: str, *, owner: str, incarnation: str, lease_seconds: float, using: str = DEFAULT_DB_ALIAS
) -> int | None:
    """The epoch now held by process `incarnation` of instance `owner`, or None while another
    instance (or another process of the same name) holds a live lease."""
    taken = take_lease(session_id, owner=owner, incarnation=incarnation, lease_seconds=lease_seconds, using=using)
    return taken.epoch if taken is not None else None


# One statement for a whole renewal round: the instance's heartbeat, then every lease it
# believes it holds, each only at the epoch it holds and under this process's incarnation.
# Nothing is renewed when the instance row belongs to another incarnation (the name re-joined
# by a new process): the first column then says so.
_RENEW = f"""
WITH beat AS (
    UPDATE {_INSTANCE} SET heartbeat = now(), expires_at = now() + make_interval(secs => %s)
    WHERE name = %s AND incarnation = %s RETURNING name
), renewed AS (
    UPDATE {_LEASE} AS l SET expires_at = now() + make_interval(secs => %s), updated = now()
    FROM unnest(%s::varchar[], %s::bigint[]) AS held(session_id, epoch)
    WHERE l.session_id = held.session_id AND l.epoch = held.epoch AND l.owner = %s AND l.incarnation = %s
      AND EXISTS (SELECT 1 FROM beat)
    RETURNING l.session_id
)
SELECT EXISTS (SELECT 1 FROM beat), ARRAY(SELECT session_id FROM renewed)
"""


@dataclass(frozen=True, slots=True)
class Renewed:
    member: bool  # False: the instance row is another process's (the name re-joined)
    held: set[str]


def renew_leases(
    owner: str,
    held: Mapping[str, int],
    *,
    incarnation: str,
    lease_seconds: float,
    using: str = DEFAULT_DB_ALIAS,
) -> Renewed:
    """Renew every lease in `held` (session id -> epoch) still this process's at that epoch,
    and the instance's heartbeat. A lease another instance or process took, or one released,
    is not renewed, even if it has come back to this instance since."""
    sessions = list(held)
    params = [
        lease_seconds,
        owner,
        incarnation,
        lease_seconds,
        sessions,
        [held[s] for s in sessions],
        owner,
        incarnation,
    ]
    member, renewed = _execute(using, _RENEW, params)[0]
    return Renewed(bool(member), {str(session_id) for session_id in renewed})


def release_lease(session_id: str, *, owner: str, incarnation: str, epoch: int, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Give a lease up (after a flush): any instance may acquire it at once, at epoch + 1."""
    sql = f"""
    UPDATE {_LEASE} SET owner = '', expires_at = now(), updated = now()
    WHERE session_id = %s AND owner = %s AND incarnation = %s AND epoch = %s
    """
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [session_id, owner, incarnation, epoch])
        return bool(cursor.rowcount == 1)


def release_all(owner: str, held: Mapping[str, int], *, incarnation: str, using: str = DEFAULT_DB_ALIAS) -> set[str]:
    """Release every lease in `held` still this process's at its epoch; returns those released."""
    sessions = list(held)
    sql = f"""
    UPDATE {_LEASE} AS l SET owner = '', expires_at = now(), updated = now()
    FROM unnest(%s::varchar[], %s::bigint[]) AS held(session_id, epoch)
    WHERE l.session_id = held.session_id AND l.epoch = held.epoch AND l.owner = %s AND l.incarnation = %s
    RETURNING l.session_id
    """
    params = [sessions, [held[s] for s in sessions], owner, incarnation]
    return {str(row[0]) for row in _execute(using, sql, params)}


def owner_of(session_id: str, *, using: str = DEFAULT_DB_ALIAS) -> LeaseOwner | None:
    """The live owner of a session (an unexpired lease of the live process of its instance)
    and its URL; None when the session is free, its lease expired, its owner's heartbeat has,
    or the lease is a former process's of a name another process has re-joined."""
    sql = f"""
    SELECT l.owner, i.url, l.epoch, i.incarnation FROM {_LEASE} l
    JOIN {_INSTANCE} i ON i.name = l.owner AND i.incarnation = l.incarnation
    WHERE l.session_id = %s AND l.expires_at > now() AND i.expires_at > now()
    """
    rows = _execute(using, sql, [session_id])
    return LeaseOwner(str(rows[0][0]), str(rows[0][1]), int(rows[0][2]), str(rows[0][3])) if rows else None


# --- input journal ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalRow:
    seq: int
    input_id: str
    key: str | None
    payload: dict[str, Any]
    epoch: int
    state: JournalState
    created: datetime


# One round trip either way: the insert, or (its key taken) the entry that holds the key.
_RECORD = f"""
WITH inserted AS (
    INSERT INTO {_JOURNAL} (input_id, session_id, key, payload, epoch, state, created)
    VALUES (%s, %s, %s, %s, %s, '{_QUEUED}', now())
    ON CONFLICT (session_id, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING seq, input_id
)
SELECT seq, input_id, true FROM inserted
UNION ALL
SELECT seq, input_id, false FROM {_JOURNAL}
WHERE session_id = %s AND key = %s AND NOT EXISTS (SELECT 1 FROM inserted)
"""
_BY_KEY = f"SELECT seq, input_id, false FROM {_JOURNAL} WHERE session_id = %s AND key = %s"


def record_input(
    session_id: str,
    *,
    input_id: str,
    key: str | None,
    payload: Mapping[str, Any],
    epoch: int,
    using: str = DEFAULT_DB_ALIAS,
) -> JournalReceipt:
    """Journal an acknowledged input, before its 202: one INSERT. A key already journaled for
    the session records nothing and returns the first send's entry (`created` False).

    The statement's snapshot cannot see a row a concurrent send of the same key committed while
    this one waited on it; then a second SELECT, in a fresh snapshot, finds that row.
    """
    key_bytes = key.encode() if key is not None else None
    body = orjson.dumps(payload)
    rows = _execute(using, _RECORD, [input_id, session_id, key_bytes, body, epoch, session_id, key_bytes])
    if not rows and key_bytes is not None:
        rows = _execute(using, _BY_KEY, [session_id, key_bytes])
    seq, recorded_id, created = rows[0]
    return JournalReceipt(int(seq), str(recorded_id), bool(created))


def mark_started(session_id: str, seq: int, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """A turn takes the entry, before anything reaches the harness: one UPDATE. False when
    the entry is gone (pruned) or already started."""
    sql = f"UPDATE {_JOURNAL} SET state = '{_STARTED}' WHERE seq = %s AND session_id = %s AND state = '{_QUEUED}'"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [seq, session_id])
        return bool(cursor.rowcount == 1)


def cancel_inputs(session_id: str, seqs: Sequence[int], *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Queued entries cancelled before any turn took them (an interrupt, a close): one UPDATE.
    A new owner then reports them cancelled instead of running them. Returns how many."""
    sql = f"""
    UPDATE {_JOURNAL} SET state = '{_CANCELLED}'
    WHERE session_id = %s AND seq = ANY(%s::bigint[]) AND state = '{_QUEUED}'
    """
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [session_id, list(seqs)])
        return int(cursor.rowcount)


def journal_after(session_id: str, covered_seq: int, *, using: str = DEFAULT_DB_ALIAS) -> list[JournalRow]:
    """The session's entries a checkpoint covering `covered_seq` does not cover, in seq order
    (the order the queue takes them). 0 covers nothing (the creation checkpoint)."""
    sql = f"""
    SELECT seq, input_id, key, payload, epoch, state, created FROM {_JOURNAL}
    WHERE session_id = %s AND seq > %s ORDER BY seq
    """
    return [
        JournalRow(
            seq=int(seq),
            input_id=str(input_id),
            key=bytes(key).decode() if key is not None else None,
            payload=orjson.loads(bytes(payload)),
            epoch=int(epoch),
            state=JournalState(state),
            created=created,
        )
        for seq, input_id, key, payload, epoch, state, created in _execute(using, sql, [session_id, covered_seq])
    ]


def discard_input(session_id: str, seq: int, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Forget an entry whose send failed after it was journaled (no 202 was given)."""
    sql = f"DELETE FROM {_JOURNAL} WHERE session_id = %s AND seq = %s"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [session_id, seq])
        return bool(cursor.rowcount == 1)


def prune_journal(session_id: str, covered_seq: int, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete the entries a published checkpoint covers; returns how many."""
    sql = f"DELETE FROM {_JOURNAL} WHERE session_id = %s AND seq <= %s"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [session_id, covered_seq])
        return int(cursor.rowcount)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _twin(function: Callable[_P, _R]) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """database_sync_to_async(function), its signature kept for mypy (channels' class is untyped)."""
    return cast(Callable[_P, Coroutine[Any, Any, _R]], database_sync_to_async(function))


ajoin_instance = _twin(join_instance)
aleave_instance = _twin(leave_instance)
aset_draining = _twin(set_draining)
alist_instances = _twin(list_instances)
ainstance_alive = _twin(instance_alive)
amember_url = _twin(member_url)
aacquire_lease = _twin(acquire_lease)
atake_lease = _twin(take_lease)
arenew_leases = _twin(renew_leases)
arelease_lease = _twin(release_lease)
arelease_all = _twin(release_all)
aowner_of = _twin(owner_of)
arecord_input = _twin(record_input)
amark_started = _twin(mark_started)
acancel_inputs = _twin(cancel_inputs)
ajournal_after = _twin(journal_after)
aprune_journal = _twin(prune_journal)
adiscard_input = _twin(discard_input)
