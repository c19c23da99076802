"""The host config as a whole: its sections, strict decoding of the file, refusals that name
the field (and the tool) at fault."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from .approvals import MAX_APPROVAL_RULES, ApprovalRule
from .base import MAX_CONFIG_BYTES, ConfigError, FieldProblem, StrictModel, check_url
from .cluster import ClusterConfig
from .cors import CorsConfig
from .environments import MAX_ENVIRONMENTS, EnvironmentConfig
from .harnesses import Harness, Provider
from .limits import Limits
from .model_credentials import REFERENCE_NAME, ModelCredentialConfig
from .persistence import Persistence
from .tokens import CredentialKeys, TokenGrant
from .tools import ToolBindingConfig

__all__ = ["HostConfig", "examine_host_config", "load_host_config", "parse_host_config", "read_host_config"]


class HostConfig(StrictModel):
    listen: str = "127.0.0.1:8080"
    public_url: str = "http://127.0.0.1:8080"
    data_dir: str = Field(default=".brain", min_length=1)
    tokens: list[TokenGrant] = Field(min_length=1)
    harnesses: dict[str, Harness] = Field(min_length=1)
    providers: dict[str, Provider] = Field(default_factory=dict)
    # model keys declared by name for sessions' `model_credential.reference` (model_credentials.py)
    model_credentials: dict[str, ModelCredentialConfig] = Field(default_factory=dict)
    tools: list[ToolBindingConfig] = Field(default_factory=list)
    # where sessions' placed tools run (foundation.hostconfig.environments)
    environments: list[EnvironmentConfig] = Field(default_factory=list, max_length=MAX_ENVIRONMENTS)
    # approval rules over every kind of tool (foundation.hostconfig.approvals), first match wins
    approvals: list[ApprovalRule] = Field(default_factory=list, max_length=MAX_APPROVAL_RULES)
    limits: Limits = Field(default_factory=Limits)
    persistence: Persistence | None = None
    credential_keys: CredentialKeys | None = None
    cluster: ClusterConfig | None = None  # absent: one instance, nothing shared (foundation.hostconfig.cluster)
    cors: CorsConfig | None = None  # absent: no browser origin is answered (foundation.hostconfig.cors)

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
        return check_url(value, allow_query=False)

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
                raise FieldProblem(f"tools[{index}].name", f"duplicate tool name {binding.name!r}")
            seen.add(binding.name)
        return self

    @model_validator(mode="after")
    def _environments(self) -> HostConfig:
        tools = {binding.name for binding in self.tools}
        seen: set[str] = set()
        for index, environment in enumerate(self.environments):
            if environment.name in seen:
                raise FieldProblem(f"environments[{index}].name", f"duplicate environment {environment.name!r}")
            seen.add(environment.name)
            for placed, tool in environment.services.items():
                if tool not in tools:
                    raise FieldProblem(f"environments[{index}].services.{placed}", f"no tool {tool!r} in tools")
        return self

    @model_validator(mode="after")
    def _model_credentials(self) -> HostConfig:
        for name, declared in self.model_credentials.items():
            if not REFERENCE_NAME.fullmatch(name):
                raise FieldProblem(
                    f"model_credentials.{name[:80]}",
                    "name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
                )
            if declared.provider not in self.providers:
                where = f"model_credentials.{name}.provider"
                raise FieldProblem(where, f"provider {declared.provider!r} is not configured in providers")
        return self

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]") or "0.0.0.0"

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])


def _describe_problems(error: ValidationError, raw: Mapping[str, Any]) -> list[str]:
    """Every problem pydantic found, each as `[tool 'x': ]location: message`."""
    return [_describe_problem(problem, raw) for problem in error.errors()]


def _describe_problem(problem: Mapping[str, Any], raw: Mapping[str, Any]) -> str:
    location = ""
    for part in problem["loc"]:
        location += f"[{part}]" if isinstance(part, int) else (f".{part}" if location else str(part))
    message = problem["msg"].removeprefix("Value error, ")
    cause = problem.get("ctx", {}).get("error")
    if isinstance(cause, FieldProblem):
        location += f".{cause.field}" if location else cause.field
        message = str(cause)
    if problem["type"] == "extra_forbidden":
        message = "unknown field" + _suggestion(problem["loc"])
    named = _named(problem["loc"], raw)
    if message.startswith(named):  # the check named it already (tool schema problems do)
        named = ""
    return f"{named}{location or 'config'}: {message}"


def _suggestion(location: tuple[int | str, ...]) -> str:
    """` (did you mean 'tokens'?)` for an unknown field close to a field of its section."""
    unknown = location[-1] if location else ""
    if not isinstance(unknown, str):
        return ""
    close = difflib.get_close_matches(unknown, sorted(_field_names_at(location[:-1])), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _field_names_at(location: tuple[int | str, ...]) -> set[str]:
    """The fields of the section at `location` in HostConfig (list indexes and dict keys step
    into the item type; an optional section is its model)."""
    types: list[Any] = [HostConfig]
    for part in location:
        stepped: list[Any] = []
        for kind in _alternatives(types):
            origin, arguments = get_origin(kind), get_args(kind)
            if isinstance(part, str) and isinstance(kind, type) and issubclass(kind, BaseModel):
                if part in kind.model_fields:
                    stepped.append(kind.model_fields[part].annotation)
            elif isinstance(part, int) and origin in (list, tuple) and arguments:
                stepped.append(arguments[0])
            elif isinstance(part, str) and origin is dict and len(arguments) == 2:
                stepped.append(arguments[1])
        types = stepped
    return {
        name
        for kind in _alternatives(types)
        if isinstance(kind, type) and issubclass(kind, BaseModel)
        for name in kind.model_fields
    }


def _alternatives(types: list[Any]) -> list[Any]:
    """`A | B | None` as [A, B, None]; other types as they are."""
    expanded: list[Any] = []
    for kind in types:
        origin = get_origin(kind)
        expanded.extend(get_args(kind) if origin is Union or origin is UnionType else [kind])
    return expanded


def _without_unknown_fields(raw: Any, locations: list[tuple[int | str, ...]]) -> Any:
    """A copy of `raw` without the fields at `locations` (each the location of an unknown field)."""
    copy = json.loads(json.dumps(raw))
    for location in locations:
        target: Any = copy
        for part in location[:-1]:
            target = target[part]
        target.pop(location[-1], None)
    return copy


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


def examine_host_config(raw: bytes) -> tuple[HostConfig | None, list[str]]:
    """Strictly decode config bytes (one JSON object, no unknown fields, no trailing data) and
    return every problem found. The config comes back when there is no problem, and also when
    the only problems are unknown fields (decoded without them), so the checks that read a decoded
    config (its environment variables) report in the same pass. A file that is not a JSON object
    raises ConfigError: nothing more can be said about it."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config: file exceeds {MAX_CONFIG_BYTES} bytes")
    try:
        value = json.loads(raw)  # json.loads rejects trailing data ("Extra data")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config: invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError("config: must be a JSON object")
    try:
        return HostConfig.model_validate(value), []
    except ValidationError as exc:
        problems = _describe_problems(exc, value)
        unknown = [problem["loc"] for problem in exc.errors() if problem["type"] == "extra_forbidden"]
        if len(unknown) < len(problems):
            return None, problems
    try:
        return HostConfig.model_validate(_without_unknown_fields(value, unknown)), problems
    except ValidationError:
        return None, problems


def parse_host_config(raw: bytes) -> HostConfig:
    """Strictly decode config bytes; ConfigError with every problem found otherwise."""
    config, problems = examine_host_config(raw)
    if problems or config is None:
        raise ConfigError.of(problems)
    return config


def read_host_config(path: str | Path) -> bytes:
    """The bytes of the config file (up to one byte past the limit, which decoding refuses)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from exc


def load_host_config(path: str | Path) -> HostConfig:
    return parse_host_config(read_host_config(path))
