"""Tool registry: which tools a tenant may use, their descriptors, and dispatch of calls.

authorize -> validate arguments -> credential -> (inspection token) -> dispatch once under the
deadlines -> validate the result. Every failure becomes an `is_error` result; `unknown_outcome`
is set exactly when the request may have reached the tool. Imports no runtime or API modules.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from jsonschema import FormatChecker
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from opentelemetry.propagate import inject as _inject

from brainsite.hostconfig import ToolBindingConfig

from .transports.base import OutboundCall, TransportError, close_transports, transport_for

__all__ = [
    "HEADER_TIMEOUT_SECONDS",
    "CallCancelled",
    "CallContext",
    "acatalog_for",
    "adescriptors_for",
    "aclose",
    "catalog_for",
    "descriptors_for",
    "error_result",
    "forget_bindings",
    "install",
    "invoke",
]

HEADER_TIMEOUT_SECONDS = 30.0  # spec: response headers within 30 s, even for long SSE tools
HEADER_TIMEOUT_ENV = "BRAIN_TOOL_HEADER_TIMEOUT"  # tests shorten the header deadline with it
ADMIN_CACHE_SECONDS = 30.0  # admin saves clear the cache at once; this bounds drift across processes
RESULT_FIELDS = frozenset({"content", "is_error", "structured_content", "unknown_outcome"})
CONTENT_FIELDS = {"text": frozenset({"type", "text"}), "image": frozenset({"type", "data", "mime_type"})}
MAX_ERROR_DETAIL = 300  # characters of a validation message shown to the model

_format_checker = FormatChecker()


@dataclass(frozen=True, slots=True)
class CallContext:
    """The trusted identity of one call, kept apart from the model's arguments."""

    tenant: str
    session_id: str
    call_id: str
    tools: tuple[str, ...]  # the tools enabled for the session
    progress: Callable[[Any], None]
    traceparent: str = ""  # W3C trace context of the turn, forwarded to the tool when set


@dataclass(frozen=True, slots=True)
class _Entry:
    binding: ToolBindingConfig
    token: str | None  # None: token_env is set but holds no value (a refused call)
    arguments: Validator
    output: Validator | None

    def __repr__(self) -> str:
        return f"_Entry({self.binding.name!r})"


AdminLoader = Callable[[], Awaitable[Sequence[ToolBindingConfig]]]

_config_entries: dict[str, _Entry] = {}
_admin_entries: dict[str, _Entry] = {}
_admin_expires = 0.0
_admin_loader: AdminLoader | None = None
_public_url = ""
_header_timeout = HEADER_TIMEOUT_SECONDS


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """A validator for `schema` that checks `format`; raises jsonschema.SchemaError if invalid."""
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=_format_checker)


def _entry(binding: ToolBindingConfig, token: str | None) -> _Entry:
    output = compile_schema(binding.output_schema) if binding.output_schema is not None else None
    return _Entry(binding=binding, token=token, arguments=compile_schema(binding.input_schema), output=output)


def install(
    bindings: Sequence[ToolBindingConfig],
    *,
    tool_tokens: Mapping[str, str] | None = None,
    public_url: str = "",
    header_timeout: float | None = None,
    admin_loader: AdminLoader | None | bool = True,
) -> None:
    """Serve `bindings` (the host config's, with their resolved tokens) plus admin-created ones.

    `admin_loader=True` reads admin bindings from the database; None or False serves only
    `bindings`. The header deadline defaults to $BRAIN_TOOL_HEADER_TIMEOUT, else 30 s.
    """
    global _admin_loader, _public_url, _header_timeout
    tokens = tool_tokens or {}
    _config_entries.clear()
    for binding in bindings:
        token = tokens.get(binding.name) if binding.token_env else ""
        _config_entries[binding.name] = _entry(binding, token)
    if admin_loader is True:
        from . import db

        _admin_loader = db.aload_admin_bindings
    else:
        _admin_loader = admin_loader or None
    _public_url = public_url.rstrip("/")
    if header_timeout is None:
        header_timeout = float(os.environ.get(HEADER_TIMEOUT_ENV) or HEADER_TIMEOUT_SECONDS)
    _header_timeout = header_timeout
    forget_bindings()


def forget_bindings() -> None:
    """Reload admin bindings on next use (one was created, changed or deleted in the admin)."""
    global _admin_expires
    _admin_expires = 0.0


async def _entries() -> Mapping[str, _Entry]:
    global _admin_expires
    if _admin_loader is None:
        return _config_entries
    now = time.monotonic()
    if now >= _admin_expires:
        expires = now + ADMIN_CACHE_SECONDS
        loaded = await _admin_loader()
        fresh: dict[str, _Entry] = {}
        for binding in loaded:
            if binding.name in _config_entries:
                continue  # the config's binding wins; the admin mirrors it read-only
            previous = _admin_entries.get(binding.name)
            token = os.environ.get(binding.token_env) or None if binding.token_env else ""
            fresh[binding.name] = (
                previous
                if previous is not None and previous.binding == binding and previous.token == token
                else _entry(binding, token)
            )
        _admin_entries.clear()
        _admin_entries.update(fresh)
        _admin_expires = expires
    if not _admin_entries:
        return _config_entries
    return {**_admin_entries, **_config_entries}


def _allowed(entries: Mapping[str, _Entry], tenant: str) -> dict[str, _Entry]:
    return {name: entry for name, entry in entries.items() if tenant in entry.binding.tenants}


def catalog_for(tenant: str) -> list[dict[str, Any]]:
    """Descriptors of every config tool the tenant may enable; never URLs or credentials."""
    allowed = _allowed(_config_entries, tenant)
    return [allowed[name].binding.descriptor() for name in sorted(allowed)]


