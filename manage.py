#!/usr/bin/env python
"""Django's command-line utility. `--config FILE` also picks the data directory before setup;
an interpreter without Brain's dependencies is refused in one line before anything is imported."""

from __future__ import annotations

import importlib.util
import os
import sys

# What Django needs to load Brain's settings and apps, by import name, with the distribution in
# requirements.txt that provides it. Checked before anything is imported, so an interpreter without
# them (the system python3 instead of .venv/bin/python) gets one line, not a traceback from
# whichever import happens to fail first.
REQUIRED_MODULES = {
    "django": "Django",
    "django_stubs_ext": "django-stubs-ext",
    "asgiref": "asgiref",
    "channels": "channels",
    "daphne": "daphne",
    "twisted": "Twisted",
    "ninja": "django-ninja",
    "pydantic": "pydantic",
    "psycopg": "psycopg",
    "httpx": "httpx",
    "jsonschema": "jsonschema",
    "re2": "google-re2",
    "referencing": "referencing",
    "orjson": "orjson",
    "cryptography": "cryptography",
    "servestatic": "servestatic",
    "uvloop": "uvloop",
    "celery": "celery",
    "redis": "redis",
}
NAMED_MISSING = 3  # a bare interpreter lacks them all: the line names a few and counts the rest
EVENT_LOOP_ENV = "BRAIN_EVENT_LOOP"  # "asyncio" runs runbrain on the standard library's loop


def _check_dependencies(argv: list[str]) -> None:
    """Exit with one line naming the missing modules and the fix when this interpreter lacks
    what Brain needs."""
    missing = [name for name in REQUIRED_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return
    named = ", ".join(missing[:NAMED_MISSING]) + (
        f" and {len(missing) - NAMED_MISSING} more" if len(missing) > NAMED_MISSING else ""
    )
    command = " ".join(["manage.py", *argv[1:2]]) + (" ..." if len(argv) > 2 else "")
    raise SystemExit(
        f"manage.py: {sys.executable} lacks Brain's dependencies (no module named {named}): "
        f"run `make bootstrap` once, then `.venv/bin/python {command}`"
    )


def _choose_event_loop(argv: list[str]) -> None:
    """runbrain runs on uvloop (measured faster: bench/turn_bench.py, README). The policy must be
    set before Daphne's module creates the loop Twisted's reactor runs on."""
    choice = os.environ.get(EVENT_LOOP_ENV, "uvloop")
    if choice not in ("uvloop", "asyncio"):
        raise SystemExit(f"{EVENT_LOOP_ENV} must be uvloop or asyncio, not {choice!r}")
    if len(argv) > 1 and argv[1] == "runbrain" and choice == "uvloop":
        import asyncio

        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


CONFIG_COMMANDS = ("runbrain", "check_brain_config", "syncworker")  # commands that take --config themselves


def _preselect_data_dir(argv: list[str]) -> bool:
    """Point settings at the config's data_dir (for metadata.sqlite) before Django loads; True
    when a valid config was named.

    Any command accepts `--config FILE` (e.g. `createsuperuser --config examples/local.json`);
    commands other than CONFIG_COMMANDS do not see the option, and stop with one line per
    problem when the file is not a valid config.
    """
    from foundation.hostconfig import ConfigError, load_host_config

    path = None
    keep = len(argv) > 1 and argv[1] in CONFIG_COMMANDS
    for index, arg in enumerate(list(argv)):
        if arg == "--config" and index + 1 < len(argv):
            path = argv[index + 1]
            if not keep:
                del argv[index : index + 2]
            break
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
            if not keep:
                del argv[index]
            break
    if path is None and len(argv) > 1 and argv[1] == "runbrain":
        path = "brain.json"
    if path is None:
        return False
    os.environ["BRAIN_CONFIG"] = path
    try:
        os.environ["BRAIN_DATA_DIR"] = load_host_config(path).data_dir
    except ConfigError as exc:
        if keep:
            return False  # the command itself reports every problem with its field name
        # any other command would work on the default data dir instead of the config's
        raise SystemExit(exc.report(path)) from exc
    return True


def main() -> None:
    _check_dependencies(sys.argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "brainsite.settings")
    _choose_event_loop(sys.argv)
    _preselect_data_dir(sys.argv)
    from brainsite.management.host_config import prepare_command

    # umask 077, then migrations, as runbrain does: on the config's data dir, or without
    # --config on the embedded database in $BRAIN_DATA_DIR (default .brain) or $BRAIN_DATABASE_URL
    prepare_command(sys.argv)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
