"""`rotate_credentials --config FILE`: re-encrypt every private session credential that is not
sealed under the active `credential_keys` key, then publish the sessions it changed.

Idempotent: a second run finds nothing to do. A record that cannot be opened (its key is no
longer configured, or it fails authentication) is reported and left as it is.
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools_app import db
from tools_app.vault import CredentialUnavailable, CredentialVault

from ._credential_admin import load_config, publish_sessions

BATCH = 200  # records read per query; each is re-encrypted and written on its own


class Command(BaseCommand):
    help = "Re-encrypt private session credentials with the active credential key."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # manage.py takes `--config FILE` off the command line and passes it on as $BRAIN_CONFIG
        parser.add_argument("--config", default=os.environ.get("BRAIN_CONFIG", "brain.json"))

    def handle(self, *args: str, **options: object) -> None:
        config, secrets = load_config(str(options["config"]))
        vault = CredentialVault.configured(config.credential_keys, secrets)
        if vault is None:
            raise CommandError("the host config has no credential_keys")
        total = db.count_credentials_to_rotate(vault.active)
        self.stdout.write(f"{total} credential(s) to re-encrypt with key {vault.active!r}")
        rotated, skipped, changed = 0, 0, set()
        after = 0
        while batch := db.credentials_to_rotate(vault.active, after=after, limit=BATCH):
            for stored in batch:
                after = stored.pk
                try:
                    sealed = vault.rotate(stored.sealed, stored.tenant, stored.session_id, stored.alias)
                except CredentialUnavailable as exc:
                    skipped += 1
                    self.stderr.write(f"session {stored.session_id}: {exc}")
                    continue
                if db.replace_sealed_credential(stored, sealed):
                    rotated += 1
                    changed.add(stored.session_id)
            self.stdout.write(f"re-encrypted {rotated}/{total}")
        failed = publish_sessions(config, changed, self.stdout.write)
        self.stdout.write(f"done: {rotated} re-encrypted, {skipped} could not be opened")
        if skipped or failed:
            raise CommandError(f"{skipped} credential(s) could not be re-encrypted, {failed} publish(es) failed")
