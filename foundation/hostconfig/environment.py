"""The credentials a host config names, read from the environment once at startup."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .base import ConfigError
from .cluster import FleetSecret, check_cluster
from .model import HostConfig
from .provider_keys import ProviderKeys

__all__ = ["Secrets", "resolve_secrets"]

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
    provider_keys = ProviderKeys(config.providers, environ)  # NAME, or NAME_FILE followed while running
    model_credential_keys = ProviderKeys(config.model_credentials, environ, section="model_credentials")
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
    fleet_secret = None
    if config.cluster is not None:
        fleet_secret = check_cluster(config.cluster, persistence=config.persistence, environ=environ)
    return Secrets(
        tokens=tuple(tokens),
        provider_keys=provider_keys,
        model_credential_keys=model_credential_keys,
        tool_tokens=tool_tokens,
        credential_keys=credential_keys,
        fleet_secret=fleet_secret,
    )
