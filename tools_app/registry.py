"""Tool registry: which tools a tenant may use, their descriptors, and dispatch of calls.

authorize -> validate arguments -> credential -> (inspection token) -> dispatch once under the
deadlines -> validate the result. Every failure becomes an `is_error` result; `unknown_outcome`
is set exactly when the request may have reached the tool. Imports no runtime or API modules.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypedDict

import orjson
from jsonschema.protocols import Validator
from opentelemetry.propagate import inject as _inject

from foundation.app_object import SCOPE_KEY
from foundation.hostconfig import ToolBindingConfig
from foundation.tool_schemas import compile_schema, first_error, first_error_off_loop
from runners.protocol import ToolDescriptor

from .origins import token_origins, url_origin
from .providers.base import ProviderCall, ProviderError, ToolProvider, TurnEffects
from .providers.registry import ProviderRegistry
from .transports.base import OutboundCall, Transport, TransportError, Transports

__all__ = [
    "HEADER_TIMEOUT_SECONDS",
    "AdminLoader",
    "ApprovalGate",
    "CallCancelled",
    "CallContext",
    "InspectionGrants",
    "InvalidResult",
    "Invocation",
    "Outcome",
    "ToolRegistry",
    "ToolResult",
    "check_result",
    "checked_invocation",
    "compile_schema",
    "error_result",
    "invoke_provider",
    "registry_of",
]

HEADER_TIMEOUT_SECONDS = 30.0  # spec: response headers within 30 s, even for long SSE tools
HEADER_TIMEOUT_ENV = "BRAIN_TOOL_HEADER_TIMEOUT"  # tests shorten the header deadline with it
ADMIN_CACHE_SECONDS = 30.0  # admin saves clear the cache at once; this bounds drift across processes
RESULT_FIELDS = frozenset({"content", "is_error", "structured_content", "unknown_outcome"})
CONTENT_FIELDS = {"text": frozenset({"type", "text"}), "image": frozenset({"type", "data", "mime_type"})}
MAX_ERROR_DETAIL = 300  # characters of a validation message shown to the model


class ApprovalGate(Protocol):
    """Asks a person to decide on one call of a tool that requires approval (the session
    runtime's, injected per call), so tools_app never imports sessions_app."""

    async def __call__(self, name: str, arguments: dict[str, Any], *, timeout_seconds: int) -> Invocation | None:
        """None once approved (dispatch the call); else the result that replaces it (rejected,
        expired). Raises CancelledError when an interrupt cancels the wait."""


@dataclass(frozen=True, slots=True)
class CallContext:
    """The trusted identity of one call, kept apart from the model's arguments."""

    tenant: str
    session_id: str
    call_id: str
    tools: tuple[str, ...]  # the tools enabled for the session
    progress: Callable[[Any], None]
    traceparent: str = ""  # W3C trace context of the turn, forwarded to the tool when set
    approval: ApprovalGate | None = None  # None: calls of tools that require approval are refused


@dataclass(frozen=True, slots=True)
class _Entry:
    binding: ToolBindingConfig
    token: str | None  # None: token_env is set but holds no value (a refused call)
    arguments: Validator
    output: Validator | None

    def __repr__(self) -> str:
        return f"_Entry({self.binding.name!r})"


AdminLoader = Callable[[], Awaitable[Sequence[ToolBindingConfig]]]


class ToolResult(TypedDict, total=False):
    """The model-visible result of one call (openapi `ToolResult`)."""

    content: list[dict[str, str]]
    structured_content: Any
    is_error: bool
    unknown_outcome: bool


@dataclass(frozen=True, slots=True)
class InspectionGrants:
    """How the registry obtains and revokes the session-limited token of an `inspect_session`
    call: injected by the application object, so tools_app never imports sessions_app."""

    grant: Callable[[str, str], str]  # (session_id, tenant) -> token
    revoke: Callable[[str], None]


def _entry(binding: ToolBindingConfig, token: str | None) -> _Entry:
    output = compile_schema(binding.output_schema) if binding.output_schema is not None else None
    arguments = compile_schema(binding.descriptor()["input_schema"])
    return _Entry(binding=binding, token=token, arguments=arguments, output=output)


def _allowed(entries: Mapping[str, _Entry], tenant: str) -> dict[str, _Entry]:
    return {name: entry for name, entry in entries.items() if tenant in entry.binding.tenants}


def _descriptors(allowed: Mapping[str, _Entry], names: Sequence[str]) -> list[ToolDescriptor] | None:
    if any(name not in allowed for name in names):
        return None
    return [allowed[name].binding.descriptor() for name in names]


class ToolRegistry:
    """The tools of this process: the host config's bindings (with their resolved tokens) plus
    admin-created ones, their compiled schemas, and the transports that carry calls.

    `admin_loader` reads admin bindings (None serves only `bindings`). The header deadline
    defaults to $BRAIN_TOOL_HEADER_TIMEOUT, else 30 s. `transports` replaces the transport
    instances by name (fault tests inject clients with httpx.MockTransport).
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
        self._providers = providers if providers is not None else ProviderRegistry()
        self._config_entries: dict[str, _Entry] = {}
        for binding in bindings:
            token = tokens.get(binding.name) if binding.token_env else ""
            self._config_entries[binding.name] = _entry(binding, token)
        self._token_origins = token_origins(bindings)
        self._admin_entries: dict[str, _Entry] = {}
        self._admin_expires = 0.0
        self._admin_loader = admin_loader
        self._public_url = public_url.rstrip("/")
        if header_timeout is None:
            header_timeout = float(os.environ.get(HEADER_TIMEOUT_ENV) or HEADER_TIMEOUT_SECONDS)
        self._header_timeout = header_timeout
        self._inspections = inspections
        self._transports = Transports(transports)

    def forget_bindings(self) -> None:
        """Reload admin bindings on next use (one was created, changed or deleted in the admin)."""
        self._admin_expires = 0.0

    async def _entries(self) -> Mapping[str, _Entry]:
        if self._admin_loader is None:
            return self._config_entries
        now = time.monotonic()
        if now >= self._admin_expires:
            expires = now + ADMIN_CACHE_SECONDS
            loaded = await self._admin_loader()
            fresh: dict[str, _Entry] = {}
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

    async def invoke(self, context: CallContext, name: str, arguments: Any) -> ToolResult:
        """invoke_call() without the outcome."""
        return (await self.invoke_call(context, name, arguments)).result

    async def invoke_call(self, context: CallContext, name: str, arguments: Any) -> Invocation:
        """Run one call and return the model-visible result with its outcome. Never raises for
        tool failures.

        Cancellation (interrupt, close) propagates after the inspection token is revoked: as
        CancelledError before the request is sent, as CallCancelled once it may have reached
        the service, so the caller can set `unknown_outcome` exactly.
        """
        entry = (await self._entries()).get(name) if name in context.tools else None
        if entry is None or context.tenant not in entry.binding.tenants:
            return Invocation.failed(f"tool {name!r} is not enabled for this session")
        binding = entry.binding
        if not isinstance(arguments, dict):
            return Invocation.failed(f"invalid arguments for {name}: arguments must be a JSON object")
        problem = await first_error_off_loop(entry.arguments, arguments)
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path)
            return Invocation.failed(
                _detail(f"invalid arguments for {name}{' at ' + where if where else ''}: {problem.message}")
            )
        if binding.require_approval:
            if context.approval is None:
                return Invocation.failed(f"tool {name!r} requires approval, which this call cannot ask for")
            refused = await context.approval(name, arguments, timeout_seconds=binding.approval_timeout_seconds)
            if refused is not None:
                return refused
        if binding.provider_backed:
            return await self._invoke_provider_tool(context, entry, arguments)
        if entry.token is None:
            return Invocation.failed(f"tool {name!r} is unavailable: its credential ({binding.token_env}) is not set")
        inspection_token = ""
        if binding.inspect_session:
            if self._inspections is None:
                return Invocation.failed(f"tool {name!r} is unavailable: session inspection is not enabled")
            inspection_token = self._inspections.grant(context.session_id, context.tenant)
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
                header_timeout=min(self._header_timeout, float(binding.timeout_seconds)),
                traceparent=context.traceparent or _current_traceparent(),
                inspection_token=inspection_token,
                brain_url=self._public_url if inspection_token else "",
                rest=binding.rest_template(),
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
                    _detail(f"tool {name!r} failed: {exc}{suffix}"),
                    outcome=Outcome.UNKNOWN if exc.reached else Outcome.ERROR,
                )
        finally:
            if inspection_token and self._inspections is not None:
                self._inspections.revoke(inspection_token)
        return await checked_invocation(raw, entry.output, name)

    async def _invoke_provider_tool(self, context: CallContext, entry: _Entry, arguments: dict[str, Any]) -> Invocation:
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
        return await invoke_provider(provider, call, name=binding.name, output=entry.output, timeout=timeout)

    async def aclose(self) -> None:
        """Close pooled connections (shutdown)."""
        await self._transports.aclose()


async def invoke_provider(
    provider: ToolProvider, call: ProviderCall, *, name: str, output: Validator | None, timeout: float
) -> Invocation:
    """Run `provider.handle(call)` once under `timeout`: a ProviderError that reached the service
    is an unknown outcome, one that did not an error; cancellation once handle() started raises
    CallCancelled (it may have acted). A provider with `turn_events` gets a TurnEffects collector;
    what it recorded travels with a successful Invocation."""
    effects = TurnEffects(provider.turn_events) if provider.turn_events else None
    if effects is not None:
        call = dataclasses.replace(call, effects=effects)
    try:
        async with asyncio.timeout(timeout) as deadline:
            raw = await provider.handle(call)
    except asyncio.CancelledError:
        raise CallCancelled(name) from None
    except TimeoutError:
        if not deadline.expired():  # the provider's own TimeoutError: it ran and failed
            return Invocation.failed(
                f"tool {name!r} failed: TimeoutError; remote outcome unknown", outcome=Outcome.UNKNOWN
            )
        return Invocation.failed(
            f"tool {name!r} timed out after {timeout:g} s; remote outcome unknown", outcome=Outcome.TIMEOUT
        )
    except ProviderError as exc:
        suffix = "; remote outcome may be unknown" if exc.reached else ""
        return Invocation.failed(
            _detail(f"tool {name!r} failed: {exc}{suffix}"), outcome=Outcome.UNKNOWN if exc.reached else Outcome.ERROR
        )
    invocation = await checked_invocation(raw, output, name)
    if effects is None or invocation.outcome is not Outcome.OK:
        return invocation
    return dataclasses.replace(invocation, events=tuple(effects.events), end_turn=effects.end_turn)


def registry_of(scope: Mapping[str, Any]) -> ToolRegistry:
    """The registry of the application object the ASGI entry attached to this scope."""
    registry: ToolRegistry = scope[SCOPE_KEY].registry
    return registry


class Outcome(StrEnum):
    """How a call ended, recorded beside its result (tool.result `outcome`)."""

    OK = "ok"
    ERROR = "error"  # known not to have happened, or the tool reported a failure
    TIMEOUT = "timeout"  # the deadline passed; the remote outcome is unknown
    CANCELLED = "cancelled"  # an interrupt or close stopped it
    UNKNOWN = "unknown"  # it may have run; its result cannot be established


@dataclass(frozen=True, slots=True)
class Invocation:
    result: ToolResult
    outcome: Outcome
    # events the call records in the session's log before its tool.result (a provider's
    # `turn_events`), and whether the model's turn ends once the runner has this result
    events: tuple[tuple[str, Any], ...] = ()
    end_turn: bool = False

    @classmethod
    def failed(cls, message: str, *, outcome: Outcome = Outcome.ERROR) -> Invocation:
        unknown = outcome in (Outcome.TIMEOUT, Outcome.UNKNOWN, Outcome.CANCELLED)
        return cls(error_result(message, unknown_outcome=unknown), outcome)


async def checked_invocation(raw: Any, output: Validator | None, name: str) -> Invocation:
    """A tool's raw result object, strictly checked (an invalid one is an unknown outcome).
    Checked against an output schema in a worker thread: the tenant's schema and the tool's
    value (up to max_output_bytes) decide the cost, never the event loop's."""
    try:
        if output is None:
            result = check_result(raw, output)
        else:
            result = await asyncio.to_thread(check_result, raw, output)
    except InvalidResult as exc:
        return Invocation.failed(_detail(f"tool {name!r} returned an invalid result: {exc}"), outcome=Outcome.UNKNOWN)
    if not result.get("is_error"):
        return Invocation(result, Outcome.OK)
    return Invocation(result, Outcome.UNKNOWN if result.get("unknown_outcome") else Outcome.ERROR)


def error_result(message: str, *, unknown_outcome: bool = False) -> ToolResult:
    result: ToolResult = {"content": [{"type": "text", "text": message}], "is_error": True}
    if unknown_outcome:
        result["unknown_outcome"] = True
    return result


class InvalidResult(Exception):
    pass


def _check_content(content: Any) -> None:
    if not isinstance(content, list):
        raise InvalidResult("content must be an array")
    for index, item in enumerate(content):
        kind = item.get("type") if isinstance(item, dict) else None
        fields = CONTENT_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            raise InvalidResult(f"content[{index}] has an unknown type")
        if item.keys() != fields or not all(isinstance(item[key], str) for key in fields):
            raise InvalidResult(f"content[{index}] must have exactly the string fields {', '.join(sorted(fields))}")
        if item["type"] == "image":
            try:
                base64.b64decode(item["data"], validate=True)
            except (binascii.Error, ValueError):
                raise InvalidResult(f"content[{index}].data is not base64") from None


def check_result(value: Any, output: Validator | None) -> ToolResult:
    """The tool's result, strictly checked; a structured-only result gets a JSON text block."""
    if not isinstance(value, dict):
        raise InvalidResult("the result must be a JSON object")
    unknown = value.keys() - RESULT_FIELDS
    if unknown:
        raise InvalidResult(f"unknown result field {sorted(unknown)[0]!r}")
    for key in ("is_error", "unknown_outcome"):
        if key in value and not isinstance(value[key], bool):
            raise InvalidResult(f"{key} must be a boolean")
    content = value.get("content")
    if content is not None:
        _check_content(content)
    structured = value.get("structured_content")
    if not content and structured is None:
        raise InvalidResult("the result has neither content nor structured_content")
    is_error = value.get("is_error") is True
    if structured is not None and not is_error and output is not None:
        problem = first_error(output, structured)
        if problem is not None:
            raise InvalidResult(f"structured_content does not match output_schema: {problem.message}")
    result: ToolResult = {"content": content or [{"type": "text", "text": orjson.dumps(structured).decode()}]}
    if structured is not None:
        result["structured_content"] = structured
    if is_error:
        result["is_error"] = True
        if value.get("unknown_outcome") is True:
            result["unknown_outcome"] = True
    return result


def _current_traceparent() -> str:
    """The active OpenTelemetry span's traceparent, when a tracer is configured."""
    carrier: dict[str, str] = {}
    _inject(carrier)
    return carrier.get("traceparent", "")


def _detail(message: str) -> str:
    return message if len(message) <= MAX_ERROR_DETAIL else message[: MAX_ERROR_DETAIL - 1] + "…"


class CallCancelled(Exception):
    """The call was cancelled (interrupt, close) after its request went to the service."""
