"""Per-session model credentials through the published client: `Model(name, ApiKey(key))` seals
the key in the vault and that session's model calls alone use it; `CredentialReference(name)`
selects a key the host config declares. The key appears nowhere else: not in events, logs, API
answers, admin pages, the archive's objects, or any runner's environment; it travels sealed with
a cold load and a restore on another server.

Real parts: runbrain, the `loop` harness, the scripted provider (which logs each request's
Authorization header), moto's S3 server as the archive, and the admin over HTTP.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from brain import Brain, BrainError

from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history
from tests.fixtures.services import MotoS3
from tests.support.credentials import KEY_ENVS, create_with_model_credential, files_holding, keyed_server, manage

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

SESSION_KEY = "sk-session-own-key-5d1c7a9e0b3f"  # must reach the provider and nothing else
TEAM_KEY, TEAM_KEY_ROTATED = "sk-team-a-key-aaaaaaaaaaaa", "sk-team-a-key-bbbbbbbbbbbb"
CONFIGURED_KEY = "sk-test-provider-key-0123456789"  # tests.fixtures.server's TEST_OPENAI_KEY
S3_KEY_ENV, S3_SECRET_ENV = "TEST_S3_ACCESS_KEY", "TEST_S3_SECRET_KEY"
WAIT_SECONDS = 30.0


@pytest.fixture
def clients() -> Iterator[list[Brain]]:
    made: list[Brain] = []
    yield made
    for client in made:
        client.dispose()


def _s3(moto: MotoS3) -> dict[str, Any]:
    bucket = moto.create_bucket(f"model-keys-{secrets.token_hex(4)}")
    return {
        "provider": "s3",
        "bucket": bucket,
        "endpoint": moto.endpoint,
        "region": moto.region,
        "access_key_env": S3_KEY_ENV,
        "secret_key_env": S3_SECRET_ENV,
        "interval_seconds": 1,
    }


def _server(
    factory: Callable[..., BrainServer],
    provider: ScriptedProvider,
    *,
    moto: MotoS3 | None = None,
    env: dict[str, str] | None = None,
    **config: Any,
) -> BrainServer:
    """A keyed server on the loop harness and the scripted provider (and moto's S3, if given)."""
    env = {**(env or {}), **({S3_KEY_ENV: moto.access_key, S3_SECRET_ENV: moto.secret_key} if moto else {})}
    return keyed_server(factory, env=env, harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), **config)


