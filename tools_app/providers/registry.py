"""The installed providers of this process: `BRAIN_TOOL_PROVIDERS` loaded once at startup.

Each entry is `name -> {"class": "package.module.Class", "options": {...}}`. A class that cannot
be imported, is not a ToolProvider, or rejects its options refuses startup (ProviderConfigError).
Imports no Django and nothing of sessions_app.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping

from foundation.logs import logger

from .base import ProviderConfigError, ProviderEnvironment, ToolProvider

__all__ = ["SETTING", "ProviderRegistry", "load_providers"]

SETTING = "BRAIN_TOOL_PROVIDERS"
PROVIDER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
ENTRY_KEYS = frozenset({"class", "options"})


class ProviderRegistry(Mapping[str, ToolProvider]):
    """Installed providers by name; read-only once built."""

    def __init__(self, providers: Mapping[str, ToolProvider] | None = None) -> None:
        self._providers = dict(providers or {})

    def __getitem__(self, name: str) -> ToolProvider:
        return self._providers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._providers)

    def __len__(self) -> int:
        return len(self._providers)

    def __repr__(self) -> str:
        return f"ProviderRegistry({sorted(self._providers)})"

    async def aclose(self) -> None:
        """Close every provider (shutdown); one provider's failure does not keep others open."""
        providers, self._providers = self._providers, {}
        for name, provider in providers.items():
            try:
                await provider.aclose()
            except Exception:  # supervision boundary: operator-installed code, and the rest must close
                logger.exception("tool provider did not close cleanly", extra={"provider": name})


def _provider_class(name: str, path: object) -> type[ToolProvider]:
    where = f"{SETTING}.{name}.class"
    if not isinstance(path, str) or "." not in path:
        raise ProviderConfigError(f"{where}: must be a dotted path to a ToolProvider class")
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import runs operator code: any failure refuses startup
        raise ProviderConfigError(f"{where}: cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not issubclass(cls, ToolProvider):
        raise ProviderConfigError(f"{where}: {path} is not a ToolProvider class")
    if getattr(cls, "__abstractmethods__", None):
        raise ProviderConfigError(f"{where}: {path} does not implement {', '.join(sorted(cls.__abstractmethods__))}")
    return cls


def load_providers(spec: object, *, environment: ProviderEnvironment) -> ProviderRegistry:
    """Import and build every configured provider, or raise ProviderConfigError for the first
    that cannot be installed."""
    if spec is None:
        return ProviderRegistry()
    if not isinstance(spec, Mapping):
        raise ProviderConfigError(f"{SETTING}: must map provider names to {{class, options}}")
    providers: dict[str, ToolProvider] = {}
    for name, entry in spec.items():
        if not isinstance(name, str) or not PROVIDER_NAME.fullmatch(name):
            raise ProviderConfigError(f"{SETTING}: provider name {name!r} must be 1-64 of A-Z a-z 0-9 _ -")
        if not isinstance(entry, Mapping) or "class" not in entry or not entry.keys() <= ENTRY_KEYS:
            raise ProviderConfigError(f"{SETTING}.{name}: must be {{class, options}}")
        options = entry.get("options", {})
        if not isinstance(options, Mapping):
            raise ProviderConfigError(f"{SETTING}.{name}.options: must be an object")
        cls = _provider_class(name, entry["class"])
        try:
            providers[name] = cls(name, dict(options), environment=environment)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError too
            raise ProviderConfigError(f"{SETTING}.{name}.options: {exc}") from exc
    return ProviderRegistry(providers)
