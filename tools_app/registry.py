"""The tool catalog: which tools a tenant may use and their descriptors. It holds the host
config's bindings (with their resolved tokens) and the admin's (cached), compiled once.

Calls do not run here: the config tools' kind (tools_app.invocation.config_tools) looks their
entries up with `entry`. Imports no runtime or API modules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from foundation.hostconfig import ToolBindingConfig
from foundation.tool_schemas import compile_schema
from runners.protocol import ToolDescriptor

from .invocation.config_tools import CatalogEntry
from .origins import token_origins, url_origin

__all__ = ["AdminLoader", "ToolRegistry"]

ADMIN_CACHE_SECONDS = 30.0  # admin saves clear the cache at once; this bounds drift across processes

AdminLoader = Callable[[], Awaitable[Sequence[ToolBindingConfig]]]


def _entry(binding: ToolBindingConfig, token: str | None) -> CatalogEntry:
    output = compile_schema(binding.output_schema) if binding.output_schema is not None else None
    arguments = compile_schema(binding.descriptor()["input_schema"])
    return CatalogEntry(binding=binding, token=token, arguments=arguments, output=output)


def _allowed(entries: Mapping[str, CatalogEntry], tenant: str) -> dict[str, CatalogEntry]:
    return {name: entry for name, entry in entries.items() if tenant in entry.binding.tenants}


def _descriptors(allowed: Mapping[str, CatalogEntry], names: Sequence[str]) -> list[ToolDescriptor] | None:
    if any(name not in allowed for name in names):
        return None
    return [allowed[name].binding.descriptor() for name in names]


class ToolRegistry:
    """The catalog of config tools: the host config's `bindings` (their tokens from
    `tool_tokens`) and the admin's, which `admin_loader` reads (None serves only `bindings`)."""

    def __init__(
        self,
        bindings: Sequence[ToolBindingConfig] = (),
        *,
        tool_tokens: Mapping[str, str] | None = None,
        admin_loader: AdminLoader | None = None,
    ) -> None:
        tokens = tool_tokens or {}
        self._config_entries: dict[str, CatalogEntry] = {}
        for binding in bindings:
            token = tokens.get(binding.name) if binding.token_env else ""
            self._config_entries[binding.name] = _entry(binding, token)
        self._token_origins = token_origins(bindings)
        self._admin_entries: dict[str, CatalogEntry] = {}
        self._admin_expires = 0.0
        self._admin_loader = admin_loader

    def forget_bindings(self) -> None:
        """Reload admin bindings on next use (one was created, changed or deleted in the admin)."""
        self._admin_expires = 0.0

    async def entry(self, name: str) -> CatalogEntry | None:
        """The catalog entry of a config or admin tool, None for no such tool."""
        return (await self._entries()).get(name)

    async def _entries(self) -> Mapping[str, CatalogEntry]:
        if self._admin_loader is None:
            return self._config_entries
        now = time.monotonic()
        if now >= self._admin_expires:
            expires = now + ADMIN_CACHE_SECONDS
            loaded = await self._admin_loader()
            fresh: dict[str, CatalogEntry] = {}
            for binding in loaded:
                if binding.name in self._config_entries:
                    continue  # the config's binding wins; the admin mirrors it read-only
                previous = self._admin_entries.get(binding.name)
                token = self._admin_token(binding)
                fresh[binding.name] = (
                    previous
                    if previous is not None and previous.binding == binding and previous.token == token
                    else _entry(binding, token)
                )
            self._admin_entries = fresh
            self._admin_expires = expires
        if not self._admin_entries:
            return self._config_entries
        return {**self._admin_entries, **self._config_entries}

    def _admin_token(self, binding: ToolBindingConfig) -> str | None:
        """An admin binding's credential: only from a variable the config's tools declare (None
        refuses its calls), so an admin cannot point a tool at any secret of the server."""
        if not binding.token_env:
            return ""
        if url_origin(binding.url) not in self._token_origins.get(binding.token_env, ()):
            return None  # undeclared, or declared for other origins than this binding's URL
        return os.environ.get(binding.token_env) or None

    def catalog_for(self, tenant: str) -> list[ToolDescriptor]:
        """Descriptors of every config tool the tenant may enable; never URLs or credentials."""
        allowed = _allowed(self._config_entries, tenant)
        return [allowed[name].binding.descriptor() for name in sorted(allowed)]

    async def acatalog_for(self, tenant: str) -> list[ToolDescriptor]:
        """Descriptors of every tool (config and admin) the tenant may enable, by name."""
        allowed = _allowed(await self._entries(), tenant)
        return [allowed[name].binding.descriptor() for name in sorted(allowed)]

    def descriptors_for(self, tenant: str, names: Sequence[str]) -> list[ToolDescriptor] | None:
        """Descriptors for `names` in order, or None when one is not available to the tenant."""
        return _descriptors(_allowed(self._config_entries, tenant), names)

    async def adescriptors_for(self, tenant: str, names: Sequence[str]) -> list[ToolDescriptor] | None:
        """As descriptors_for, including admin-created bindings."""
        return _descriptors(_allowed(await self._entries(), tenant), names)

    async def aunavailable_to(self, tenant: str, names: Sequence[str]) -> list[str]:
        """The names of `names` no tool (config or admin) available to the tenant has, in order."""
        allowed = _allowed(await self._entries(), tenant)
        return [name for name in names if name not in allowed]
