"""`revoke_credential --config FILE SESSION ALIAS`: replace a session binding's private
credential with a revocation tombstone, then publish the session. Calls of the binding stop with
an error from then on; they never run without the credential or with another one."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools_app import db

from ._credential_admin import load_config, publish_sessions


class Command(BaseCommand):
    help = "Revoke the private credential of a session's binding, leaving a tombstone."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # manage.py takes `--config FILE` off the command line and passes it on as $BRAIN_CONFIG
        parser.add_argument("--config", default=os.environ.get("BRAIN_CONFIG", "brain.json"))
        parser.add_argument("session", help="the 32-character session id")
        parser.add_argument("alias", help="the binding alias")

    def handle(self, *args: str, **options: object) -> None:
        config, _ = load_config(str(options["config"]))
        session_id, alias = str(options["session"]).lower(), str(options["alias"])
        if not db.revoke_credential(session_id, alias):
            raise CommandError(f"session {session_id} has no live credential for binding {alias!r}")
        self.stdout.write(f"revoked the credential of binding {alias!r} of session {session_id}")
        if publish_sessions(config, [session_id], self.stdout.write):
            raise CommandError("the revocation is recorded, but publishing the session failed")
