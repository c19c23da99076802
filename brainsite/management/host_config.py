"""How the server's commands (runbrain, check_brain_config, syncworker) load the host config:
one refusal wording for a bad file, a missing variable or a provider that cannot be installed;
and what every command does first (manage.py): umask 077, then migrations."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError

from foundation.hostconfig import ConfigError, HostConfig, Secrets, load_config_and_secrets

if TYPE_CHECKING:
    from tools_app.providers.registry import ProviderRegistry

__all__ = [
    "PRIVATE_UMASK",
    "install_providers",
    "load_checked_config",
    "migrate_database",
    "prepare_command",
    "refuse_unstartable_harnesses",
    "refusing_bad_providers",
]

# Sessions are private: the data dir, logs, checkpoints, native files and the SQLite database are
# readable by Brain's user only, whichever command creates them first.
PRIVATE_UMASK = 0o077
# Commands that do not migrate first: runbrain migrates itself (unless
# --skip-migrate), check_brain_config only reads, and the rest are about migrations or help.
NOT_MIGRATING_FIRST = frozenset(
    {
        "runbrain",
        "check_brain_config",
        "migrate",
        "makemigrations",
        "showmigrations",
        "sqlmigrate",
        "squashmigrations",
        "optimizemigration",
        "help",
        "version",
        "collectstatic",
    }
)
# collectstatic writes files a reverse proxy (another user) may serve: not under the umask
NOT_PRIVATE = frozenset({"collectstatic"})
HELP_FLAGS = frozenset({"-h", "--help", "--version"})
# pg_advisory_lock key ("brainmig" in ASCII): one migrating process at a time per database
MIGRATION_LOCK_KEY = 0x627261696E6D6967


def prepare_command(argv: Sequence[str]) -> None:
    """What manage.py does before a command runs, with `--config` (its data dir) or without (the
    embedded database in $BRAIN_DATA_DIR, default `.brain`, or $BRAIN_DATABASE_URL): the private
    umask (before the settings create the data dir and SQLite its database), then the database
    migrated, as runbrain does, so a fresh data dir never meets a missing table."""
    command = argv[1] if len(argv) > 1 else "help"
    if command not in NOT_PRIVATE:
        os.umask(PRIVATE_UMASK)
    if command in NOT_MIGRATING_FIRST or HELP_FLAGS.intersection(argv):
        return
    import django

    django.setup()
    migrate_database()


def migrate_database() -> None:
    """`migrate`, one process at a time per database: a server and its sync worker (or a fleet's
    instances) started together would otherwise both create the same tables and one fail.
    SQLite: a flock on the data dir; PostgreSQL: an advisory lock, held on a connection of its own
    for the migration."""
    from django.conf import settings
    from django.core.management import call_command

    database = settings.DATABASES["default"]
    with _migration_lock(database):
        call_command("migrate", verbosity=0, interactive=False)


@contextlib.contextmanager
def _migration_lock(database: dict[str, Any]) -> Iterator[None]:
    if str(database["ENGINE"]).endswith("sqlite3"):
        import fcntl

        directory = os.open(Path(str(database["NAME"])).parent, os.O_RDONLY)
        try:
            fcntl.flock(directory, fcntl.LOCK_EX)  # released when the descriptor is closed
            yield
        finally:
            os.close(directory)
        return
    import psycopg

    parameters = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}
    given = {key: database[name] for key, name in parameters.items() if database.get(name)}
    with psycopg.connect(**given, autocommit=True) as connection:
        connection.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        yield  # the lock ends with its connection


def load_checked_config(path: str) -> tuple[HostConfig, Secrets]:
    """The config at `path` and the secrets its environment variables hold; a CommandError
    naming the file and every problem found otherwise, one line each."""
    try:
        return load_config_and_secrets(path)
    except ConfigError as exc:
        raise CommandError(exc.report(path)) from exc


def install_providers(config: HostConfig) -> ProviderRegistry:
    """The tool providers the settings install, built before anything listens: one that cannot
    be installed refuses the command."""
    from brainsite.application import install_tool_providers  # the application object's module

    with refusing_bad_providers():
        return install_tool_providers(config)


@contextlib.contextmanager
def refusing_bad_providers() -> Iterator[None]:
    """A provider that cannot be installed or cannot bind its tools refuses the command."""
    from tools_app.providers.base import ProviderConfigError

    try:
        yield
    except ProviderConfigError as exc:
        raise CommandError(f"invalid tool provider: {exc}") from exc


def refuse_unstartable_harnesses(config: HostConfig) -> None:
    """A configured harness whose runtime is missing (the pi harness without Node 20.6+ or its
    packages) refuses the command in one line, before anything listens."""
    from sessions_app.harness.pi_check import pi_harness_problems

    problems = pi_harness_problems(config.harnesses)
    if problems:
        raise CommandError(f"cannot start: {'; '.join(problems)}")
