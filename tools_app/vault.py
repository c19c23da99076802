"""The credential vault: private session credentials sealed with AES-256-GCM under the host's
`credential_keys`, each record bound to its tenant, session and binding alias.

A sealed record is {version, key_id, nonce, ciphertext} (base64 fields). The associated data
names the record format version, the key id, the tenant, the session and the alias, so a record
copied to another session, alias or tenant, or relabelled with another key id, fails to
authenticate. A revoked record is a tombstone: it keeps its alias and loses its ciphertext.
Pure: no Django, no I/O; keys come from hostconfig's Secrets and are never logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from foundation.hostconfig import MAX_KEY_ID_CHARS, CredentialKeys, Secrets

# the provider contract's error: a binding call stops with it, never runs without the value
from .providers.base import CredentialUnavailable

__all__ = [
    "MAX_CREDENTIAL_BYTES",
    "MODEL_CREDENTIAL_ALIAS",
    "RECORD_VERSION",
    "CredentialUnavailable",
    "CredentialVault",
    "RecoveryRecord",
    "SealedCredential",
    "describe",
    "parse_recovery_records",
    "recovery_digest",
    "recovery_record",
]

RECORD_VERSION = 1  # bump with any change to the associated data or the plaintext encoding
NONCE_BYTES = 12  # AES-GCM's 96-bit nonce: random per encryption (NIST SP 800-38D 8.2.2)
KEY_BYTES = 32  # AES-256
TAG_BYTES = 16  # appended to the ciphertext by AESGCM
# A credential is a token or a small object of them; the bound keeps a hostile create body from
# parking megabytes in the database and in every checkpoint manifest.
MAX_CREDENTIAL_BYTES = 64 << 10
AAD_LABEL = "brain-session-credential"
# The alias of a session's own model key (`model_credential.api_key`): sealed, stored, archived,
# rotated and revoked as a binding's credential is. A binding alias starts with a letter
# (bindings.ALIAS), so no binding can take this one, and the associated data names it, so its
# record cannot be moved onto a binding.
MODEL_CREDENTIAL_ALIAS = "@model"


@dataclass(frozen=True, slots=True)
class SealedCredential:
    """One stored record. A tombstone (`revoked`) has an empty key id, nonce and ciphertext."""

    version: int
    key_id: str
    nonce: str  # base64 of NONCE_BYTES
    ciphertext: str  # base64 of the AES-GCM output (encrypted value + tag)
    revoked: bool = False

    @classmethod
    def tombstone(cls) -> SealedCredential:
        return cls(version=RECORD_VERSION, key_id="", nonce="", ciphertext="", revoked=True)

    def __repr__(self) -> str:
        state = "revoked" if self.revoked else f"key_id={self.key_id!r}"
        return f"SealedCredential(v{self.version}, {state})"


class RecoveryRecord(TypedDict):
    """A record as a checkpoint manifest carries it (`credentials`): still encrypted."""

    alias: str
    version: int
    key_id: str
    nonce: str
    ciphertext: str
    revoked: bool


def describe(alias: str) -> str:
    """What an error calls the credential of `alias`."""
    if alias == MODEL_CREDENTIAL_ALIAS:
        return "the session's model credential"
    return f"the credential of binding {alias!r}"


def _associated_data(version: int, key_id: str, tenant: str, session_id: str, alias: str) -> bytes:
    # a JSON array: unambiguous however the parts are spelled (no separator to smuggle)
    return orjson.dumps([AAD_LABEL, version, key_id, tenant, session_id, alias])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: str) -> bytes:
    return base64.b64decode(value.encode("ascii"), validate=True)


class CredentialVault:
    """Seals with the active key; opens with any configured key."""

    def __init__(self, keys: Mapping[str, bytes], *, active: str) -> None:
        if active not in keys:
            raise ValueError("the active credential key is not among the keys")
        for key in keys.values():
            if len(key) != KEY_BYTES:
                raise ValueError("credential keys are 32 bytes")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.active = active

    @classmethod
    def configured(cls, config: CredentialKeys | None, secrets: Secrets) -> CredentialVault | None:
        """The vault of a host config, or None when it configures no `credential_keys`."""
        if config is None:
            return None
        return cls(secrets.credential_keys, active=config.active)

    def __repr__(self) -> str:
        return f"CredentialVault(active={self.active!r}, keys={len(self._ciphers)})"

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self._ciphers)

    def seal(self, tenant: str, session_id: str, alias: str, value: object) -> SealedCredential:
        """Encrypt a JSON value under the active key. ValueError when the value does not
        encode as JSON or exceeds MAX_CREDENTIAL_BYTES."""
        try:
            plaintext = orjson.dumps(value)
        except TypeError as exc:
            raise ValueError("the credential value is not encodable JSON") from exc
        if len(plaintext) > MAX_CREDENTIAL_BYTES:
            raise ValueError(f"the credential value exceeds {MAX_CREDENTIAL_BYTES} bytes")
        nonce = os.urandom(NONCE_BYTES)
        aad = _associated_data(RECORD_VERSION, self.active, tenant, session_id, alias)
        ciphertext = self._ciphers[self.active].encrypt(nonce, plaintext, aad)
        return SealedCredential(RECORD_VERSION, self.active, _b64(nonce), _b64(ciphertext))

    def open(self, sealed: SealedCredential | None, tenant: str, session_id: str, alias: str) -> object:
        """The decrypted value; CredentialUnavailable when there is none to use."""
        where = describe(alias)
        if sealed is None:
            raise CredentialUnavailable(f"{where} is missing")
        if sealed.revoked:
            raise CredentialUnavailable(f"{where} was revoked")
        if sealed.version != RECORD_VERSION:
            raise CredentialUnavailable(f"{where} has an unknown record version {sealed.version}")
        cipher = self._ciphers.get(sealed.key_id)
        if cipher is None:
            raise CredentialUnavailable(f"{where} is sealed with key {sealed.key_id!r}, which is not configured")
        try:
            nonce, ciphertext = _unb64(sealed.nonce), _unb64(sealed.ciphertext)
        except (binascii.Error, UnicodeEncodeError):
            raise CredentialUnavailable(f"{where} is damaged") from None
        if len(nonce) != NONCE_BYTES or len(ciphertext) < TAG_BYTES:
            raise CredentialUnavailable(f"{where} is damaged")
        aad = _associated_data(sealed.version, sealed.key_id, tenant, session_id, alias)
        try:
            plaintext = cipher.decrypt(nonce, ciphertext, aad)
        except InvalidTag:
            # a wrong key behind the same id, a damaged record, or one moved to another
            # tenant, session or alias: AES-GCM cannot tell these apart
            raise CredentialUnavailable(f"{where} fails authentication") from None
        return orjson.loads(plaintext)

    def needs_rotation(self, sealed: SealedCredential) -> bool:
        return not sealed.revoked and sealed.key_id != self.active

    def rotate(self, sealed: SealedCredential, tenant: str, session_id: str, alias: str) -> SealedCredential:
        """The record re-encrypted under the active key (itself when it already is, or a
        tombstone); CredentialUnavailable when it cannot be opened."""
        if not self.needs_rotation(sealed):
            return sealed
        return self.seal(tenant, session_id, alias, self.open(sealed, tenant, session_id, alias))


def recovery_record(alias: str, sealed: SealedCredential) -> RecoveryRecord:
    return {
        "alias": alias,
        "version": sealed.version,
        "key_id": sealed.key_id,
        "nonce": sealed.nonce,
        "ciphertext": sealed.ciphertext,
        "revoked": sealed.revoked,
    }


def recovery_digest(records: Sequence[RecoveryRecord]) -> str:
    """A digest of a session's records, "" for none: a publish compares it with the last one
    uploaded to tell a rotation or revocation apart from an unchanged session."""
    if not records:
        return ""
    return hashlib.sha256(orjson.dumps(list(records), option=orjson.OPT_SORT_KEYS)).hexdigest()


RECOVERY_KEYS = RecoveryRecord.__required_keys__


def parse_recovery_records(raw: object, *, max_records: int) -> dict[str, SealedCredential]:
    """A manifest's `credentials`, checked field by field, by alias. ValueError when they are
    not what a publish writes (a damaged or hostile archive)."""
    if not isinstance(raw, list) or len(raw) > max_records:
        raise ValueError(f"credentials must be a list of at most {max_records} records")
    records: dict[str, SealedCredential] = {}
    for item in raw:
        if not isinstance(item, dict) or item.keys() != RECOVERY_KEYS:
            raise ValueError("a credential record has unexpected fields")
        alias, revoked = item["alias"], item["revoked"]
        version, key_id, nonce, ciphertext = item["version"], item["key_id"], item["nonce"], item["ciphertext"]
        if not isinstance(alias, str) or not alias or alias in records:
            raise ValueError("a credential record names no alias, or one twice")
        if not isinstance(revoked, bool) or not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"the credential record of {alias!r} is malformed")
        if not all(isinstance(part, str) for part in (key_id, nonce, ciphertext)) or len(key_id) > MAX_KEY_ID_CHARS:
            raise ValueError(f"the credential record of {alias!r} is malformed")
        if len(ciphertext) > 2 * MAX_CREDENTIAL_BYTES:  # base64 of the value and its tag
            raise ValueError(f"the credential record of {alias!r} is too large")
        records[alias] = (
            SealedCredential.tombstone() if revoked else SealedCredential(version, key_id, nonce, ciphertext)
        )
    return records
