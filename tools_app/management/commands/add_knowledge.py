"""`add_knowledge --config FILE --tenant T --base NAME PATH...`: read, chunk and index files into
a tenant's knowledge base (created when missing), one line of progress per file. A file that
cannot be read is reported and skipped; the command fails when any was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from brainsite.hostconfig import ConfigError, load_host_config
from tools_app import db
from tools_app.knowledge import MAX_DOCUMENT_BYTES, KnowledgeError, parse_document
from tools_app.providers.knowledge import BASE_NAME


class Command(BaseCommand):
    help = "Add text, Markdown, HTML or PDF files to a tenant's knowledge base."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # manage.py takes `--config FILE` off the command line and passes it on as $BRAIN_CONFIG
        parser.add_argument("--config", default=os.environ.get("BRAIN_CONFIG", "brain.json"))
        parser.add_argument("--tenant", required=True, help="the tenant the knowledge base belongs to")
        parser.add_argument("--base", required=True, help="the knowledge base's name (created when missing)")
        parser.add_argument("--description", default="", help="a new knowledge base's description")
        parser.add_argument("--title", default="", help="the document's title (one file only)")
        parser.add_argument("paths", nargs="+", help="files to add")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            load_host_config(options["config"])  # its data_dir holds the database (manage.py chose it)
        except ConfigError as exc:
            raise CommandError(f"invalid config {options['config']}: {exc}") from exc
        tenant, name, paths = options["tenant"], options["base"], options["paths"]
        if not tenant:
            raise CommandError("--tenant: must not be empty")
        if not BASE_NAME.fullmatch(name):
            raise CommandError("--base: 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit")
        if options["title"] and len(paths) != 1:
            raise CommandError("--title names one document: give one file with it")
        base = db.ensure_knowledge_base(tenant, name, description=options["description"])
        failed = 0
        for index, path in enumerate(paths, 1):
            prefix = f"[{index}/{len(paths)}] {path}"
            try:
                document = parse_document(_read(Path(path)), Path(path).name, title=options["title"])
            except (KnowledgeError, OSError) as exc:
                failed += 1
                self.stderr.write(f"{prefix}: not added: {exc}")
                continue
            stored = db.add_document(base.pk, document, source=Path(path).name)
            self.stdout.write(
                f"{prefix}: added {stored.title!r} ({stored.media_type}, {stored.size} bytes, "
                f"{stored.chunk_count} chunks) to {tenant}/{name}"
            )
        if failed:
            raise CommandError(f"{failed} of {len(paths)} files were not added")


def _read(path: Path) -> bytes:
    """The file's bytes, refusing one over the size bound before reading it all."""
    with path.open("rb") as stream:
        data = stream.read(MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise KnowledgeError(f"file too large: more than {MAX_DOCUMENT_BYTES} bytes")
    return data
