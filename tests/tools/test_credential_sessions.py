"""Private binding credentials on a real server: create with `credentials`, the aliases on the
wire, no plaintext on disk or in logs, refusals, and the rotation and revocation commands."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from brain import Brain

from tests.fixtures.server import BrainServer, send_ok, wait_for_turn_end
from tests.support.credentials import (
    KEY_ENVS,
    LOOKUP,
    MODEL,
    SECRET,
    create_with_credential,
    files_holding,
    keyed_server,
    manage,
    stored_credentials,
    vault_of,
)
from tools_app.vault import CredentialVault, SealedCredential

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0


@pytest.fixture
def sdk_clients() -> Iterator[list[Brain]]:
    made: list[Brain] = []
    yield made
    for client in made:
        client.dispose()


def test_a_session_keeps_its_credential_sealed_and_lists_only_the_alias(
    brain_factory: Callable[..., BrainServer], sdk_clients: list[Brain]
) -> None:
    # given
    server = keyed_server(brain_factory)
    client = server.sdk()
    sdk_clients.append(client)
    # when
    session = create_with_credential(client)
    accepted = send_ok(server, session["id"], 'tool:runtime_lookup {"q": "orders"}')
    events = wait_for_turn_end(server, session["id"], accepted["id"])
    # then: the aliases on create, get and list, never the value
    assert session["credential_bindings"] == ["runtime"]
    assert client.get(session["id"])["credential_bindings"] == ["runtime"]
    (listed,) = [item for item in client.list()["sessions"] if item["id"] == session["id"]]
    assert listed["credential_bindings"] == ["runtime"]
    assert SECRET not in json.dumps([session, listed, events])
    assert [event["data"]["outcome"] for event in events if event["type"] == "tool.result"] == ["ok"]
    # and: the database holds one record, sealed under the active key and bound to the session
    ((key, (tenant, sealed)),) = stored_credentials(server.data_dir).items()
    assert key == (session["id"], "runtime") and tenant == "acme" and sealed.key_id == "k1"
    assert vault_of(server).open(sealed, "acme", session["id"], "runtime") == {"token": SECRET}
    # and: the value is in no file of the data dir (events, checkpoints, SQLite and its journal)
    # and no log line
    assert files_holding(server.data_dir, SECRET.encode()) == []
    assert SECRET not in server.logs()


def test_a_session_without_credentials_has_no_credential_bindings(brain_factory: Callable[..., BrainServer]) -> None:
    server = keyed_server(brain_factory)
    with server.client() as api:
        body = {"harness": "instant", "config": {"model": MODEL, "tools": []}, "credentials": []}
        session = api.post("/sessions", json=body).json()
    assert "credential_bindings" not in session
    assert stored_credentials(server.data_dir) == {}


def _create_body(executor: str, credentials: Any) -> dict[str, Any]:
    binding = {"alias": "runtime", "executor": executor, "runtime": [LOOKUP.descriptor()]}
    return {
        "harness": "instant",
        "config": {"model": MODEL, "tools": [], "bindings": [binding]},
        "credentials": credentials,
    }


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        pytest.param([{"binding": "other", "value": "x"}], "not a binding of the session", id="unknown_alias_case"),
        pytest.param(
            [{"binding": "runtime", "value": "x"}, {"binding": "runtime", "value": "y"}],
            "given twice",
            id="duplicate_case",
        ),
        pytest.param([{"binding": "runtime", "value": None}], "has no value", id="null_value_case"),
        pytest.param([{"binding": "runtime"}], "", id="no_value_case"),
        pytest.param([{"binding": "runtime", "value": "x", "extra": 1}], "", id="extra_field_case"),
        pytest.param([{"binding": "runtime", "value": "x" * (64 << 10)}], "exceeds", id="oversized_value_case"),
    ],
)
def test_invalid_credentials_are_400_and_create_nothing(
    brain_factory: Callable[..., BrainServer], credentials: Any, message: str
) -> None:
    # given
    server = keyed_server(brain_factory, limits={"input_bytes": 1 << 20})
    with server.client() as api:
        executor = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]}).json()
        # when
        response = api.post("/sessions", json=_create_body(executor["id"], credentials))
        # then
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_request"
        assert message in response.json()["error"]["message"]
        assert api.get("/sessions").json()["sessions"] == []
    assert stored_credentials(server.data_dir) == {}
    assert list((server.data_dir / "sessions").iterdir()) == []


def test_credentials_without_credential_keys_are_422_and_create_nothing(brain: BrainServer) -> None:
    with brain.client() as api:
        executor = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]}).json()
        response = api.post("/sessions", json=_create_body(executor["id"], [{"binding": "runtime", "value": "x"}]))
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "unsupported"
        assert api.get("/sessions").json()["sessions"] == []


def test_rotation_re_encrypts_with_the_active_key_once_and_the_session_stays_usable(
    brain_factory: Callable[..., BrainServer], sdk_clients: list[Brain]
) -> None:
    # given: two sessions with credentials under k1, one of them revoked
    server = keyed_server(brain_factory)
    client = server.sdk()
    sdk_clients.append(client)
    kept, revoked = create_with_credential(client), create_with_credential(client, {"token": "other"})
    revocation = manage(server, "revoke_credential", revoked["id"], "runtime")
    assert revocation.returncode == 0, revocation.stderr
    # when: k2 becomes active and the rotation runs twice
    rotated_config = server.directory / "rotated.json"
    rotated_config.write_text(json.dumps({**server.config, "credential_keys": {"active": "k2", "keys": KEY_ENVS}}))
    first = manage(server, "rotate_credentials", config=rotated_config)
    second = manage(server, "rotate_credentials", config=rotated_config)
    # then
    assert first.returncode == 0, first.stderr
    assert "1 credential(s) to re-encrypt with key 'k2'" in first.stdout
    assert "re-encrypted 1/1" in first.stdout
    assert second.returncode == 0, second.stderr
    assert "0 credential(s) to re-encrypt" in second.stdout
    records = stored_credentials(server.data_dir)
    tenant, sealed = records[(kept["id"], "runtime")]
    assert sealed.key_id == "k2"
    only_k2 = CredentialVault({"k2": base64.b64decode(server.env[KEY_ENVS["k2"]])}, active="k2")
    assert only_k2.open(sealed, tenant, kept["id"], "runtime") == {"token": SECRET}
    assert records[(revoked["id"], "runtime")][1] == SealedCredential.tombstone()
    # and: the rotated server serves the session, and the aliases stay listed (revoked too)
    server.stop()
    server.config["credential_keys"]["active"] = "k2"
    server.start()
    client = server.sdk()
    sdk_clients.append(client)
    assert client.get(kept["id"])["credential_bindings"] == ["runtime"]
    assert client.get(revoked["id"])["credential_bindings"] == ["runtime"]
    assert files_holding(server.data_dir, SECRET.encode()) == []
    # and: revoking again, or an alias without a credential, is refused
    again = manage(server, "revoke_credential", revoked["id"], "runtime")
    assert again.returncode != 0 and "no live credential" in again.stderr


def test_rotation_reports_records_whose_key_is_gone_and_leaves_them(
    brain_factory: Callable[..., BrainServer], sdk_clients: list[Brain]
) -> None:
    # given: a record under k1, then a config that no longer holds k1
    server = keyed_server(brain_factory)
    client = server.sdk()
    sdk_clients.append(client)
    session = create_with_credential(client)
    config = server.directory / "k2-only.json"
    config.write_text(
        json.dumps({**server.config, "credential_keys": {"active": "k2", "keys": {"k2": KEY_ENVS["k2"]}}})
    )
    # when
    result = manage(server, "rotate_credentials", config=config)
    # then
    assert result.returncode != 0
    assert "is sealed with key 'k1', which is not configured" in result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert stored_credentials(server.data_dir)[(session["id"], "runtime")][1].key_id == "k1"


PROBE_PROVIDERS = json.dumps({"probe": {"class": "tests.support.providers.ProbeProvider", "options": {}}})


def _probe_binding(alias: str) -> dict[str, Any]:
    return {"alias": alias, "provider": "probe", "operations": ["echo"], "parameters": {"label": alias}}


def _call(server: BrainServer, session_id: str, tool: str) -> dict[str, Any]:
    accepted = send_ok(server, session_id, f'tool:{tool} {{"text": "hi"}}')
    events = wait_for_turn_end(server, session_id, accepted["id"])
    (result,) = [e["data"] for e in events if e["type"] == "tool.result" and e.get("input_id") == accepted["id"]]
    return result  # type: ignore[no-any-return]


def test_a_provider_receives_the_decrypted_credential_and_an_unusable_one_stops_the_call(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: a session binding the probe provider three times, two of them with credentials
    server = keyed_server(brain_factory, env={"BRAIN_TOOL_PROVIDERS": PROBE_PROVIDERS})
    body = {
        "harness": "instant",
        "config": {
            "model": MODEL,
            "tools": [],
            "bindings": [_probe_binding("first"), _probe_binding("second"), _probe_binding("plain")],
        },
        "credentials": [
            {"binding": "first", "value": {"token": SECRET}},
            {"binding": "second", "value": "second-secret"},
        ],
    }
    with server.client() as api:
        created = api.post("/sessions", json=body)
    assert created.status_code == 201, created.text
    session = created.json()
    assert session["credential_bindings"] == ["first", "second"]
    # when / then: each call's provider receives its own binding's credential, decrypted
    first = _call(server, session["id"], "first_echo")
    assert first["outcome"] == "ok"
    assert first["result"]["structured_content"]["credential"] == {"token": SECRET}
    assert _call(server, session["id"], "second_echo")["result"]["structured_content"]["credential"] == "second-secret"
    assert _call(server, session["id"], "plain_echo")["result"]["structured_content"]["credential"] is None
    # when: the first binding's credential is revoked while the session is loaded
    assert manage(server, "revoke_credential", session["id"], "first").returncode == 0
    refused = _call(server, session["id"], "first_echo")
    # then: the call stops before the provider, with an error result and no unknown outcome
    assert refused["outcome"] == "error"
    assert refused["result"]["is_error"] is True
    assert "unknown_outcome" not in refused["result"]
    assert refused["result"]["content"][0]["text"] == (
        "tool 'first_echo': its credential is unavailable: the credential of binding 'first' was revoked"
    )
    assert "structured_content" not in refused["result"]
    assert _call(server, session["id"], "second_echo")["outcome"] == "ok"
    # when: the server restarts without the key the second credential is sealed with
    server.stop()
    server.config["credential_keys"] = {"active": "k2", "keys": {"k2": KEY_ENVS["k2"]}}
    server.start()
    lost = _call(server, session["id"], "second_echo")
    # then: that call stops too, never running without its credential; the plain binding runs
    assert lost["outcome"] == "error"
    assert "sealed with key 'k1', which is not configured" in lost["result"]["content"][0]["text"]
    assert _call(server, session["id"], "plain_echo")["outcome"] == "ok"
    assert SECRET not in server.logs()
