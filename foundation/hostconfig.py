"""The host config file (reference-configuration): strict decoding, defaults, ranges, env checks.

Imports no Django, so `manage.py` can read `data_dir` before settings load.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runners.protocol import ToolDescriptor

from .rest_templates import RestTemplate, TemplateError, check_rest_template

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_KEY_ID_CHARS",
    "ConfigError",
    "HostConfig",
    "Limits",
    "Secrets",
    "load_host_config",
    "parse_host_config",
    "resolve_secrets",
]

MAX_CONFIG_BYTES = 4 << 20  # spec: configuration files are limited to 4 MiB
MIN_TOKEN_BYTES = 24  # spec: token values must be at least 24 bytes
AES_KEY_BYTES = 32  # spec: credential keys are base64-encoded 32-byte AES keys
MAX_KEY_ID_CHARS = 128  # each sealed credential stores its key id in an indexed column
TOOL_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,63}$")  # used with fullmatch: `$` alone admits a trailing "\n"
SESSION_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_APPROVAL_SECONDS = 7 * 86400  # a call waits at most a week for a person's decision
MAX_SCHEMA_PROBLEM = 200  # characters of a schema refusal quoted in a config error


class ConfigError(ValueError):
    """An invalid host config; the message names the offending field."""


class _FieldProblem(ValueError):
    """Raised by a model-level check to name the field at fault (pydantic locates it at the model)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _check_url(value: str, *, allow_query: bool = True) -> str:
    """The caller's field location names the URL, so the messages don't repeat it."""
    try:
        parts = urlsplit(value)
        hostname = parts.hostname
        parts.port  # noqa: B018  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"must be a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not hostname:
        raise ValueError("must be an absolute http or https URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain credentials")
    if parts.fragment or "#" in value:
        raise ValueError("must not contain a fragment")
    if not allow_query and (parts.query or "?" in value):
        raise ValueError("must not contain query parameters")
    return value


class TokenGrant(_Strict):
    token_env: str = Field(min_length=1)
    tenant: str
    session: str = ""
    manage: bool = False
    read_only: bool = False

    @field_validator("tenant")
    @classmethod
    def _tenant_length(cls, value: str) -> str:
        if not 1 <= len(value.encode()) <= 128:
            raise ValueError("tenant must be 1-128 bytes")
        return value

    @field_validator("session")
    @classmethod
    def _session_id(cls, value: str) -> str:
        if value and not SESSION_ID.fullmatch(value):
            raise ValueError("session must be a 32-character lowercase hex session ID")
        return value


class Harness(_Strict):
    command: list[str] = Field(min_length=1)
    max_shared: int = Field(default=8, ge=1, le=1024)
    max_active_turns: int | None = Field(default=None, ge=1)
    max_hosts: int = Field(default=16, ge=1)
    max_starting: int = Field(default=4, ge=1)
    # how a turn's tool calls run: all at once (as the model asked for them), or one at a time
    # in the model's order, each starting when the previous one has its result
    tool_execution: Literal["parallel", "sequential"] = "parallel"

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("command[0] must be non-empty")
        return value

    @model_validator(mode="after")
    def _active_within_shared(self) -> Harness:
        if self.max_active_turns is not None and self.max_active_turns > self.max_shared:
            raise _FieldProblem("max_active_turns", "must be between 1 and max_shared")
        return self

    @property
    def active_turns(self) -> int:
        return self.max_active_turns or self.max_shared


class Provider(_Strict):
    api_key_env: str = Field(min_length=1)
    base_url: str = ""
    api: str = ""

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return _check_url(value) if value else value


TOOL_TRANSPORTS = ("http", "mcp", "provider", "rest")


