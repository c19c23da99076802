"""Private credentials travel with a session through the checkpoint archive, still sealed: a
cold load or restore on another server keeps them (usable where the same keys are configured),
a revocation travels too and is never undone by restoring an older checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from brain import Brain

from tests.fixtures.server import BrainServer
from tests.support.credentials import (
    KEY_ENVS,
    SECRET,
    create_with_credential,
    files_holding,
    keyed_server,
    manage,
    stored_credentials,
    vault_of,
)
from tools_app.vault import SealedCredential

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return tmp_path / "archive"


@pytest.fixture
def sdk_clients() -> Iterator[list[Brain]]:
    made: list[Brain] = []
    yield made
    for client in made:
        client.dispose()


def _persistence(archive: Path) -> dict[str, Any]:
    return {"provider": "filesystem", "directory": str(archive), "interval_seconds": 1}


def _manifest(archive: Path, session_id: str, checkpoint: str) -> dict[str, Any]:
    return json.loads((archive / "sessions" / session_id / "checkpoints" / checkpoint).read_bytes())  # type: ignore[no-any-return]


def _second_server(factory: Callable[..., BrainServer], first: BrainServer, archive: Path) -> BrainServer:
    """A server with an empty data dir on the same archive, holding the same keys."""
    server: BrainServer = factory(
        start=False, persistence=_persistence(archive), credential_keys=first.config["credential_keys"]
    )
    for name in KEY_ENVS.values():
        server.env[name] = first.env[name]
    server.start()
    return server


def test_a_checkpoint_carries_the_sealed_records_and_a_cold_load_keeps_them(
    brain_factory: Callable[..., BrainServer], archive: Path, sdk_clients: list[Brain]
) -> None:
    # given: a session with a credential on server A, flushed
    old = keyed_server(brain_factory, persistence=_persistence(archive))
    client = old.sdk()
    sdk_clients.append(client)
    session = create_with_credential(client)
    checkpoint = client.flush(session["id"])["checkpoint"]
    # then: the manifest holds the sealed record, and the value is nowhere in the archive
    manifest = _manifest(archive, session["id"], checkpoint)
    (record,) = manifest["credentials"]
    assert record.keys() == {"alias", "version", "key_id", "nonce", "ciphertext", "revoked"}
    assert (record["alias"], record["key_id"], record["revoked"]) == ("runtime", "k1", False)
    assert manifest["session"]["credential_bindings"] == ["runtime"]
    assert files_holding(archive, SECRET.encode()) == []
    # and: a second flush with nothing new publishes nothing new
    assert client.flush(session["id"])["checkpoint"] == checkpoint
    sdk_clients.remove(client)
    client.dispose()
    old.stop()
    # when: a server with an empty data dir and the same keys is asked for the session
    new = _second_server(brain_factory, old, archive)
    loaded = new.sdk().get(session["id"])
    # then: it lists the alias and holds the same sealed record, which its keys open
    assert loaded["credential_bindings"] == ["runtime"]
    tenant, sealed = stored_credentials(new.data_dir)[(session["id"], "runtime")]
    assert tenant == "acme"
    assert sealed == SealedCredential(record["version"], record["key_id"], record["nonce"], record["ciphertext"])
    assert vault_of(new).open(sealed, tenant, session["id"], "runtime") == {"token": SECRET}
    assert files_holding(new.data_dir, SECRET.encode()) == []


def test_a_revocation_travels_and_an_older_checkpoint_never_revives_the_credential(
    brain_factory: Callable[..., BrainServer], archive: Path, sdk_clients: list[Brain]
) -> None:
    # given: a session on A published with its live credential (checkpoint 1) and restored on B
    old = keyed_server(brain_factory, persistence=_persistence(archive))
    client = old.sdk()
    sdk_clients.append(client)
    session = create_with_credential(client)
    first = client.flush(session["id"])["checkpoint"]
    new = _second_server(brain_factory, old, archive)
    new.sdk().restore(session["id"], first)
    assert stored_credentials(new.data_dir)[(session["id"], "runtime")][1].key_id == "k1"
    # when: A revokes it; the command publishes the session (checkpoint 2)
    revoked = manage(old, "revoke_credential", session["id"], "runtime")
    assert revoked.returncode == 0, revoked.stderr
    second = client.sync(session["id"])["checkpoint"]
    # then
    assert second != first
    (record,) = _manifest(archive, session["id"], second)["credentials"]
    assert record == {"alias": "runtime", "version": 1, "key_id": "", "nonce": "", "ciphertext": "", "revoked": True}
    # when: B restores checkpoint 2, then the older checkpoint 1
    new.sdk().restore(session["id"], second)
    after_second = stored_credentials(new.data_dir)[(session["id"], "runtime")][1]
    restored = new.sdk().restore(session["id"], first)
    # then: the revocation replaced B's live record, and the older live record did not return
    assert after_second == SealedCredential.tombstone()
    assert stored_credentials(new.data_dir)[(session["id"], "runtime")][1] == SealedCredential.tombstone()
    assert restored["credential_bindings"] == ["runtime"]


def test_a_rotation_publishes_the_re_encrypted_records(
    brain_factory: Callable[..., BrainServer], archive: Path, sdk_clients: list[Brain]
) -> None:
    # given
    server = keyed_server(brain_factory, persistence=_persistence(archive))
    client = server.sdk()
    sdk_clients.append(client)
    session = create_with_credential(client)
    first = client.flush(session["id"])["checkpoint"]
    config = server.directory / "rotated.json"
    config.write_text(json.dumps({**server.config, "credential_keys": {"active": "k2", "keys": KEY_ENVS}}))
    # when
    rotated = manage(server, "rotate_credentials", config=config)
    # then
    assert rotated.returncode == 0, rotated.stderr
    assert f"session {session['id']}: checkpoint published" in rotated.stdout
    latest = json.loads((archive / "sessions" / session["id"] / "latest").read_bytes())["checkpoint"]
    assert latest != first
    (record,) = _manifest(archive, session["id"], latest)["credentials"]
    assert record["key_id"] == "k2"
    assert _manifest(archive, session["id"], first)["credentials"][0]["key_id"] == "k1"  # retained as it was
    assert files_holding(archive, SECRET.encode()) == []