async def acatalog_for(tenant: str) -> list[dict[str, Any]]:
    """Descriptors of every tool (config and admin) the tenant may enable, by name."""
    allowed = _allowed(await _entries(), tenant)
    return [allowed[name].binding.descriptor() for name in sorted(allowed)]


def descriptors_for(tenant: str, names: Sequence[str]) -> list[dict[str, Any]] | None:
    """Descriptors for `names` in order, or None when one is not available to the tenant."""
    return _descriptors(_allowed(_config_entries, tenant), names)


async def adescriptors_for(tenant: str, names: Sequence[str]) -> list[dict[str, Any]] | None:
    """As descriptors_for, including admin-created bindings."""
    return _descriptors(_allowed(await _entries(), tenant), names)


def _descriptors(allowed: Mapping[str, _Entry], names: Sequence[str]) -> list[dict[str, Any]] | None:
    if any(name not in allowed for name in names):
        return None
    return [allowed[name].binding.descriptor() for name in names]


def error_result(message: str, *, unknown_outcome: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": message}], "is_error": True}
    if unknown_outcome:
        result["unknown_outcome"] = True
    return result


class _InvalidResult(Exception):
    pass


def _check_content(content: Any) -> None:
    if not isinstance(content, list):
        raise _InvalidResult("content must be an array")
    for index, item in enumerate(content):
        kind = item.get("type") if isinstance(item, dict) else None
        fields = CONTENT_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            raise _InvalidResult(f"content[{index}] has an unknown type")
        if item.keys() != fields or not all(isinstance(item[key], str) for key in fields):
            raise _InvalidResult(f"content[{index}] must have exactly the string fields {', '.join(sorted(fields))}")
        if item["type"] == "image":
            try:
                base64.b64decode(item["data"], validate=True)
            except (binascii.Error, ValueError):
                raise _InvalidResult(f"content[{index}].data is not base64") from None


def _check_result(value: Any, entry: _Entry) -> dict[str, Any]:
    """The tool's result, strictly checked; a structured-only result gets a JSON text block."""
    if not isinstance(value, dict):
        raise _InvalidResult("the result must be a JSON object")
    unknown = value.keys() - RESULT_FIELDS
    if unknown:
        raise _InvalidResult(f"unknown result field {sorted(unknown)[0]!r}")
    for key in ("is_error", "unknown_outcome"):
        if key in value and not isinstance(value[key], bool):
            raise _InvalidResult(f"{key} must be a boolean")
    content = value.get("content")
    if content is not None:
        _check_content(content)
    structured = value.get("structured_content")
    if not content and structured is None:
        raise _InvalidResult("the result has neither content nor structured_content")
    is_error = value.get("is_error") is True
    if structured is not None and not is_error and entry.output is not None:
        problem = best_match(entry.output.iter_errors(structured))
        if problem is not None:
            raise _InvalidResult(f"structured_content does not match output_schema: {problem.message}")
    result: dict[str, Any] = {"content": content or [{"type": "text", "text": orjson.dumps(structured).decode()}]}
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


async def invoke(context: CallContext, name: str, arguments: Any) -> dict[str, Any]:
    """Run one call and return the model-visible result. Never raises for tool failures.

    Cancellation (interrupt, close) propagates after the inspection token is revoked: as
    CancelledError before the request is sent, as CallCancelled once it may have reached the
    service, so the caller can set `unknown_outcome` exactly.
    """
    entry = (await _entries()).get(name) if name in context.tools else None
    if entry is None or context.tenant not in entry.binding.tenants:
        return error_result(f"tool {name!r} is not enabled for this session")
    binding = entry.binding
    if not isinstance(arguments, dict):
        return error_result(f"invalid arguments for {name}: arguments must be a JSON object")
    problem = best_match(entry.arguments.iter_errors(arguments))
    if problem is not None:
        where = "/".join(str(part) for part in problem.absolute_path)
        return error_result(
            _detail(f"invalid arguments for {name}{' at ' + where if where else ''}: {problem.message}")
        )
    if entry.token is None:
        return error_result(f"tool {name!r} is unavailable: its credential ({binding.token_env}) is not set")
    inspection_token = ""
    if binding.inspect_session:
        from sessions_app.auth import grant_inspection

        inspection_token = grant_inspection(context.session_id, context.tenant)
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
            header_timeout=min(_header_timeout, float(binding.timeout_seconds)),
            traceparent=context.traceparent or _current_traceparent(),
            inspection_token=inspection_token,
            brain_url=_public_url if inspection_token else "",
        )
        try:
            async with asyncio.timeout(binding.timeout_seconds):
                raw = await transport_for(binding.effective_transport).call(call)
        except asyncio.CancelledError:
            raise CallCancelled(name) from None
        except TimeoutError:
            return error_result(
                f"tool {name!r} timed out after {binding.timeout_seconds} s; remote outcome unknown",
                unknown_outcome=True,
            )
        except TransportError as exc:
            suffix = "; remote outcome may be unknown" if exc.reached else ""
            return error_result(_detail(f"tool {name!r} failed: {exc}{suffix}"), unknown_outcome=exc.reached)
    finally:
        if inspection_token:
            from sessions_app.auth import revoke_inspection

            revoke_inspection(inspection_token)
    try:
        return _check_result(raw, entry)
    except _InvalidResult as exc:
        return error_result(_detail(f"tool {name!r} returned an invalid result: {exc}"), unknown_outcome=True)


async def aclose() -> None:
    """Close pooled connections (shutdown, and between test event loops)."""
    await close_transports()
