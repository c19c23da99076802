"""A real PostgreSQL database for the fleet's rows, migrated by fleet_app's own migration.

The test process's default database is SQLite (settings read BRAIN_DATABASE_URL before any
server could start), so the fleet database is a Django alias of its own, added for the module,
and every fleet unit takes it as `using` / `database`, as a server passes "default".
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from pytest_django import DjangoDbBlocker

from fleet_app.models import Instance, JournalEntry, SessionLease
from tests.fixtures.services import PostgresServer


def add_database(alias: str, config: dict[str, str]) -> None:
    """Make `alias` a Django database, as if DATABASES had named it from the start."""
    configured = connections.configure_settings({"default": settings.DATABASES["default"], alias: dict(config)})
    connections.settings[alias] = configured[alias]  # connections.settings is settings.DATABASES


def drop_database(alias: str) -> None:
    connections.close_all()
    del connections.settings[alias]


def postgres_alias(
    postgres_server: PostgresServer,
    django_db_blocker: DjangoDbBlocker,
    *,
    prefix: str,
    migrate_to: list[tuple[str, str]] | None = None,
) -> str:
    """A new database on the test PostgreSQL as a Django alias, migrated to `migrate_to` (every
    app's latest migration when None)."""
    name = f"brain_{prefix}_{secrets.token_hex(4)}"
    postgres_server.create_database(name)
    alias = f"{prefix}_{secrets.token_hex(4)}"
    config = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": postgres_server.user,
        "HOST": "127.0.0.1",
        "PORT": str(postgres_server.port),
    }
    add_database(alias, config)
    with django_db_blocker.unblock():
        executor = MigrationExecutor(connections[alias])
        executor.migrate(migrate_to if migrate_to is not None else executor.loader.graph.leaf_nodes())
        connections[alias].close()
    return alias


@pytest.fixture(scope="module")
def fleet_alias(postgres_server: PostgresServer, django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    alias = postgres_alias(
        postgres_server, django_db_blocker, prefix="fleet", migrate_to=[("fleet_app", "0003_lease_incarnation")]
    )
    yield alias
    drop_database(alias)


@pytest.fixture
def fleet_db(fleet_alias: str, django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    """The fleet database alias, its tables emptied, open to the test and its threads."""
    tables = ", ".join(model._meta.db_table for model in (Instance, SessionLease, JournalEntry))
    with django_db_blocker.unblock():
        with connections[fleet_alias].cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY")
        yield fleet_alias
