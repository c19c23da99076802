"""The credentials a host config names, read from the environment once at startup."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .base import ConfigError
from .cluster import FleetSecret, check_cluster
from .model import HostConfig, examine_host_config, read_host_config
from .provider_keys import ProviderKeys

__all__ = ["Secrets", "load_config_and_secrets", "resolve_secrets"]

MIN_TOKEN_BYTES = 24  # spec: token values must be at least 24 bytes
AES_KEY_BYTES = 32  # spec: credential keys are base64-encoded 32-byte AES keys


@dataclass(frozen=True, slots=True)
class Secrets:
    """Values read from the environment once at startup. Never logged."""

    tokens: tuple[str, ...]
    provider_keys: Mapping[str, str]  # a ProviderKeys when read by resolve_secrets
    # the keys of `model_credentials` by reference name (a ProviderKeys when read by resolve_secrets)
    model_credential_keys: Mapping[str, str] = field(default_factory=dict)
    tool_tokens: Mapping[str, str] = field(default_factory=dict)
    credential_keys: Mapping[str, bytes] = field(default_factory=dict)  # key id -> decoded 32-byte AES key
    fleet_secret: FleetSecret | None = None  # with a `cluster` block: signs instance-to-instance requests

    def __repr__(self) -> str:
        return "Secrets(<redacted>)"


def _aes_key(value: str) -> bytes | None:
    """The decoded key, or None when `value` is not a base64-encoded 32-byte key."""
    try:
        key = base64.b64decode(value.strip(), validate=True)
    except binascii.Error:
        return None
    return key if len(key) == AES_KEY_BYTES else None


def resolve_secrets(config: HostConfig, environ: Mapping[str, str] | None = None) -> Secrets:
    """Read every credential the config names; ConfigError naming the field of every problem."""
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    tokens: list[str] = []
    for index, grant in enumerate(config.tokens):
        value = environ.get(grant.token_env, "")
        where = f"tokens[{index}].token_env"
        if not value:
            problems.append(f"{where}: environment variable {grant.token_env} is not set")
        elif len(value.encode()) < MIN_TOKEN_BYTES:
            problems.append(f"{where}: {grant.token_env} must hold at least {MIN_TOKEN_BYTES} bytes")
        elif value in tokens:
            problems.append(f"{where}: {grant.token_env} duplicates another token value")
        else:
            tokens.append(value)
    provider_keys: Mapping[str, str] = {}
    try:
        provider_keys = ProviderKeys(config.providers, environ)  # NAME, or NAME_FILE followed while running
    except ConfigError as exc:
        problems.extend(exc.problems)
    model_credential_keys: Mapping[str, str] = {}
    try:
        model_credential_keys = ProviderKeys(config.model_credentials, environ, section="model_credentials")
    except ConfigError as exc:
        problems.extend(exc.problems)
    tool_tokens: dict[str, str] = {}
    for index, binding in enumerate(config.tools):
        if binding.token_env:
            value = environ.get(binding.token_env, "")
            if not value:
                where = f"tool {binding.name!r}: tools[{index}].token_env"
                problems.append(f"{where}: environment variable {binding.token_env} is not set")
            else:
                tool_tokens[binding.name] = value
    if config.persistence is not None:
        for key in ("access_key_env", "secret_key_env", "postgres_env"):
            name = getattr(config.persistence, key)
            if name and not environ.get(name):
                problems.append(f"persistence.{key}: environment variable {name} is not set")
    credential_keys: dict[str, bytes] = {}
    if config.credential_keys is not None:
        for key_id, name in config.credential_keys.keys.items():
            decoded = _aes_key(environ[name]) if environ.get(name) else None
            if not environ.get(name):
                problems.append(f"credential_keys.keys.{key_id}: environment variable {name} is not set")
            elif decoded is None:
                problems.append(f"credential_keys.keys.{key_id}: {name} must hold a base64-encoded 32-byte key")
            else:
                credential_keys[key_id] = decoded
    fleet_secret = None
    if config.cluster is not None:
        try:
            fleet_secret = check_cluster(config.cluster, persistence=config.persistence, environ=environ)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError.of(problems)
    return Secrets(
        tokens=tuple(tokens),
        provider_keys=provider_keys,
        model_credential_keys=model_credential_keys,
        tool_tokens=tool_tokens,
        credential_keys=credential_keys,
        fleet_secret=fleet_secret,
    )


def load_config_and_secrets(path: str | Path, environ: Mapping[str, str] | None = None) -> tuple[HostConfig, Secrets]:
    """The config file at `path` and the credentials it names; one ConfigError listing every
    problem otherwise: the file's (each field at fault, an unknown one with the field it was
    probably meant to be) and, when the file decodes, its environment's."""
    config, problems = examine_host_config(read_host_config(path))
    if config is None:
        raise ConfigError.of(problems)
    try:
        secrets = resolve_secrets(config, environ)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError.of(problems)
    return config, secrets
