"""The private credential a binding's call receives: its sealed record read from the database
and opened by the vault, per call, so a revocation or rotation (even by another process) applies
to the next call. Anything short of the value stops the call; it never runs without it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from . import db
from .vault import CredentialUnavailable, CredentialVault, SealedCredential, describe

__all__ = ["BindingCredentials"]

Loader = Callable[[str, str, str], Awaitable[SealedCredential | None]]


def _none_required(session_id: str) -> Collection[str]:
    return ()


class BindingCredentials:
    """A binding's decrypted credential for (tenant, session id, alias): None when the binding
    has none, CredentialUnavailable when it has one that cannot be opened here (revoked, a key
    this server lacks, failed authentication, or no vault at all) or when `required` lists the
    alias (the session was created with a credential for it) and its record is missing."""

    def __init__(
        self,
        vault: CredentialVault | None,
        *,
        required: Callable[[str], Collection[str]] = _none_required,
        load: Loader = db.aget_credential,
    ) -> None:
        self._vault = vault
        self._required = required
        self._load = load

    def __repr__(self) -> str:
        return f"BindingCredentials({self._vault!r})"

    async def __call__(self, tenant: str, session_id: str, alias: str) -> object:
        sealed = await self._load(tenant, session_id, alias)
        if sealed is None and alias not in self._required(session_id):
            return None
        if self._vault is None:
            raise CredentialUnavailable(f"{describe(alias)} needs credential_keys on this server")
        return self._vault.open(sealed, tenant, session_id, alias)
