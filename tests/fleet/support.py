"""Fleets of real `runbrain` instances for the fleet journeys: one database, one shared
filesystem archive and one set of tokens, instances started by name."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.server import BrainServer
from tests.fixtures.services import PostgresServer

SECRET = secrets.token_hex(32)


def fleet_factory(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    tmp_path: Path,
    *,
    lease_seconds: int,
    database_prefix: str = "brain_fleet",
) -> Callable[[str], BrainServer]:
    """A factory of fleet instances by name; the first one's tokens and environment serve all."""
    database = postgres_server.create_database(f"{database_prefix}_{secrets.token_hex(4)}")
    archive = tmp_path / "archive"
    archive.mkdir()
    first: list[BrainServer] = []

    def instance(name: str) -> BrainServer:
        persistence: dict[str, Any] = {"provider": "filesystem", "directory": str(archive)}
        server = brain_factory(start=False, persistence=persistence)
        server.config["cluster"] = {
            "instance": name,
            "url": server.url,
            "lease_seconds": lease_seconds,
            "shared_directory": True,
        }
        if first:  # one fleet, one set of tokens
            server.tokens = first[0].tokens
            server.env = {**first[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        else:
            server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": SECRET}
            first.append(server)
        server.start()
        return server

    return instance
