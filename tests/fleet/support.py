"""Fleets of real `runbrain` instances for the fleet journeys: one database, one archive (a shared
directory unless told otherwise) and one set of tokens, instances started by name."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.server import BrainServer
from tests.fixtures.services import PostgresServer
from tools_app.relay_records import Records
from tools_app.relay_seal import RelaySeal

SECRET = secrets.token_hex(32)


def fleet_records() -> Records:
    """The executor relay's records as the fleets built here seal them (a bind made by hand)."""
    return Records(RelaySeal(SECRET.encode()))


def fleet_factory(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    tmp_path: Path,
    *,
    lease_seconds: int,
    database_prefix: str = "brain_fleet",
    persistence: dict[str, Any] | None = None,
    environment: dict[str, str] | None = None,
    database_settings: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
) -> Callable[..., BrainServer]:
    """A factory of fleet instances by name; the first one's tokens and environment serve all.
    `persistence` replaces the shared directory under `tmp_path` (an object store: then the
    cluster block says no shared directory), `environment` adds to the instances' variables;
    `instance(name, **settings)` overrides persistence settings of one instance (its
    `interval_seconds`, say). `database_settings` are PostgreSQL settings of the fleet's database
    for every connection the instances open (`log_statement`, say). `config`: host config
    sections every instance gets (its `harnesses`, `providers` and `tools`, say)."""
    name = f"{database_prefix}_{secrets.token_hex(4)}"
    database = postgres_server.create_database(name)
    if database_settings:
        import psycopg
        from psycopg import sql

        with psycopg.connect(postgres_server.database_url("postgres"), autocommit=True) as connection:
            for setting, value in database_settings.items():
                connection.execute(f'ALTER DATABASE "{name}" SET {setting} = {sql.quote(value)}')
    if persistence is None:
        archive = tmp_path / "archive"
        archive.mkdir()
        persistence = {"provider": "filesystem", "directory": str(archive)}
    shared_directory = persistence["provider"] == "filesystem"
    first: list[BrainServer] = []

    def instance(name: str, **settings: Any) -> BrainServer:
        server = brain_factory(start=False, persistence={**persistence, **settings}, **(config or {}))
        server.config["cluster"] = {"instance": name, "url": server.url, "lease_seconds": lease_seconds}
        if shared_directory:
            server.config["cluster"]["shared_directory"] = True
        if first:  # one fleet, one set of tokens
            server.tokens = first[0].tokens
            server.env = {**first[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        else:
            server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": SECRET, **(environment or {})}
            first.append(server)
        server.start()
        return server

    return instance
