"""The host config's credentials: API token grants and the sealed-credential keys."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from ..session_ids import canonical_session_id
from .base import FieldProblem, StrictModel

__all__ = ["MAX_KEY_ID_CHARS", "CredentialKeys", "TokenGrant"]

MAX_KEY_ID_CHARS = 128  # each sealed credential stores its key id in an indexed column


class TokenGrant(StrictModel):
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
        if not value:
            return value
        session = canonical_session_id(value)
        if session is None:
            raise ValueError("session must be a 32-character hex session ID")
        return session


class CredentialKeys(StrictModel):
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
            raise FieldProblem("active", "must name one of keys")
        return self
