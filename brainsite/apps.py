"""brainsite as an installed app, so Django finds the server's management commands (runbrain,
check_brain_config, syncworker); and the admin app as Brain installs it: Django's admin on
BrainAdminSite (a throttled login). While any Host header is accepted (the admin is
cookie-authenticated) a deploy check warns, and so does a log line when the process starts.
Imports no models: app configs load before them.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.apps import AppConfig
from django.conf import settings
from django.contrib.admin.apps import AdminConfig
from django.core import checks

from brainsite.hosts import ANY_HOST
from foundation.logs import logger

__all__ = ["BrainAdminConfig", "BrainsiteConfig", "check_allowed_hosts"]


class BrainsiteConfig(AppConfig):
    """The wiring package: no models, only the server's management commands."""

    name = "brainsite"


class BrainAdminConfig(AdminConfig):
    default_site = "brainsite.admin_site.BrainAdminSite"

    def ready(self) -> None:
        super().ready()
        checks.register(check_allowed_hosts, checks.Tags.security, deploy=True)
        if ANY_HOST in settings.ALLOWED_HOSTS:
            logger.warning("any Host header is accepted: set BRAIN_ALLOWED_HOSTS to the names clients use")


def check_allowed_hosts(app_configs: Sequence[AppConfig] | None, **kwargs: object) -> list[checks.CheckMessage]:
    if ANY_HOST not in settings.ALLOWED_HOSTS:
        return []
    return [
        checks.Warning(
            "Any Host header is accepted: the listen address is a wildcard and BRAIN_ALLOWED_HOSTS is unset.",
            hint="Set BRAIN_ALLOWED_HOSTS to the comma-separated names clients use to reach Brain.",
            id="brain.W001",
        )
    ]
