"""The key a session's model calls use, and the `open` params that carry it to its runner: the
session's own key (sealed in the vault, opened per turn so a revocation stops the next one), a
key the host config declares by name (`model_credentials`), or its provider's configured key.

A key travels only in the `open` request of the session's own attachment, never in a runner's
environment, an event or a log line; a runner shared by sessions holds each session's key in
that session's attachment alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from foundation.hostconfig import HostConfig, Secrets
from runners.protocol import OpenParams, ProviderOptions
from sessions_app.records import SessionRecord
from tools_app.bindings import CredentialSource
from tools_app.vault import MODEL_CREDENTIAL_ALIAS, CredentialUnavailable

from .session_host import TurnFailure

__all__ = ["ModelKeys"]

# The current key, read each time the runner's options are compared (a rotated file changes it).
CurrentKey = Callable[[], str]


class ModelKeys:
    def __init__(self, config: HostConfig, secrets: Secrets, *, sealed: CredentialSource) -> None:
        self._config = config
        self._provider_keys = secrets.provider_keys
        self._reference_keys: Mapping[str, str] = secrets.model_credential_keys
        self._sealed = sealed

    def __repr__(self) -> str:
        return f"ModelKeys(references={sorted(self._reference_keys)}, <redacted>)"

    async def key_of(self, record: SessionRecord) -> CurrentKey:
        """The session's key source for this turn. A TurnFailure (provider_error: the turn stops
        before any model call, and a resume may retry once the operator fixed it) when its own
        key cannot be opened here or its reference is not declared on this server; a session's
        model calls never fall back to another key."""
        source = record.model_credential
        if "api_key" in source:
            try:
                value = await self._sealed(record.tenant, record.id, MODEL_CREDENTIAL_ALIAS)
            except CredentialUnavailable as exc:
                raise TurnFailure("provider_error", f"{exc}; no model request was made") from None
            if not isinstance(value, str):
                raise TurnFailure(
                    "provider_error", "the session's model credential is missing; no model request was made"
                )
            return lambda: value
        reference = source.get("reference")
        if reference is not None:
            if reference not in self._reference_keys:
                problem = f"model credential reference {reference!r} is not declared on this server"
                raise TurnFailure("provider_error", f"{problem}; no model request was made")
            keys = self._reference_keys
            return lambda: keys[reference]
        provider = record.config["model"].split("/", 1)[0]
        provider_keys = self._provider_keys
        return lambda: provider_keys.get(provider, "")

    def open_params(self, record: SessionRecord, native: str, key: CurrentKey) -> OpenParams:
        """The `open` request of the session's attachment, with the key as it is now."""
        provider_name = record.config["model"].split("/", 1)[0]
        provider: ProviderOptions = {"api_key": key()}
        settings = self._config.providers.get(provider_name)
        if settings is not None and settings.base_url:
            provider["base_url"] = settings.base_url
        if settings is not None and settings.api:
            provider["api"] = settings.api
        return {
            "session_id": record.id,
            "dir": native,
            "config": dict(record.config),
            "tools": record.descriptors,
            "provider": provider,
        }
