"""Sessions that outlive their server, against real `runbrain` processes sharing a filesystem
archive: flush, sync status, the handoff drill, cold loads and restore's refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, history, send_ok, wait_for_status, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0


def _archive_config(archive: Path, **extra: Any) -> dict[str, Any]:
    return {"persistence": {"provider": "filesystem", "directory": str(archive), "interval_seconds": 1, **extra}}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return tmp_path / "archive"


def _turn(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    accepted = send_ok(server, session_id, text)
    return wait_for_turn_end(server, session_id, accepted["id"])


def test_flush_publishes_a_checkpoint_that_sync_reports(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given
    server = brain_factory(**_archive_config(archive))
    session = create_session(server)
    _turn(server, session["id"], "first")
    client = server.sdk()
    # when
    flushed = client.flush(session["id"])
    status = client.sync(session["id"])
    # then
    assert len(flushed["checkpoint"]) == 32
    assert flushed["pending"] is False
    events = server.data_dir / "sessions" / session["id"] / "events.jsonl"
    assert flushed["history_bytes"] == events.stat().st_size
    assert 0 < flushed["resume_offset"] <= flushed["history_bytes"]
    assert status["checkpoint"] == flushed["checkpoint"]
    manifest = json.loads((archive / "sessions" / session["id"] / "checkpoints" / flushed["checkpoint"]).read_bytes())
    assert manifest["session"]["tenant"] == "acme"
    assert manifest["history_bytes"] == flushed["history_bytes"]
    latest = json.loads((archive / "sessions" / session["id"] / "latest").read_bytes())
    assert latest["checkpoint"] == flushed["checkpoint"]
    # and: a second flush with nothing new returns the same checkpoint
    assert client.flush(session["id"])["checkpoint"] == flushed["checkpoint"]


def test_background_sync_publishes_settled_sessions_without_a_flush(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    server = brain_factory(**_archive_config(archive))
    session = create_session(server)
    _turn(server, session["id"], "first")
    client = server.sdk()
    status: dict[str, Any] = {}
    for _ in range(100):
        status = client.sync(session["id"])
        if not status["pending"] and status.get("checkpoint"):
            break
        import time

        time.sleep(0.1)
    assert status["pending"] is False
    assert (archive / "sessions" / session["id"] / "latest").exists()


def test_the_handoff_drill_moves_a_session_with_its_conversation(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given: a session with two turns on server A
    old = brain_factory(**_archive_config(archive))
    session = create_session(old)
    _turn(old, session["id"], "one")
    _turn(old, session["id"], "two")
    before = history(old, session["id"])
    # when: flush, stop A, restore the explicit checkpoint on B, resume, next turn
    checkpoint = old.sdk().flush(session["id"])["checkpoint"]
    old.stop()
    new = brain_factory(**_archive_config(archive))
    client = new.sdk()
    restored = client.restore(session["id"], checkpoint)
    assert restored["status"] == "interrupted"
    assert client.resume(session["id"])["status"] == "idle"
    answer = _turn(new, session["id"], "history")
    # then: the new server has the history and the harness remembers the earlier turns
    after = history(new, session["id"])
    assert after[: len(before)] == before
    assert answer[-2]["data"]["text"] == "history: one | two | history"


def test_a_session_unknown_locally_is_loaded_from_latest_and_waits_for_resume(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    old = brain_factory(**_archive_config(archive))
    session = create_session(old)
    _turn(old, session["id"], "remember me")
    old.sdk().flush(session["id"])
    before = history(old, session["id"])
    old.stop()
    # when: a server with an empty data dir is asked for the session
    new = brain_factory(**_archive_config(archive))
    loaded = new.sdk().get(session["id"])
    # then
    assert loaded["status"] == "interrupted"
    assert history(new, session["id"])[: len(before)] == before
    # and: another tenant does not see it
    other = new.client("charlie").get(f"/sessions/{session['id']}")
    assert other.status_code == 404
    new.sdk().resume(session["id"])
    answer = _turn(new, session["id"], "history")
    assert answer[-2]["data"]["text"] == "history: remember me | history"


def test_restore_refuses_a_running_turn_another_tenant_and_an_unknown_checkpoint(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    server = brain_factory(**_archive_config(archive))
    session = create_session(server)
    _turn(server, session["id"], "first")
    checkpoint = server.sdk().flush(session["id"])["checkpoint"]
    with server.client() as alice, server.client("charlie") as charlie:
        unknown = alice.post(f"/sessions/{session['id']}/restore", json={"checkpoint": "0" * 32})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "not_found"
        foreign = charlie.post(f"/sessions/{session['id']}/restore", json={"checkpoint": checkpoint})
        assert foreign.status_code == 403
        send_ok(server, session["id"], "sleep:30")
        wait_for_status(server, session["id"], "running")
        busy = alice.post(f"/sessions/{session['id']}/restore", json={"checkpoint": checkpoint})
        assert busy.status_code == 409
        reader = server.client("reader").post(f"/sessions/{session['id']}/restore", json={"checkpoint": checkpoint})
        assert reader.status_code == 403


def test_restore_keeps_the_replaced_directory_aside(brain_factory: Callable[..., BrainServer], archive: Path) -> None:
    server = brain_factory(**_archive_config(archive))
    session = create_session(server)
    _turn(server, session["id"], "kept")
    checkpoint = server.sdk().flush(session["id"])["checkpoint"]
    _turn(server, session["id"], "lost by the restore")
    # when
    restored = server.sdk().restore(session["id"], checkpoint)
    # then
    assert restored["status"] == "interrupted"
    sessions = server.data_dir / "sessions"
    aside = [path.name for path in sessions.iterdir() if path.name.startswith(f"{session['id']}-replaced-")]
    assert len(aside) == 1
    texts = [event["data"].get("text") for event in history(server, session["id"]) if event["type"] == "user.message"]
    assert texts == ["kept"]


def test_flush_sync_and_restore_are_422_without_persistence(brain: BrainServer) -> None:
    session = create_session(brain)
    with brain.client() as client:
        for response in (
            client.post(f"/sessions/{session['id']}/flush"),
            client.get(f"/sessions/{session['id']}/sync"),
            client.post(f"/sessions/{session['id']}/restore", json={"checkpoint": "0" * 32}),
        ):
            assert response.status_code == 422
            assert response.json()["error"]["code"] == "unsupported"


def test_sessions_left_unsynced_by_a_crash_are_published_after_the_restart(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given: background sync far away, a session with a turn, and a kill before any upload
    server = brain_factory(**_archive_config(archive, interval_seconds=3600))
    session = create_session(server)
    _turn(server, session["id"], "not uploaded yet")
    server.kill()
    assert not (archive / "sessions" / session["id"] / "latest").exists()
    # when: the server comes back (its startup scan finds the session) and nothing else happens
    server.start()
    # then
    import time

    latest = archive / "sessions" / session["id"] / "latest"
    deadline = time.monotonic() + 20
    while not latest.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert latest.exists()
    status = server.sdk().sync(session["id"])
    events = server.data_dir / "sessions" / session["id"] / "events.jsonl"
    assert status["history_bytes"] == events.stat().st_size
    assert status["pending"] is False
