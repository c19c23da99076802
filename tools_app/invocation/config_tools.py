"""Config tools as a kind of the call path: the host config's and the admin's bindings, sent
through their transport (http, mcp, rest) or their installed provider (`transport: provider`).

Resolution authorizes (enabled for the session, allowed for the tenant); dispatch checks what
only the binding knows (its credential, session inspection, its provider), sends once under the
binding's deadlines and checks the result. Imports no runtime or API modules.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from jsonschema.protocols import Validator
from opentelemetry.propagate import inject as _inject

from foundation.hostconfig import ToolBindingConfig
from foundation.schema_workers import SchemaWorkers

from ..environments.emits import EmitCapability, EmitGrants
from ..providers.base import ProviderCall
from ..providers.registry import ProviderRegistry
from ..transports.base import HEADER_TIMEOUT_ENV, HEADER_TIMEOUT_SECONDS, OutboundCall, TransportError, Transports
from .path import CallContext, Target
from .provider_calls import run_provider
from .results import CallCancelled, Invocation, Outcome, checked_invocation, detail

__all__ = ["CatalogEntry", "ConfigTools", "InspectionGrants"]


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """A config tool as the catalog holds it: its binding, resolved token and compiled schemas."""

    binding: ToolBindingConfig
    token: str | None  # None: token_env is set but holds no value (a refused call)
    arguments: Validator
    output: Validator | None

    def __repr__(self) -> str:
        return f"CatalogEntry({self.binding.name!r})"


@dataclass(frozen=True, slots=True)
class InspectionGrants:
    """How an `inspect_session` call obtains and revokes its session-limited token: injected by
    the application object, so tools_app never imports sessions_app."""

    grant: Callable[[str, str], str]  # (session_id, tenant) -> token
    revoke: Callable[[str], None]


# Tool services that are given an emit capability with a placed call (a REST API is not one).
EMITTING_TRANSPORTS = frozenset({"http", "mcp"})

EntryLookup = Callable[[str], Awaitable["CatalogEntry | None"]]


class ConfigTools:
    """The config tools' kind. It answers for every name no other kind serves: a name that is
    not an enabled tool of the tenant is refused as not enabled. Values are checked against the
    bindings' schemas on `schemas`, which it owns. The header deadline defaults to
    $BRAIN_TOOL_HEADER_TIMEOUT, else 30 s."""

    def __init__(
        self,
        lookup: EntryLookup,
        *,
        transports: Transports,
        providers: ProviderRegistry,
        inspections: InspectionGrants | None,
        header_timeout: float | None,
        public_url: str,
        schemas: SchemaWorkers,
        emits: EmitGrants | None = None,
    ) -> None:
        self._lookup = lookup
        self._schemas = schemas
        self._transports = transports
        self._providers = providers
        self._inspections = inspections
        if header_timeout is None:
            header_timeout = float(os.environ.get(HEADER_TIMEOUT_ENV) or HEADER_TIMEOUT_SECONDS)
        self.header_timeout = header_timeout
        self._public_url = public_url
        # the emit capabilities of placed calls sent to services (None: their events are not taken)
        self.emits = emits if emits is not None else EmitGrants(None, public_url=public_url)

    def __contains__(self, name: object) -> bool:
        return True

    async def resolve(self, context: CallContext, name: str) -> Target | Invocation:
        entry = await self._lookup(name) if name in context.tools else None
        if entry is None or context.tenant not in entry.binding.tenants:
            return Invocation.failed(f"tool {name!r} is not enabled for this session")
        binding = entry.binding
        dispatch = self._provider_tool if binding.provider_backed else self._send
        return Target(
            arguments=entry.arguments,
            dispatch=partial(dispatch, entry),
            schemas=self._schemas,
            kind="config",
            provider=binding.provider if binding.provider_backed else "",
            require_approval=binding.require_approval,
            approval_timeout_seconds=binding.approval_timeout_seconds,
        )

    async def _provider_tool(
        self, entry: CatalogEntry, context: CallContext, arguments: dict[str, object]
    ) -> Invocation:
        """A provider-backed tool: its provider's operation with the binding's parameters."""
        binding = entry.binding
        provider = self._providers.get(binding.provider)
        if provider is None:
            return Invocation.failed(
                f"tool {binding.name!r} is unavailable: tool provider {binding.provider!r} is not installed"
            )
        if not provider.authorize(context.tenant):
            return Invocation.failed(f"tool {binding.name!r} is unavailable to this tenant")
        call = ProviderCall(
            tenant=context.tenant,
            session_id=context.session_id,
            call_id=context.call_id,
            alias="",
            operation=binding.operation,
            arguments=arguments,
            parameters=binding.parameters,
            credential=None,
            progress=context.progress,
        )
        timeout = min(float(binding.timeout_seconds), provider.deadline(binding.operation))
        return await run_provider(
            provider, call, name=binding.name, output=entry.output, timeout=timeout, schemas=self._schemas
        )

    async def _send(self, entry: CatalogEntry, context: CallContext, arguments: dict[str, object]) -> Invocation:
        binding, name = entry.binding, entry.binding.name
        if entry.token is None:
            return Invocation.failed(f"tool {name!r} is unavailable: its credential ({binding.token_env}) is not set")
        inspection_token = ""
        if binding.inspect_session:
            if self._inspections is None:
                return Invocation.failed(f"tool {name!r} is unavailable: session inspection is not enabled")
            inspection_token = self._inspections.grant(context.session_id, context.tenant)
        emit: EmitCapability | None = None
        if context.emit is not None and binding.effective_transport in EMITTING_TRANSPORTS:
            emit = self.emits.grant(context.session_id, context.call_id, context.emit, seconds=binding.timeout_seconds)
        try:
            call = OutboundCall(
                url=binding.url,
                remote_name=binding.mcp_tool or binding.name,
                token=entry.token,
                tenant=context.tenant,
                session_id=context.session_id,
                call_id=context.call_id,
                arguments=arguments,
                progress=context.progress,
                max_output_bytes=binding.max_output_bytes,
                header_timeout=min(self.header_timeout, float(binding.timeout_seconds)),
                traceparent=context.traceparent or _current_traceparent(),
                inspection_token=inspection_token,
                brain_url=self._public_url if inspection_token else "",
                rest=binding.rest_template(),
                emit_url=emit.url if emit is not None else "",
                emit_token=emit.token if emit is not None else "",
            )
            try:
                async with asyncio.timeout(binding.timeout_seconds):
                    raw = await self._transports.get(binding.effective_transport).call(call)
            except asyncio.CancelledError:
                raise CallCancelled(name) from None
            except TimeoutError:
                return Invocation.failed(
                    f"tool {name!r} timed out after {binding.timeout_seconds} s; remote outcome unknown",
                    outcome=Outcome.TIMEOUT,
                )
            except TransportError as exc:
                suffix = "; remote outcome may be unknown" if exc.reached else ""
                return Invocation.failed(
                    detail(f"tool {name!r} failed: {exc}{suffix}"),
                    outcome=Outcome.UNKNOWN if exc.reached else Outcome.ERROR,
                )
        finally:
            if inspection_token and self._inspections is not None:
                self._inspections.revoke(inspection_token)
            if emit is not None:
                self.emits.revoke(context.call_id)
        return await checked_invocation(raw, entry.output, name, schemas=self._schemas)

    async def aclose(self) -> None:
        """Close pooled connections and the schema threads (shutdown)."""
        await self._transports.aclose()
        self._schemas.close()


def _current_traceparent() -> str:
    """The active OpenTelemetry span's traceparent, when a tracer is configured."""
    carrier: dict[str, str] = {}
    _inject(carrier)
    return carrier.get("traceparent", "")
