"""`check_brain_config --config FILE`: validate the host config and its environment, then exit."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from foundation.hostconfig import ConfigError, load_host_config, resolve_secrets


class Command(BaseCommand):
    help = "Validate a Brain host config file and the environment variables it names."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", default="brain.json")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = load_host_config(options["config"])
            resolve_secrets(config)
        except ConfigError as exc:
            raise CommandError(f"invalid config {options['config']}: {exc}") from exc
        from brainsite.application import install_tool_providers
        from tools_app.providers.base import ProviderConfigError

        try:
            providers = install_tool_providers(config)
            installed = sorted(providers)
            asyncio.run(_checked_provider_tools(config, providers))
        except ProviderConfigError as exc:
            raise CommandError(f"invalid tool provider: {exc}") from exc
        self.stdout.write(f"config {options['config']} is valid")
        if installed:
            self.stdout.write(f"tool providers installed: {', '.join(installed)}")


async def _checked_provider_tools(config: Any, providers: Any) -> None:
    """Bind every provider-backed tool as runbrain would, then close what the providers opened."""
    from tools_app.provider_tools import resolve_provider_tools

    try:
        await resolve_provider_tools(config, providers)
    finally:
        await providers.aclose()
