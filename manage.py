#!/usr/bin/env python
"""Django's command-line utility. `--config FILE` also picks the data directory before setup."""

from __future__ import annotations

import os
import sys

EVENT_LOOP_ENV = "BRAIN_EVENT_LOOP"  # "asyncio" runs runbrain on the standard library's loop


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
    commands other than CONFIG_COMMANDS do not see the option.
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
    except ConfigError:
        return False  # the command itself reports the error with the field name
    return True


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "brainsite.settings")
    _choose_event_loop(sys.argv)
    if _preselect_data_dir(sys.argv):
        from brainsite.management.host_config import prepare_config_command

        prepare_config_command(sys.argv)  # umask 077, then migrations, as runbrain does
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