def _wait(what: str, predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _turn(server: BrainServer, session_id: str, text: str, name: str = "alice") -> list[dict[str, Any]]:
    """Send `text` through the client and wait for its turn to end; the turn's events."""
    sent = server.sdk(name).send(session_id, {"type": "user.message", "text": text})
    found: list[dict[str, Any]] = []

    def ended() -> bool:
        found[:] = [event for event in history(server, session_id, name) if event.get("input_id") == sent["id"]]
        return any(e["type"] == "session.status" and e["data"]["status"] != "running" for e in found)

    _wait(f"the end of the turn of {text!r}", ended)
    return found


def _final_status(events: list[dict[str, Any]]) -> str:
    return str([e for e in events if e["type"] == "session.status"][-1]["data"]["status"])


def _keys_used(provider: ScriptedProvider) -> list[str]:
    return [request["headers"]["authorization"].removeprefix("Bearer ") for request in provider.requests()]


def _runners(server: BrainServer) -> list[int]:
    """Pids of the server's `loop` runner children."""
    assert server.process is not None
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status, cmdline = (entry / "status").read_text(), (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent) == server.process.pid and b"runners.loop" in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def _archive_objects_holding(moto: MotoS3, bucket: str, needle: bytes) -> tuple[int, list[str]]:
    """How many objects the bucket holds, and the keys of those holding `needle`."""
    s3 = moto.client()
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    holding = []
    for key in keys:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            if needle in body.read():
                holding.append(key)
        finally:
            body.close()
    return len(keys), holding


def _s3_json(moto: MotoS3, bucket: str, key: str) -> dict[str, Any]:
    body = moto.client().get_object(Bucket=bucket, Key=key)["Body"]
    try:
        return json.loads(body.read())  # type: ignore[no-any-return]
    finally:
        body.close()


def test_a_sessions_own_key_reaches_its_model_calls_alone_and_appears_nowhere_else(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    moto_s3: MotoS3,
    clients: list[Brain],
) -> None:
    # given: a session created with its own key, another of the same tenant and one of another
    persistence = _s3(moto_s3)
    server = _server(brain_factory, scripted_provider, moto=moto_s3, persistence=persistence)
    alice, charlie = server.sdk(), server.sdk("charlie")
    clients.extend([alice, charlie])
    own = create_with_model_credential(alice, {"api_key": SESSION_KEY})
    plain = create_with_model_credential(alice, None)
    other = create_with_model_credential(charlie, None)

    # when: each runs a turn
    assert _final_status(_turn(server, own["id"], "first, with my key")) == "idle"
    assert _final_status(_turn(server, plain["id"], "second, with the configured key")) == "idle"
    assert _final_status(_turn(server, other["id"], "third, another tenant", "charlie")) == "idle"

    # then: the provider saw the session's key on its request alone
    assert _keys_used(scripted_provider) == [SESSION_KEY, CONFIGURED_KEY, CONFIGURED_KEY]
    # and: the two acme sessions share one runner, charlie's has its own; no environment holds the key
    runners = _runners(server)
    assert len(runners) == 2
    for pid in runners:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert SESSION_KEY.encode() not in environ and CONFIGURED_KEY.encode() not in environ

    # and: no answer, event, log line, admin page, local file or archive object holds it
    key = SESSION_KEY.encode()
    answers = [alice.get(own["id"]), alice.list(), own, alice.history(own["id"]), alice.flush(own["id"])]
    assert SESSION_KEY not in json.dumps(answers)
    assert "credential_bindings" not in alice.get(own["id"])
    assert SESSION_KEY not in json.dumps(history(server, own["id"]))
    create_superuser(server)
    with AdminClient(server) as admin:
        admin.login()
        pages = [
            admin.page(f"/admin/sessions_app/session/{own['id']}/change/"),
            admin.page("/admin/sessions_app/session/"),
        ]
    assert all(SESSION_KEY not in page for page in pages)
    assert files_holding(server.data_dir, key) == []
    bucket = persistence["bucket"]
    count, holding = _archive_objects_holding(moto_s3, bucket, key)
    assert count > 0 and holding == []
    latest = _s3_json(moto_s3, bucket, f"sessions/{own['id']}/latest")["checkpoint"]
    manifest = _s3_json(moto_s3, bucket, f"sessions/{own['id']}/checkpoints/{latest}")
    assert [(r["alias"], r["key_id"], r["revoked"]) for r in manifest["credentials"]] == [("@model", "k1", False)]
    assert (manifest["session"]["model_credential"], manifest["session"]["credential_bindings"]) == (
        {"api_key": "sealed"},
        [],
    )
    server.stop()
    assert SESSION_KEY not in server.logs()


def test_a_session_loaded_or_restored_on_another_server_keeps_its_key_and_its_reference(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    moto_s3: MotoS3,
    clients: list[Brain],
) -> None:
    # given: on server A, a session with its own key and one with a reference, each after a turn, flushed
    persistence = _s3(moto_s3)
    declared = {"team-a-openai": {"provider": "openai", "api_key_env": "TEAM_A_OPENAI_KEY"}}
    first = _server(
        brain_factory,
        scripted_provider,
        moto=moto_s3,
        env={"TEAM_A_OPENAI_KEY": TEAM_KEY},
        persistence=persistence,
        model_credentials=declared,
    )
    client = first.sdk()
    clients.append(client)
    own = create_with_model_credential(client, {"api_key": SESSION_KEY})
    referring = create_with_model_credential(client, {"reference": "team-a-openai"})
    assert _final_status(_turn(first, own["id"], "before the move")) == "idle"
    assert _final_status(_turn(first, referring["id"], "before the move, by reference")) == "idle"
    checkpoint = client.flush(referring["id"])["checkpoint"]
    client.flush(own["id"])
    assert _keys_used(scripted_provider) == [SESSION_KEY, TEAM_KEY]
    first.stop()

    # when: server B (empty data dir, the same archive and credential keys; its own key for the
    # reference) loads the first from the archive and restores the second's checkpoint
    second = brain_factory(
        start=False,
        harnesses={"loop": LOOP_HARNESS},
        providers=scripted_provider.providers(),
        persistence=persistence,
        credential_keys=first.config["credential_keys"],
        model_credentials=declared,
    )
    second.env.update({name: first.env[name] for name in [*KEY_ENVS.values(), S3_KEY_ENV, S3_SECRET_ENV]})
    second.env["TEAM_A_OPENAI_KEY"] = TEAM_KEY_ROTATED
    second.start()
    moved = second.sdk()
    clients.append(moved)
    assert moved.get(own["id"])["status"] == "interrupted"  # a cold load waits for a resume
    moved.resume(own["id"])
    moved.restore(referring["id"], checkpoint)
    moved.resume(referring["id"])

    # then: the next turns use the session's own key and B's key for the reference
    assert _final_status(_turn(second, own["id"], "after the move")) == "idle"
    assert _final_status(_turn(second, referring["id"], "after the move, by reference")) == "idle"
    assert _keys_used(scripted_provider) == [SESSION_KEY, TEAM_KEY, SESSION_KEY, TEAM_KEY_ROTATED]
    assert "before the move" in json.dumps(scripted_provider.bodies()[2])  # the conversation came along
    assert files_holding(second.data_dir, SESSION_KEY.encode()) == []
    second.stop()
    assert SESSION_KEY not in second.logs() and SESSION_KEY not in first.logs()


def test_a_reference_uses_the_declared_key_and_follows_its_rotated_file(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, tmp_path: Path, clients: list[Brain]
) -> None:
    # given: a declared key given as a file, and a session referring to it after one turn
    key_file = tmp_path / "team-a-key"
    key_file.write_text(TEAM_KEY + "\n")
    declared = {"team-a-openai": {"provider": "openai", "api_key_env": "TEAM_A_OPENAI_KEY"}}
    env = {"TEAM_A_OPENAI_KEY_FILE": str(key_file)}
    server = _server(brain_factory, scripted_provider, env=env, model_credentials=declared)
    client = server.sdk()
    clients.append(client)
    session = create_with_model_credential(client, {"reference": "team-a-openai"})
    assert _final_status(_turn(server, session["id"], "with the first key")) == "idle"

    # when: the secret is rotated (a new file renamed over the old one)
    staged = key_file.with_name("staged")
    staged.write_text(TEAM_KEY_ROTATED + "\n")
    staged.replace(key_file)
    _wait(
        "the key change",
        lambda: any("model_credentials" in line and "key changed" in line for line in server.log_lines),
    )
    _wait("the idle runner to be recycled", lambda: _runners(server) == [])

    # then: the next turn opens a runner with the new key, the conversation intact
    assert _final_status(_turn(server, session["id"], "with the rotated key")) == "idle"
    assert _keys_used(scripted_provider) == [TEAM_KEY, TEAM_KEY_ROTATED]
    assert "with the first key" in json.dumps(scripted_provider.bodies()[-1])
    assert TEAM_KEY not in server.logs() and TEAM_KEY_ROTATED not in server.logs()


def test_a_revoked_model_credential_stops_the_next_turn_before_any_model_call(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, clients: list[Brain]
) -> None:
    # given
    server = _server(brain_factory, scripted_provider)
    client = server.sdk()
    clients.append(client)
    session = create_with_model_credential(client, {"api_key": SESSION_KEY})
    assert _final_status(_turn(server, session["id"], "before the revocation")) == "idle"

    # when
    revoked = manage(server, "revoke_credential", session["id"], "@model")
    assert revoked.returncode == 0, revoked.stderr

    # then: the turn ends with a provider error, no model request made, and no fallback key used
    events = _turn(server, session["id"], "after the revocation")
    errors = [event["data"] for event in events if event["type"] == "session.error"]
    assert errors == [
        {
            "code": "provider_error",
            "message": "the session's model credential was revoked; no model request was made",
        }
    ]
    assert _final_status(events) == "interrupted"
    assert _keys_used(scripted_provider) == [SESSION_KEY]


@pytest.mark.parametrize(
    ("credential", "status", "message"),
    [
        pytest.param(
            {"reference": "team-z"},
            400,
            "model_credential.reference 'team-z' is not declared in the host config",
            id="unknown_reference_case",
        ),
        pytest.param(
            {"reference": "team-b-anthropic"},
            400,
            "model_credential.reference 'team-b-anthropic' is a key of provider 'anthropic',"
            " not of the session's model provider 'openai'",
            id="other_provider_case",
        ),
        pytest.param(
            {"api_key": "sk-a", "reference": "team-b-anthropic"},
            400,
            "model_credential must have exactly one of api_key or reference",
            id="both_case",
        ),
        pytest.param({}, 400, "model_credential must have exactly one of api_key or reference", id="neither_case"),
        pytest.param(
            {"api_key": "x" * (8 * 1024 + 1)},
            400,
            "model_credential.api_key must be 1-8192 printable ASCII characters without spaces",
            id="too_long_case",
        ),
        pytest.param(
            {"api_key": "sk-with space"},
            400,
            "model_credential.api_key must be 1-8192 printable ASCII characters without spaces",
            id="whitespace_case",
        ),
        pytest.param({"api_key": "sk-a", "token": "x"}, 400, None, id="unknown_field_case"),
    ],
)
def test_a_bad_model_credential_is_refused_at_create_and_creates_nothing(
    module_keyed_brain: BrainServer, credential: dict[str, str], status: int, message: str | None
) -> None:
    # when
    client = module_keyed_brain.sdk()
    before = client.list()["sessions"]
    with pytest.raises(BrainError) as refused:
        client.create(
            {"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}, "model_credential": credential}
        )

    # then
    assert (refused.value.status, refused.value.code) == (status, "invalid_request")
    if message is not None:
        assert str(refused.value) == message
    assert client.list()["sessions"] == before
    assert "sk-a" not in module_keyed_brain.logs()


def test_an_api_key_on_a_server_without_credential_keys_is_unsupported(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: the default test server configures no credential_keys
    server = brain_factory()

    # when
    with pytest.raises(BrainError) as refused:
        server.sdk().create(
            {
                "harness": "instant",
                "config": {"model": "openai/gpt-4.1-mini", "tools": []},
                "model_credential": {"api_key": SESSION_KEY},
            }
        )

    # then
    assert (refused.value.status, refused.value.code) == (422, "unsupported")
    assert str(refused.value) == "a model_credential api_key needs credential_keys in the host config"
    assert server.sdk().list()["sessions"] == []


@pytest.fixture(scope="module")
def module_keyed_brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    """One keyed server declaring an anthropic key, for refusals (which start no turn)."""
    from tests.fixtures.server import make_server

    directory = tmp_path_factory.mktemp("keyed")
    declared = {"team-b-anthropic": {"provider": "anthropic", "api_key_env": "TEAM_B_ANTHROPIC_KEY"}}
    providers = {"openai": {"api_key_env": "TEST_OPENAI_KEY"}, "anthropic": {"api_key_env": "TEST_OPENAI_KEY"}}
    server = make_server(directory, harnesses={"loop": LOOP_HARNESS}, providers=providers, model_credentials=declared)
    server.config["credential_keys"] = {"active": "k1", "keys": {"k1": KEY_ENVS["k1"]}}
    server.env[KEY_ENVS["k1"]] = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="  # base64 of 32 bytes
    server.env["TEAM_B_ANTHROPIC_KEY"] = "sk-team-b"
    server.start()
    yield server
    server.stop()
