"""The credential vault (AES-256-GCM bound to tenant, session and alias, rotation, tombstones),
its keys from the host config, and the sealed records' storage."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from typing import Any

import pytest

from foundation.hostconfig import ConfigError, parse_host_config, resolve_secrets
from tools_app import db
from tools_app.credentials import BindingCredentials
from tools_app.vault import (
    MAX_CREDENTIAL_BYTES,
    CredentialUnavailable,
    CredentialVault,
    SealedCredential,
    parse_recovery_records,
    recovery_digest,
    recovery_record,
)

TENANT, SESSION, ALIAS = "acme", "a" * 32, "records"
VALUE: dict[str, Any] = {"token": "SESSION_RESOURCE_TOKEN", "scopes": ["read"]}
KEY_1, KEY_2 = os.urandom(32), os.urandom(32)


def _vault(active: str = "k1", **keys: bytes) -> CredentialVault:
    return CredentialVault(keys or {"k1": KEY_1}, active=active)


# --- the vault --------------------------------------------------------------------------------


def test_a_sealed_value_opens_to_the_same_json_value() -> None:
    # given
    vault = _vault()
    # when
    sealed = vault.seal(TENANT, SESSION, ALIAS, VALUE)
    # then
    assert vault.open(sealed, TENANT, SESSION, ALIAS) == VALUE
    assert sealed.version == 1
    assert sealed.key_id == "k1"
    assert len(base64.b64decode(sealed.nonce)) == 12
    assert b"SESSION_RESOURCE_TOKEN" not in base64.b64decode(sealed.ciphertext)
    assert "SESSION_RESOURCE_TOKEN" not in repr(sealed) and sealed.ciphertext not in repr(sealed)


def test_each_seal_draws_a_fresh_nonce() -> None:
    vault = _vault()
    first, second = (vault.seal(TENANT, SESSION, ALIAS, VALUE) for _ in range(2))
    assert first.nonce != second.nonce
    assert first.ciphertext != second.ciphertext


@pytest.mark.parametrize(
    ("tenant", "session", "alias"),
    [
        pytest.param("globex", SESSION, ALIAS, id="another_tenant_case"),
        pytest.param(TENANT, "b" * 32, ALIAS, id="another_session_case"),
        pytest.param(TENANT, SESSION, "other", id="another_alias_case"),
    ],
)
def test_a_record_moved_to_another_tenant_session_or_alias_fails_authentication(
    tenant: str, session: str, alias: str
) -> None:
    # given
    vault = _vault()
    sealed = vault.seal(TENANT, SESSION, ALIAS, VALUE)
    # when
    with pytest.raises(CredentialUnavailable) as caught:
        vault.open(sealed, tenant, session, alias)
    # then
    assert "fails authentication" in str(caught.value)
    assert "SESSION_RESOURCE_TOKEN" not in str(caught.value)


def test_a_record_relabelled_with_another_configured_key_id_fails_authentication() -> None:
    # given: both ids hold the same key, so only the associated data tells them apart
    vault = _vault(k1=KEY_1, k2=KEY_1)
    sealed = vault.seal(TENANT, SESSION, ALIAS, VALUE)
    # when / then
    with pytest.raises(CredentialUnavailable, match="fails authentication"):
        vault.open(dataclasses.replace(sealed, key_id="k2"), TENANT, SESSION, ALIAS)


def test_a_different_key_under_the_same_id_fails_authentication() -> None:
    sealed = _vault(k1=KEY_1).seal(TENANT, SESSION, ALIAS, VALUE)
    with pytest.raises(CredentialUnavailable, match="fails authentication"):
        _vault(k1=KEY_2).open(sealed, TENANT, SESSION, ALIAS)


def test_a_key_id_this_server_does_not_hold_is_unavailable() -> None:
    sealed = _vault(k1=KEY_1).seal(TENANT, SESSION, ALIAS, VALUE)
    with pytest.raises(CredentialUnavailable, match="key 'k1', which is not configured"):
        _vault("k2", k2=KEY_2).open(sealed, TENANT, SESSION, ALIAS)


def test_a_missing_a_revoked_and_a_damaged_record_are_unavailable() -> None:
    vault = _vault()
    sealed = vault.seal(TENANT, SESSION, ALIAS, VALUE)
    with pytest.raises(CredentialUnavailable, match="is missing"):
        vault.open(None, TENANT, SESSION, ALIAS)
    with pytest.raises(CredentialUnavailable, match="was revoked"):
        vault.open(SealedCredential.tombstone(), TENANT, SESSION, ALIAS)
    with pytest.raises(CredentialUnavailable, match="is damaged"):
        vault.open(dataclasses.replace(sealed, nonce="not base64!"), TENANT, SESSION, ALIAS)
    with pytest.raises(CredentialUnavailable, match="unknown record version"):
        vault.open(dataclasses.replace(sealed, version=2), TENANT, SESSION, ALIAS)
    flipped = bytearray(base64.b64decode(sealed.ciphertext))
    flipped[0] ^= 1
    with pytest.raises(CredentialUnavailable, match="fails authentication"):
        vault.open(dataclasses.replace(sealed, ciphertext=base64.b64encode(flipped).decode()), TENANT, SESSION, ALIAS)


def test_rotation_re_encrypts_under_the_active_key_and_keeps_the_value() -> None:
    # given: a record under k1, then k2 becomes active with k1 retained
    old = _vault(k1=KEY_1).seal(TENANT, SESSION, ALIAS, VALUE)
    vault = _vault("k2", k1=KEY_1, k2=KEY_2)
    assert vault.needs_rotation(old)
    # when
    rotated = vault.rotate(old, TENANT, SESSION, ALIAS)
    # then
    assert rotated.key_id == "k2"
    assert not vault.needs_rotation(rotated)
    assert _vault("k2", k2=KEY_2).open(rotated, TENANT, SESSION, ALIAS) == VALUE  # k1 may now retire
    assert vault.rotate(rotated, TENANT, SESSION, ALIAS) is rotated
    assert vault.rotate(SealedCredential.tombstone(), TENANT, SESSION, ALIAS).revoked


def test_rotation_of_a_record_whose_key_is_gone_is_unavailable() -> None:
    old = _vault(k1=KEY_1).seal(TENANT, SESSION, ALIAS, VALUE)
    with pytest.raises(CredentialUnavailable):
        _vault("k2", k2=KEY_2).rotate(old, TENANT, SESSION, ALIAS)


def test_seal_refuses_an_oversized_or_unencodable_value() -> None:
    vault = _vault()
    with pytest.raises(ValueError, match="exceeds"):
        vault.seal(TENANT, SESSION, ALIAS, "x" * MAX_CREDENTIAL_BYTES)
    with pytest.raises(ValueError, match="not encodable"):
        vault.seal(TENANT, SESSION, ALIAS, 1 << 70)


def test_the_vault_refuses_keys_of_the_wrong_size_and_an_unknown_active_key() -> None:
    with pytest.raises(ValueError):
        CredentialVault({"k1": b"short"}, active="k1")
    with pytest.raises(ValueError):
        CredentialVault({"k1": KEY_1}, active="k2")
    assert "k1" in repr(_vault()) and KEY_1.hex() not in repr(_vault())


# --- recovery records -------------------------------------------------------------------------


def test_recovery_records_round_trip_through_json() -> None:
    # given
    vault = _vault()
    sealed = vault.seal(TENANT, SESSION, ALIAS, VALUE)
    records = [recovery_record(ALIAS, sealed), recovery_record("gone", SealedCredential.tombstone())]
    # when
    parsed = parse_recovery_records(json.loads(json.dumps(records)), max_records=16)
    # then
    assert parsed == {ALIAS: sealed, "gone": SealedCredential.tombstone()}
    assert vault.open(parsed[ALIAS], TENANT, SESSION, ALIAS) == VALUE
    assert recovery_digest([]) == ""
    assert len(recovery_digest(records)) == 64
    assert recovery_digest(records) != recovery_digest(records[:1])


def _record(**fields: Any) -> dict[str, Any]:
    return {"alias": ALIAS, "version": 1, "key_id": "k1", "nonce": "", "ciphertext": "", "revoked": False, **fields}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({}, id="not_a_list_case"),
        pytest.param([_record()] * 2, id="an_alias_twice_case"),
        pytest.param([{**_record(), "value": "x"}], id="an_extra_field_case"),
        pytest.param([_record(alias="")], id="no_alias_case"),
        pytest.param([_record(version="1")], id="a_string_version_case"),
        pytest.param([_record(revoked="no")], id="a_string_revoked_case"),
        pytest.param([_record(key_id=None)], id="a_null_key_id_case"),
        pytest.param([_record(key_id="k" * 129)], id="a_long_key_id_case"),
        pytest.param([_record(ciphertext="A" * (2 * MAX_CREDENTIAL_BYTES + 1))], id="an_oversized_record_case"),
        pytest.param([_record(alias=f"a{index}") for index in range(17)], id="too_many_records_case"),
    ],
)
def test_malformed_recovery_records_are_refused(raw: Any) -> None:
    with pytest.raises(ValueError):
        parse_recovery_records(raw, max_records=16)


# --- keys from the host config ----------------------------------------------------------------


def _host_config(**keys: str) -> Any:
    return parse_host_config(
        json.dumps(
            {
                "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "local"}],
                "harnesses": {"pi": {"command": ["node"]}},
                "credential_keys": {"active": "k1", "keys": keys},
            }
        ).encode()
    )


def test_resolve_secrets_decodes_the_credential_keys_for_the_vault() -> None:
    # given
    config = _host_config(k1="KEY_ONE", k2="KEY_TWO")
    environ = {
        "BRAIN_API_KEY": "t" * 24,
        "KEY_ONE": base64.b64encode(KEY_1).decode(),
        "KEY_TWO": " " + base64.b64encode(KEY_2).decode() + "\n",
    }
    # when
    secrets = resolve_secrets(config, environ)
    vault = CredentialVault.configured(config.credential_keys, secrets)
    # then
    assert dict(secrets.credential_keys) == {"k1": KEY_1, "k2": KEY_2}
    assert vault is not None and vault.active == "k1" and vault.key_ids == {"k1", "k2"}
    assert repr(secrets) == "Secrets(<redacted>)"


def test_a_vault_is_none_without_credential_keys() -> None:
    config = parse_host_config(
        json.dumps(
            {"tokens": [{"token_env": "T", "tenant": "local"}], "harnesses": {"pi": {"command": ["x"]}}}
        ).encode()
    )
    assert CredentialVault.configured(config.credential_keys, resolve_secrets(config, {"T": "t" * 24})) is None


def test_a_key_id_longer_than_its_column_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="credential_keys.keys: key id"):
        _host_config(**{"k" * 129: "KEY_ONE"})


# --- storage ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_stored_records_are_sealed_per_binding_and_revocation_leaves_a_tombstone() -> None:
    # given
    vault = _vault()
    sealed = {alias: vault.seal(TENANT, SESSION, alias, {"token": alias}) for alias in ("b", "a")}
    db.store_credentials(TENANT, SESSION, sealed)
    # when
    found = db.get_credential(TENANT, SESSION, "a")
    revoked = db.revoke_credential(SESSION, "b")
    # then
    assert found == sealed["a"]
    assert db.get_credential("globex", SESSION, "a") is None  # another tenant's lookup
    assert db.get_credential(TENANT, SESSION, "c") is None
    assert revoked is True
    assert db.revoke_credential(SESSION, "b") is False  # already a tombstone
    assert db.revoke_credential(SESSION, "c") is False  # never had one
    assert db.get_credential(TENANT, SESSION, "b") == SealedCredential.tombstone()
    records = db.recovery_records(SESSION)
    assert [record["alias"] for record in records] == ["a", "b"]
    assert records[1] == {"alias": "b", "version": 1, "key_id": "", "nonce": "", "ciphertext": "", "revoked": True}


@pytest.mark.django_db
def test_an_import_keeps_local_records_but_a_restored_tombstone_revokes() -> None:
    # given: local records for a (live) and b (live); the archive has a rotated a, a tombstone
    # for b and a record for c this database lacks
    vault = _vault("k2", k1=KEY_1, k2=KEY_2)
    local = {alias: _vault(k1=KEY_1).seal(TENANT, SESSION, alias, alias) for alias in ("a", "b")}
    db.store_credentials(TENANT, SESSION, local)
    archived = {
        "a": vault.seal(TENANT, SESSION, "a", "a"),
        "b": SealedCredential.tombstone(),
        "c": vault.seal(TENANT, SESSION, "c", "c"),
    }
    # when
    db.import_credentials(TENANT, SESSION, archived)
    # then
    assert db.get_credential(TENANT, SESSION, "a") == local["a"]
    assert db.get_credential(TENANT, SESSION, "b") == SealedCredential.tombstone()
    assert db.get_credential(TENANT, SESSION, "c") == archived["c"]
    # and: a later import of an older live record never revives the tombstone
    db.import_credentials(TENANT, SESSION, {"b": local["b"]})
    assert db.get_credential(TENANT, SESSION, "b") == SealedCredential.tombstone()


@pytest.mark.django_db
def test_rotation_helpers_find_records_off_the_active_key_and_skip_changed_ones() -> None:
    # given: two records under k1 and a tombstone
    old = _vault(k1=KEY_1)
    db.store_credentials(TENANT, SESSION, {alias: old.seal(TENANT, SESSION, alias, alias) for alias in ("a", "b")})
    db.store_credentials(TENANT, "c" * 32, {"gone": SealedCredential.tombstone()})
    vault = _vault("k2", k1=KEY_1, k2=KEY_2)
    # when
    batch = db.credentials_to_rotate("k2", after=0, limit=10)
    db.revoke_credential(SESSION, "b")  # revoked after it was read
    replaced = [
        db.replace_sealed_credential(stored, vault.rotate(stored.sealed, TENANT, SESSION, stored.alias))
        for stored in batch
    ]
    # then
    assert [stored.alias for stored in batch] == ["a", "b"]
    assert replaced == [True, False]
    assert db.count_credentials_to_rotate("k2") == 0
    assert db.credentials_to_rotate("k2", after=0, limit=10) == []
    rotated = db.get_credential(TENANT, SESSION, "a")
    assert rotated is not None and rotated.key_id == "k2" and vault.open(rotated, TENANT, SESSION, "a") == "a"
    assert db.get_credential(TENANT, SESSION, "b") == SealedCredential.tombstone()


# --- what a call receives ---------------------------------------------------------------------


def _source(records: dict[str, SealedCredential], vault: CredentialVault | None, *required: str) -> BindingCredentials:
    async def load(tenant: str, session_id: str, alias: str) -> SealedCredential | None:
        return records.get(alias) if (tenant, session_id) == (TENANT, SESSION) else None

    return BindingCredentials(vault, required=lambda session_id: required, load=load)


async def test_a_call_receives_the_opened_value_or_none_for_a_binding_without_one() -> None:
    vault = _vault()
    source = _source({ALIAS: vault.seal(TENANT, SESSION, ALIAS, VALUE)}, vault)
    assert await source(TENANT, SESSION, ALIAS) == VALUE
    assert await source(TENANT, SESSION, "plain") is None


@pytest.mark.parametrize(
    ("records", "vault", "required", "message"),
    [
        pytest.param({ALIAS: SealedCredential.tombstone()}, _vault(), (), "was revoked", id="revoked_case"),
        pytest.param({}, _vault(), (ALIAS,), "is missing", id="required_record_missing_case"),
        pytest.param(
            {ALIAS: _vault(k1=KEY_1).seal(TENANT, SESSION, ALIAS, VALUE)},
            _vault("k2", k2=KEY_2),
            (),
            "not configured",
            id="key_gone_case",
        ),
        pytest.param(
            {ALIAS: _vault(k1=KEY_1).seal(TENANT, "b" * 32, ALIAS, VALUE)},
            _vault(),
            (),
            "authentication",
            id="moved_case",
        ),
        pytest.param(
            {ALIAS: _vault().seal(TENANT, SESSION, ALIAS, VALUE)}, None, (), "needs credential_keys", id="no_vault_case"
        ),
    ],
)
async def test_a_call_whose_credential_cannot_be_opened_is_refused(
    records: dict[str, SealedCredential], vault: CredentialVault | None, required: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CredentialUnavailable, match=message):
        await _source(records, vault, *required)(TENANT, SESSION, ALIAS)
