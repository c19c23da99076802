"""How the server's commands (runbrain, check_brain_config, syncworker) load the host config:
one refusal wording for a bad file, a missing variable or a provider that cannot be installed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from django.core.management.base import CommandError

from foundation.hostconfig import ConfigError, HostConfig, Secrets, load_host_config, resolve_secrets

if TYPE_CHECKING:
    from tools_app.providers.registry import ProviderRegistry

__all__ = ["install_providers", "load_checked_config", "refusing_bad_providers"]


def load_checked_config(path: str) -> tuple[HostConfig, Secrets]:
    """The config at `path` and the secrets its environment variables hold; a CommandError
    naming the file and the problem otherwise."""
    try:
        config = load_host_config(path)
        return config, resolve_secrets(config)
    except ConfigError as exc:
        raise CommandError(f"invalid config {path}: {exc}") from exc


def install_providers(config: HostConfig) -> ProviderRegistry:
    """The tool providers the settings install, built before anything listens: one that cannot
    be installed refuses the command."""
    from brainsite.application import install_tool_providers  # the application object's module

    with refusing_bad_providers():
        return install_tool_providers(config)


@contextlib.contextmanager
def refusing_bad_providers() -> Iterator[None]:
    """A provider that cannot be installed or cannot bind its tools refuses the command."""
    from tools_app.providers.base import ProviderConfigError

    try:
        yield
    except ProviderConfigError as exc:
        raise CommandError(f"invalid tool provider: {exc}") from exc