class ToolBindingConfig(_Strict):
    """One operator tool. `transport: provider` serves it through an installed tool provider's
    `operation` with `parameters` (no url); its description and input schema default to the
    provider's descriptor, filled in at startup (tools_app.provider_tools)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    url: str = ""
    tenants: list[str] = Field(min_length=1)
    token_env: str = ""
    transport: str = ""
    mcp_tool: str = ""
    # transport "rest": a plain REST request filled from the arguments (foundation.rest_templates)
    method: str = ""
    query: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None
    timeout_seconds: int = Field(default=300, ge=1, le=86400)
    max_output_bytes: int = Field(default=1 << 20, ge=1, le=2 << 20)
    inspect_session: bool = False
    # confirm before: each call waits for a person's decision (POST .../approvals/{id}) and is
    # an error result when rejected or when no decision arrives within approval_timeout_seconds
    require_approval: bool = False
    approval_timeout_seconds: int = Field(default=600, ge=1, le=MAX_APPROVAL_SECONDS)
    provider: str = ""
    operation: str = ""
    parameters: Any = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME.fullmatch(value):
            raise ValueError("name must match ^[a-zA-Z][a-zA-Z0-9_]{0,63}$")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value) if value else value

    @model_validator(mode="after")
    def _transport(self) -> ToolBindingConfig:
        if self.inspect_session and self.mcp_tool:
            raise _FieldProblem("inspect_session", "cannot be combined with mcp_tool")
        transport = self.effective_transport
        if transport not in TOOL_TRANSPORTS:
            raise _FieldProblem("transport", f"unknown transport {transport!r}")
        if transport == "provider":
            self._check_provider_fields()
        else:
            for key in ("provider", "operation", "parameters"):
                if getattr(self, key) not in (None, ""):
                    raise _FieldProblem(key, "belongs to transport provider")
            for key in ("url", "description", "input_schema"):
                if getattr(self, key) in (None, ""):
                    raise _FieldProblem(key, f"is required by transport {transport}")
        if transport == "mcp" and not self.mcp_tool:
            raise _FieldProblem("mcp_tool", "is required by transport mcp")
        for key in ("input_schema", "output_schema"):
            schema = getattr(self, key)
            if schema is None:
                continue
            from .tool_schemas import schema_problem  # jsonschema loads only when a config has tools

            problem = schema_problem(schema)
            if problem:
                raise _FieldProblem(key, f"tool {self.name!r}: {problem[:MAX_SCHEMA_PROBLEM]}")
        self._check_rest(transport)
        return self

    def _check_rest(self, transport: str) -> None:
        if transport != "rest":
            for key in ("method", "query", "headers", "body"):
                if getattr(self, key) not in ("", {}, None):
                    raise _FieldProblem(key, "is only for transport rest")
            return
        for key in ("mcp_tool", "inspect_session"):
            if getattr(self, key):
                raise _FieldProblem(key, "cannot be combined with transport rest")
        template = self.rest_template()
        assert template is not None  # transport is rest
        properties = (self.input_schema or {}).get("properties")
        try:
            check_rest_template(template, properties if isinstance(properties, dict) else {})
        except TemplateError as exc:
            raise _FieldProblem(exc.field, str(exc)) from None

    def _check_provider_fields(self) -> None:
        if not self.provider:
            raise _FieldProblem("provider", "is required by transport provider: an installed provider's name")
        if not self.operation:
            raise _FieldProblem("operation", "is required by transport provider")
        for key in ("url", "mcp_tool", "token_env"):
            if getattr(self, key):
                raise _FieldProblem(key, "is not allowed with transport provider")
        if self.inspect_session:
            raise _FieldProblem("inspect_session", "is not allowed with transport provider")

    @property
    def effective_transport(self) -> str:
        return self.transport or ("mcp" if self.mcp_tool else "http")

    def rest_template(self) -> RestTemplate | None:
        """The request of a `rest` binding (method GET unless named); None for other transports."""
        if self.effective_transport != "rest":
            return None
        return RestTemplate(
            method=self.method or "GET",
            url=self.url,
            query=tuple(self.query.items()),
            headers=tuple(self.headers.items()),
            body=self.body,
        )

    @property
    def provider_backed(self) -> bool:
        return self.effective_transport == "provider"

    def descriptor(self) -> ToolDescriptor:
        value: ToolDescriptor = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema or {"type": "object"},
        }
        if self.output_schema is not None:
            value["output_schema"] = self.output_schema
        return value


class Limits(_Strict):
    active: int = Field(default=16, ge=1)
    loaded: int = Field(default=1024, ge=1)
    queue: int = Field(default=16, ge=1, le=1024)
    input_bytes: int = Field(default=65536, ge=1, le=1 << 20)
    session_bytes: int = Field(default=1 << 30, ge=16 << 20)
    subscribers: int = Field(default=128, ge=1)
    subscriber_events: int = Field(default=128, ge=1)
    subscriber_bytes: int = Field(default=2 << 20, ge=4096)
    # Beyond the spec's limits, per-tenant shares of pools all tenants draw on:
    # runtime executors one tenant may hold (of the server's 4,096, tools_app.executors)
    tenant_executors: int = Field(default=1024, ge=1, le=4096)
    # an executor no session has bound is closed this long after its registration
    unbound_executor_seconds: int = Field(default=600, ge=1, le=86400)
    # requests from one client address whose bodies are still arriving (slow uploads); behind a
    # proxy every client shares its address, so raise it there
    receiving_per_address: int = Field(default=32, ge=1, le=65536)

    @model_validator(mode="after")
    def _loaded_at_least_active(self) -> Limits:
        if self.loaded < self.active:
            raise _FieldProblem("loaded", "must be at least active")
        return self


class Persistence(_Strict):
    provider: Literal["filesystem", "s3", "r2", "gcs"]
    directory: str = ""
    bucket: str = ""
    region: str = ""
    endpoint: str = ""
    prefix: str = ""
    access_key_env: str = ""
    secret_key_env: str = ""
    postgres_env: str = ""
    interval_seconds: int = Field(default=5, ge=1, le=3600)
    queue: int = Field(default=128, ge=1, le=10000)
    # first delay before a permanently failed publish is tried again; it doubles up to 30 times this
    retry_seconds: int = Field(default=60, ge=1, le=3600)
    # a publish gives up after this long plus one second per MiB it sends (a hung archive)
    publish_timeout_seconds: int = Field(default=60, ge=1, le=3600)
    # `<id>-replaced-<ID>` directories a restore keeps per session, newest first
    keep_replaced: int = Field(default=3, ge=1, le=100)

    @model_validator(mode="after")
    def _provider_fields(self) -> Persistence:
        if self.provider == "filesystem" and not self.directory:
            raise _FieldProblem("directory", "is required for the filesystem provider")
        if self.provider != "filesystem" and not self.bucket:
            raise _FieldProblem("bucket", f"is required for the {self.provider} provider")
        if self.provider == "gcs":
            for key in ("region", "endpoint", "access_key_env", "secret_key_env"):
                if getattr(self, key):
                    raise _FieldProblem(key, "is not allowed for the gcs provider")
        if self.provider == "r2":
            for key in ("endpoint", "access_key_env", "secret_key_env"):
                if not getattr(self, key):
                    raise _FieldProblem(key, "is required for the r2 provider")
        if bool(self.access_key_env) != bool(self.secret_key_env):
            missing = "secret_key_env" if self.access_key_env else "access_key_env"
            raise _FieldProblem(missing, "access_key_env and secret_key_env must be set together")
        if self.endpoint:
            try:
                _check_url(self.endpoint)
            except ValueError as exc:
                raise _FieldProblem("endpoint", str(exc)) from exc
        if self.prefix.startswith("/") or "\\" in self.prefix or ".." in self.prefix.split("/"):
            raise _FieldProblem("prefix", "must be relative without '\\' or '..'")
        return self


class CredentialKeys(_Strict):
    active: str = Field(min_length=1)
    keys: dict[str, str] = Field(min_length=1)

    @field_validator("keys")
    @classmethod
    def _key_ids(cls, value: dict[str, str]) -> dict[str, str]:
        for key_id in value:
            if not 1 <= len(key_id) <= MAX_KEY_ID_CHARS:
                raise ValueError(f"key id {key_id[:40]!r} must be 1-{MAX_KEY_ID_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _active_known(self) -> CredentialKeys:
        if self.active not in self.keys:
            raise _FieldProblem("active", "must name one of keys")
        return self


class HostConfig(_Strict):
    listen: str = "127.0.0.1:8080"
    public_url: str = "http://127.0.0.1:8080"
    data_dir: str = Field(default=".brain", min_length=1)
    tokens: list[TokenGrant] = Field(min_length=1)
    harnesses: dict[str, Harness] = Field(min_length=1)
    providers: dict[str, Provider] = Field(default_factory=dict)
    tools: list[ToolBindingConfig] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    persistence: Persistence | None = None
    credential_keys: CredentialKeys | None = None

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, separator, port = value.rpartition(":")
        if not separator or not port.isdigit() or int(port) > 65535:
            raise ValueError("listen must be host:port")
        if host.startswith("[") != host.endswith("]"):
            raise ValueError("listen must be host:port")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        return _check_url(value, allow_query=False)

    @field_validator("harnesses")
    @classmethod
    def _harness_names(cls, value: dict[str, Harness]) -> dict[str, Harness]:
        for name in value:
            if not 1 <= len(name) <= 64:
                raise ValueError(f"harness name {name!r} must be 1-64 characters")
        return value

    @model_validator(mode="after")
    def _unique_tools(self) -> HostConfig:
        seen: set[str] = set()
        for index, binding in enumerate(self.tools):
            if binding.name in seen:
                raise _FieldProblem(f"tools[{index}].name", f"duplicate tool name {binding.name!r}")
            seen.add(binding.name)
        return self

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]") or "0.0.0.0"

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])


@dataclass(frozen=True, slots=True)
class Secrets:
    """Values read from the environment once at startup. Never logged."""

    tokens: tuple[str, ...]
    provider_keys: Mapping[str, str]
    tool_tokens: Mapping[str, str] = field(default_factory=dict)
    credential_keys: Mapping[str, bytes] = field(default_factory=dict)  # key id -> decoded 32-byte AES key

    def __repr__(self) -> str:
        return "Secrets(<redacted>)"


def _format_validation_error(error: ValidationError, raw: Mapping[str, Any]) -> str:
    first = error.errors()[0]
    location = ""
    for part in first["loc"]:
        location += f"[{part}]" if isinstance(part, int) else (f".{part}" if location else str(part))
    message = first["msg"].removeprefix("Value error, ")
    problem = first.get("ctx", {}).get("error")
    if isinstance(problem, _FieldProblem):
        location += f".{problem.field}" if location else problem.field
        message = str(problem)
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    named = _named(first["loc"], raw)
    if message.startswith(named):  # the check named it already (tool schema problems do)
        named = ""
    return f"{named}{location or 'config'}: {message}"


def _named(location: tuple[int | str, ...], raw: Mapping[str, Any]) -> str:
    """`tool 'echo': ` when the location is inside a named entry of a list (tools), so a refusal
    names what the operator wrote, not only its position."""
    if len(location) < 2 or location[0] not in _NAMED_LISTS or not isinstance(location[1], int):
        return ""
    kind, key = _NAMED_LISTS[str(location[0])]
    entries = raw.get(str(location[0]))
    entry = entries[location[1]] if isinstance(entries, list) and location[1] < len(entries) else None
    name = entry.get(key) if isinstance(entry, dict) else None
    return f"{kind} {name!r}: " if isinstance(name, str) and name else ""


# Lists of the host config whose entries have a name worth quoting: list -> (what it is, key).
_NAMED_LISTS = {"tools": ("tool", "name")}


def parse_host_config(raw: bytes) -> HostConfig:
    """Strictly decode config bytes: one JSON object, no unknown fields, no trailing data."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config: file exceeds {MAX_CONFIG_BYTES} bytes")
    try:
        value = json.loads(raw)  # json.loads rejects trailing data ("Extra data")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config: invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError("config: must be a JSON object")
    try:
        return HostConfig.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, value)) from exc


