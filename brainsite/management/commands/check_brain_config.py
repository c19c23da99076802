"""`check_brain_config --config FILE`: validate the host config and its environment, then exit."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from django.core.management.base import BaseCommand, CommandParser

from brainsite.management.host_config import (
    install_providers,
    load_checked_config,
    refuse_unstartable_harnesses,
    refusing_bad_providers,
)

if TYPE_CHECKING:
    from foundation.hostconfig import HostConfig
    from tools_app.providers.registry import ProviderRegistry


class Command(BaseCommand):
    help = "Validate a Brain host config file and the environment variables it names."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", default="brain.json")

    def handle(self, *args: str, **options: object) -> None:
        config, _ = load_checked_config(str(options["config"]))
        refuse_unstartable_harnesses(config)
        providers = install_providers(config)
        installed = sorted(providers)
        with refusing_bad_providers():
            asyncio.run(_checked_provider_tools(config, providers))
        self.stdout.write(f"config {options['config']} is valid")
        if installed:
            self.stdout.write(f"tool providers installed: {', '.join(installed)}")


async def _checked_provider_tools(config: HostConfig, providers: ProviderRegistry) -> None:
    """Bind every provider-backed tool as runbrain would, then close what the providers opened."""
    from tools_app.provider_tools import resolve_provider_tools

    try:
        await resolve_provider_tools(config, providers)
    finally:
        await providers.aclose()
