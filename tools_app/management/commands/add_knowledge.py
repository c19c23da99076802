"""`add_knowledge --config FILE --tenant T --base NAME PATH...`: read, chunk and index files into
a tenant's knowledge base (created when missing), one line of progress per file. Each file is a
knowledge job run at once in a worker process with the jobs' CPU and memory budgets (outside the
tenant's share of jobs: this is the operator). A file that cannot be read is reported and
skipped; the command fails when any was."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from foundation.hostconfig import ConfigError, load_host_config
from tools_app.ingest.documents import KnowledgeError, KnowledgeJobStatus
from tools_app.providers.knowledge import BASE_NAME, db
from tools_app.providers.knowledge.jobs import JobBudgets, ingest_file_now


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

    def handle(self, *args: str, **options: object) -> None:
        try:
            load_host_config(str(options["config"]))  # its data_dir holds the database (manage.py chose it)
        except ConfigError as exc:
            raise CommandError(exc.report(options["config"])) from exc
        tenant, name, title = str(options["tenant"]), str(options["base"]), str(options["title"])
        given = options["paths"]
        paths = [str(path) for path in given] if isinstance(given, list) else []
        if not tenant:
            raise CommandError("--tenant: must not be empty")
        if not BASE_NAME.fullmatch(name):
            raise CommandError("--base: 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit")
        if title and len(paths) != 1:
            raise CommandError("--title names one document: give one file with it")
        try:
            budgets = JobBudgets.from_environment(os.environ)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        base = db.ensure_knowledge_base(tenant, name, description=str(options["description"]))
        failed = 0
        for index, path in enumerate(paths, 1):
            prefix = f"[{index}/{len(paths)}] {path}"
            try:
                job = ingest_file_now(base.pk, Path(path), source=Path(path).name, title=title, budgets=budgets)
            except (KnowledgeError, OSError) as exc:
                failed += 1
                self.stderr.write(f"{prefix}: not added: {exc}")
                continue
            stored = db.get_document(job.document_id) if job is not None and job.document_id is not None else None
            if job is None or job.status is not KnowledgeJobStatus.DONE or stored is None:
                failed += 1
                reason = job.error.removeprefix(f"{Path(path).name}: ") if job is not None else ""
                self.stderr.write(f"{prefix}: not added: {reason or 'the job did not finish'}")
                continue
            self.stdout.write(
                f"{prefix}: added {stored.title!r} ({stored.media_type}, {stored.size} bytes, "
                f"{stored.chunk_count} chunks) to {tenant}/{name}"
            )
        if failed:
            raise CommandError(f"{failed} of {len(paths)} files were not added")
