"""The PostgreSQL discovery index (`persistence.postgres_env`): which sessions exist, by tenant,
and their latest checkpoint, across every Brain instance writing to the same archive.

Eventually consistent and never a lock: a row is upserted after each publication, and
`GET /sessions` and cold loads read it. In a fleet each upsert carries the lease epoch it was
published under and is refused for an older epoch than the row's (`Fenced`), so a former owner
never puts its older checkpoint back; a single instance writes epoch 0 throughout. A table
created before the `epoch` column existed gets it (default 0) when the index first connects.
At most MAX_CONNECTIONS per process (psycopg_pool).
Blocking; the server calls it from worker threads.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from persistence_app.stores.base import REASON_INDEX, Fenced, StoreError

__all__ = ["MAX_CONNECTIONS", "DiscoveryIndex", "TenantMismatch"]

MAX_CONNECTIONS = 4  # spec: Brain bounds each process to at most 4 open database connections
CONNECT_TIMEOUT_SECONDS = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS brain_sessions (
    id text PRIMARY KEY,
    tenant text NOT NULL,
    data jsonb NOT NULL,
    checkpoint text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    epoch bigint NOT NULL DEFAULT 0
);
ALTER TABLE brain_sessions ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS brain_sessions_tenant_id ON brain_sessions (tenant, id);
"""
# CREATE ... IF NOT EXISTS is not safe against itself: two sessions creating the table at once
# can fail on a unique violation in the catalog. The schema is created under this
# transaction-scoped advisory lock (every Brain process of a database takes the same one).
_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(7158200631489247597)"

_UPSERT = """
INSERT INTO brain_sessions (id, tenant, data, checkpoint, epoch) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET
    data = EXCLUDED.data, checkpoint = EXCLUDED.checkpoint, epoch = EXCLUDED.epoch, updated_at = now()
WHERE brain_sessions.tenant = EXCLUDED.tenant AND brain_sessions.epoch <= EXCLUDED.epoch
RETURNING id
"""
_REFUSED = "SELECT tenant, epoch FROM brain_sessions WHERE id = %s"


class TenantMismatch(StoreError):
    """The id is indexed under another tenant (403 forbidden: metadata tenant mismatch)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id}: metadata tenant mismatch", retryable=False)


class DiscoveryIndex:
    def __init__(self, conninfo: str) -> None:
        self._pool = ConnectionPool(
            conninfo,
            min_size=0,
            max_size=MAX_CONNECTIONS,
            open=False,
            timeout=CONNECT_TIMEOUT_SECONDS,
            kwargs={"connect_timeout": int(CONNECT_TIMEOUT_SECONDS), "autocommit": True},
        )
        self._ready = False
        self._ready_lock = threading.Lock()  # the first callers of a process wait for one schema check

    def _connection(self) -> Any:
        if not self._ready:
            with self._ready_lock:
                if not self._ready:
                    self._pool.open(wait=False)
                    with self._pool.connection() as connection, connection.transaction():
                        connection.execute(_SCHEMA_LOCK)
                        connection.execute(_SCHEMA)
                    self._ready = True
        return self._pool.connection()

    def put(self, session: dict[str, Any], checkpoint: str, *, epoch: int = 0) -> None:
        """Index the session's checkpoint under lease `epoch`: TenantMismatch when the id is
        another tenant's, Fenced when the row was written under a newer epoch."""
        try:
            with self._connection() as connection:
                row = connection.execute(
                    _UPSERT, (session["id"], session["tenant"], Jsonb(session), checkpoint, epoch)
                ).fetchone()
                refused = None if row is not None else connection.execute(_REFUSED, (session["id"],)).fetchone()
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreError(f"discovery index write failed: {exc}", retryable=True, reason=REASON_INDEX) from exc
        if refused is None:
            return
        if refused[0] != session["tenant"]:
            raise TenantMismatch(session["id"])
        stored = int(refused[1])
        raise Fenced(
            f"session {session['id']}: the discovery index holds epoch {stored}, newer than {epoch}",
            stored=stored,
            epoch=epoch,
        )

    def owner(self, session_id: str) -> str | None:
        """The tenant the id is indexed under, if any."""
        try:
            with self._connection() as connection:
                row = connection.execute("SELECT tenant FROM brain_sessions WHERE id = %s", (session_id,)).fetchone()
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreError(f"discovery index read failed: {exc}", retryable=True, reason=REASON_INDEX) from exc
        return str(row[0]) if row else None

    def get(self, tenant: str, session_id: str) -> tuple[dict[str, Any], str] | None:
        try:
            with self._connection() as connection:
                row = connection.execute(
                    "SELECT data, checkpoint FROM brain_sessions WHERE tenant = %s AND id = %s", (tenant, session_id)
                ).fetchone()
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreError(f"discovery index read failed: {exc}", retryable=True, reason=REASON_INDEX) from exc
        return (dict(row[0]), str(row[1])) if row else None

    def list(self, tenant: str, *, after: str, limit: int) -> list[dict[str, Any]]:
        try:
            with self._connection() as connection:
                rows = connection.execute(
                    "SELECT data FROM brain_sessions WHERE tenant = %s AND id > %s ORDER BY id LIMIT %s",
                    (tenant, after, limit),
                ).fetchall()
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreError(f"discovery index read failed: {exc}", retryable=True, reason=REASON_INDEX) from exc
        return [dict(row[0]) for row in rows]

    def delete(self, session_id: str) -> None:
        """Remove the session's entry (a deleted session): listed by no server any more."""
        try:
            with self._connection() as connection:
                connection.execute("DELETE FROM brain_sessions WHERE id = %s", (session_id,))
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreError(f"discovery index write failed: {exc}", retryable=True, reason=REASON_INDEX) from exc

    def close(self) -> None:
        self._pool.close()