def load_host_config(path: str | Path) -> HostConfig:
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from exc
    return parse_host_config(raw)


def _aes_key(value: str) -> bytes | None:
    """The decoded key, or None when `value` is not a base64-encoded 32-byte key."""
    try:
        key = base64.b64decode(value.strip(), validate=True)
    except binascii.Error:
        return None
    return key if len(key) == AES_KEY_BYTES else None


def resolve_secrets(config: HostConfig, environ: Mapping[str, str] | None = None) -> Secrets:
    """Read every credential the config names; fail naming the field of the first problem."""
    environ = os.environ if environ is None else environ
    tokens: list[str] = []
    for index, grant in enumerate(config.tokens):
        value = environ.get(grant.token_env, "")
        where = f"tokens[{index}].token_env"
        if not value:
            raise ConfigError(f"{where}: environment variable {grant.token_env} is not set")
        if len(value.encode()) < MIN_TOKEN_BYTES:
            raise ConfigError(f"{where}: {grant.token_env} must hold at least {MIN_TOKEN_BYTES} bytes")
        if value in tokens:
            raise ConfigError(f"{where}: {grant.token_env} duplicates another token value")
        tokens.append(value)
    provider_keys: dict[str, str] = {}
    for name, provider in config.providers.items():
        value = environ.get(provider.api_key_env, "")
        if not value:
            raise ConfigError(f"providers.{name}.api_key_env: environment variable {provider.api_key_env} is not set")
        provider_keys[name] = value
    tool_tokens: dict[str, str] = {}
    for index, binding in enumerate(config.tools):
        if binding.token_env:
            value = environ.get(binding.token_env, "")
            if not value:
                where = f"tool {binding.name!r}: tools[{index}].token_env"
                raise ConfigError(f"{where}: environment variable {binding.token_env} is not set")
            tool_tokens[binding.name] = value
    if config.persistence is not None:
        for key in ("access_key_env", "secret_key_env", "postgres_env"):
            name = getattr(config.persistence, key)
            if name and not environ.get(name):
                raise ConfigError(f"persistence.{key}: environment variable {name} is not set")
    credential_keys: dict[str, bytes] = {}
    if config.credential_keys is not None:
        for key_id, name in config.credential_keys.keys.items():
            if not environ.get(name):
                raise ConfigError(f"credential_keys.keys.{key_id}: environment variable {name} is not set")
            decoded = _aes_key(environ[name])
            if decoded is None:
                raise ConfigError(f"credential_keys.keys.{key_id}: {name} must hold a base64-encoded 32-byte key")
            credential_keys[key_id] = decoded
    return Secrets(
        tokens=tuple(tokens), provider_keys=provider_keys, tool_tokens=tool_tokens, credential_keys=credential_keys
    )
