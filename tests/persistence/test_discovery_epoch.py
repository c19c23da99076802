"""The discovery index fences its upserts with the lease epoch, on a real PostgreSQL: an older
epoch than the row's is refused and changes nothing, a single instance's epoch 0 upserts as
before, and a table created before the epoch column existed gets it at epoch 0."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from persistence_app.discovery import DiscoveryIndex, TenantMismatch
from persistence_app.stores.base import REASON_FENCED, Fenced
from tests.fixtures.services import PostgresServer

OLD_SCHEMA = """
CREATE TABLE brain_sessions (
    id text PRIMARY KEY,
    tenant text NOT NULL,
    data jsonb NOT NULL,
    checkpoint text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""


@pytest.fixture
def index_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"brain_index_{secrets.token_hex(4)}")


@pytest.fixture
def index(index_url: str) -> Iterator[DiscoveryIndex]:
    opened = DiscoveryIndex(index_url)
    yield opened
    opened.close()


def session(tenant: str = "acme") -> dict[str, str]:
    return {"id": secrets.token_hex(16), "tenant": tenant, "status": "idle"}


def rows(url: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(url) as connection:
        return [
            (str(row[0]), str(row[1]), int(row[2]))
            for row in connection.execute("SELECT id, checkpoint, epoch FROM brain_sessions ORDER BY id")
        ]


def test_an_upsert_under_an_older_epoch_is_refused_and_changes_nothing(index: DiscoveryIndex, index_url: str) -> None:
    # given: the successor indexed the session under epoch 3
    record = session()
    index.put(record, "b" * 32, epoch=2)
    index.put(record, "c" * 32, epoch=3)
    # when: the former owner (epoch 2) indexes its older checkpoint
    with pytest.raises(Fenced) as refused:
        index.put({**record, "status": "running"}, "a" * 32, epoch=2)
    # then
    assert (refused.value.stored, refused.value.epoch, refused.value.reason) == (3, 2, REASON_FENCED)
    assert rows(index_url) == [(record["id"], "c" * 32, 3)]
    assert index.get("acme", record["id"]) == (record, "c" * 32)


def test_the_same_epoch_and_a_newer_one_upsert(index: DiscoveryIndex, index_url: str) -> None:
    # given
    record = session()
    index.put(record, "a" * 32, epoch=1)
    # when
    index.put(record, "b" * 32, epoch=1)
    index.put(record, "c" * 32, epoch=4)
    # then
    assert rows(index_url) == [(record["id"], "c" * 32, 4)]


def test_a_single_instance_upserts_at_epoch_zero_and_another_tenant_is_still_refused(
    index: DiscoveryIndex, index_url: str
) -> None:
    # given
    record = session()
    index.put(record, "a" * 32)
    index.put(record, "b" * 32)
    # when
    with pytest.raises(TenantMismatch):
        index.put({**record, "tenant": "globex"}, "c" * 32, epoch=9)
    # then
    assert rows(index_url) == [(record["id"], "b" * 32, 0)]


def test_a_table_created_without_the_epoch_column_gets_it_at_zero(index_url: str) -> None:
    # given: an operator's table of the previous schema, with a row in it
    with psycopg.connect(index_url, autocommit=True) as connection:
        connection.execute(OLD_SCHEMA)
        connection.execute(
            "INSERT INTO brain_sessions (id, tenant, data, checkpoint) VALUES ('s1', 'acme', '{}', %s)", ("a" * 32,)
        )
    index = DiscoveryIndex(index_url)
    try:
        # when
        index.put({"id": "s2", "tenant": "acme"}, "b" * 32)
        index.put({"id": "s1", "tenant": "acme"}, "c" * 32, epoch=1)
        # then
        assert rows(index_url) == [("s1", "c" * 32, 1), ("s2", "b" * 32, 0)]
    finally:
        index.close()
