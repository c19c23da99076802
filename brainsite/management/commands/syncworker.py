"""`syncworker --config FILE`: Celery workers that publish this host's dirty sessions and run
its knowledge jobs (each in a budgeted child process).

Run on the server's host, from the same working directory, with the same data dir and
environment; the server dispatches work through the broker in $BRAIN_CELERY_BROKER.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from brainsite.management.host_config import PRIVATE_UMASK, load_checked_config


class Command(BaseCommand):
    help = "Start Celery workers that upload checkpoints of this host's sessions."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # manage.py takes `--config FILE` off the command line of commands it does not list and
        # passes it on as $BRAIN_CONFIG (after pointing the settings at its data_dir)
        parser.add_argument("--config", default=os.environ.get("BRAIN_CONFIG", "brain.json"))
        parser.add_argument("--concurrency", type=int, default=2, help="worker processes (default 2)")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: str, **options: object) -> None:
        config_path = str(options["config"])
        config, _ = load_checked_config(config_path)
        if config.persistence is None:  # knowledge jobs still come through the broker
            self.stderr.write("the host config has no persistence block: this worker runs knowledge jobs only")
        if not settings.CELERY_BROKER_URL:
            raise CommandError("BRAIN_CELERY_BROKER is not set: sync workers need a broker (redis://...)")
        concurrency = options["concurrency"]
        if not isinstance(concurrency, int) or concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        os.environ["BRAIN_CONFIG"] = config_path
        os.umask(PRIVATE_UMASK)  # uploaded.json and lock files stay private, as in the server

        from brainsite.celery import app

        app.worker_main(
            [
                "worker",
                f"--loglevel={options['loglevel']}",
                f"--concurrency={concurrency}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
        )
