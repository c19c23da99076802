"""The tool catalog: which tools a tenant may use and their descriptors. It holds the host
config's bindings (with their resolved tokens) and the admin's (cached), compiled once.

Calls do not run here: `invoke_call` hands them to the one call path (tools_app.invocation),
with the config tools as the last kind. Imports no runtime or API modules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from foundation.hostconfig import ToolBindingConfig
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema
from runners.protocol import ToolDescriptor

from .invocation.config_tools import CatalogEntry, ConfigTools, InspectionGrants
from .invocation.path import CallContext, ToolKind, invoke_tool
from .invocation.results import CallResult, Invocation
from .origins import token_origins, url_origin
from .providers.registry import ProviderRegistry
from .transports.base import Transport, Transports

__all__ = [
    "HEADER_TIMEOUT_ENV",
    "HEADER_TIMEOUT_SECONDS",
    "AdminLoader",
    "InspectionGrants",
    "ToolRegistry",
]

HEADER_TIMEOUT_SECONDS = 30.0  # spec: response headers within 30 s, even for long SSE tools
HEADER_TIMEOUT_ENV = "BRAIN_TOOL_HEADER_TIMEOUT"  # tests shorten the header deadline with it
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
    """The tools of this process: the catalog, and the config tools' kind that sends their calls.

    `admin_loader` reads admin bindings (None serves only `bindings`). The header deadline
    defaults to $BRAIN_TOOL_HEADER_TIMEOUT, else 30 s. `transports` replaces the transport
    instances by name (fault tests inject clients with httpx.MockTransport). Calls' values are
    checked against the config tools' schemas on `schemas`, a pool of the registry's own.
    """

    def __init__(
        self,
        bindings: Sequence[ToolBindingConfig] = (),
        *,
        tool_tokens: Mapping[str, str] | None = None,
        public_url: str = "",
        header_timeout: float | None = None,
        admin_loader: AdminLoader | None = None,
        inspections: InspectionGrants | None = None,
        transports: Mapping[str, Transport] | None = None,
        providers: ProviderRegistry | None = None,
    ) -> None:
        tokens = tool_tokens or {}
        self.schemas = SchemaWorkers(name="brain-config-schemas")
        self._config_entries: dict[str, CatalogEntry] = {}
        for binding in bindings:
            token = tokens.get(binding.name) if binding.token_env else ""
            self._config_entries[binding.name] = _entry(binding, token)
        self._token_origins = token_origins(bindings)
        self._admin_entries: dict[str, CatalogEntry] = {}
        self._admin_expires = 0.0
        self._admin_loader = admin_loader
        if header_timeout is None:
            header_timeout = float(os.environ.get(HEADER_TIMEOUT_ENV) or HEADER_TIMEOUT_SECONDS)
        self.config_tools = ConfigTools(
            self._lookup,
            transports=Transports(transports),
            providers=providers if providers is not None else ProviderRegistry(),
            inspections=inspections,
            header_timeout=header_timeout,
            public_url=public_url.rstrip("/"),
            schemas=self.schemas,
        )

    def forget_bindings(self) -> None:
        """Reload admin bindings on next use (one was created, changed or deleted in the admin)."""
        self._admin_expires = 0.0

    async def _lookup(self, name: str) -> CatalogEntry | None:
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

    async def invoke(self, context: CallContext, name: str, arguments: object) -> CallResult:
        """invoke_call() without the outcome."""
        return (await self.invoke_call(context, name, arguments)).result

    async def invoke_call(
        self, context: CallContext, name: str, arguments: object, *, bindings: ToolKind | None = None
    ) -> Invocation:
        """One call through the call path: the session's `bindings` first, then the config tools."""
        kinds = (bindings, self.config_tools) if bindings is not None else (self.config_tools,)
        return await invoke_tool(context, name, arguments, kinds=kinds)

    async def aclose(self) -> None:
        """Close pooled connections and the schema threads (shutdown)."""
        await self.config_tools.aclose()
        self.schemas.close()
