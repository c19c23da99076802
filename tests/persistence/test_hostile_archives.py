"""Archives a server must not trust: manifests that would amplify a few archived bytes into a
full disk, name impossible files or describe more than the server's limits, against real
`runbrain` processes on a filesystem archive; the directories restores keep aside; and closed
sessions, which no restore reopens."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, history, send_ok, wait_for_status, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

SESSION_BYTES = 16 << 20  # the smallest limits.session_bytes: what a manifest may describe is bounded by it
OBJECT_BYTES = 2 << 20  # the archive's largest object


def _config(archive: Path, **persistence: Any) -> dict[str, Any]:
    return {
        "persistence": {"provider": "filesystem", "directory": str(archive), "interval_seconds": 3600, **persistence},
        "limits": {"session_bytes": SESSION_BYTES},
    }


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return tmp_path / "archive"


def _turn(server: BrainServer, session_id: str, text: str) -> None:
    wait_for_turn_end(server, session_id, send_ok(server, session_id, text)["id"])


def _manifest(archive: Path, session_id: str, checkpoint: str) -> dict[str, Any]:
    return json.loads((archive / "sessions" / session_id / "checkpoints" / checkpoint).read_bytes())  # type: ignore[no-any-return]


def _plant(archive: Path, manifest: dict[str, Any]) -> str:
    """Write `manifest` into the archive under a new checkpoint id; returns the id."""
    checkpoint = secrets.token_hex(16)
    manifest = {**manifest, "checkpoint": checkpoint}
    path = archive / "sessions" / manifest["session"]["id"] / "checkpoints" / checkpoint
    path.write_bytes(json.dumps(manifest).encode())
    return checkpoint


def _plant_object(archive: Path, key: str, data: bytes) -> None:
    path = archive / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _repeated_tail(archive: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """events.jsonl as its one tail segment named 16 times: 16 times its bytes on disk."""
    tampered = json.loads(json.dumps(manifest))
    entry = tampered["files"]["events.jsonl"]
    (key, size), whole = entry["tail"][0], entry["blocks"] * 64 * 1024
    entry.update(size=whole + 16 * size, tail=[[key, size]] * 16)
    tampered["history_bytes"] = entry["size"]
    return tampered


def _oversized(archive: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """A native file of 16 distinct 2 MiB tail objects: 32 MiB, over a 16 MiB session."""
    tampered = json.loads(json.dumps(manifest))
    session_id, generation = manifest["session"]["id"], secrets.token_hex(16)
    tail = []
    for _ in range(16):
        key = f"sessions/{session_id}/tails/{secrets.token_hex(16)}/{generation}"
        _plant_object(archive, key, b"x" * OBJECT_BYTES)
        tail.append([key, OBJECT_BYTES])
    tampered["files"]["native/big.bin"] = {
        "generation": generation,
        "size": 16 * OBJECT_BYTES,
        "blocks": 0,
        "tail": tail,
    }
    tampered["native_checkpoint"]["files"].append({"path": "big.bin", "size": 16 * OBJECT_BYTES, "append_only": True})
    return tampered


def _renamed(name: str) -> Callable[[Path, dict[str, Any]], dict[str, Any]]:
    def tamper(archive: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        tampered = json.loads(json.dumps(manifest))
        (old,) = [item for item in tampered["files"] if item.startswith("native/")]
        tampered["files"][f"native/{name}"] = tampered["files"].pop(old)
        tampered["native_checkpoint"]["files"][0]["path"] = name
        return tampered

    return tamper


def _time_not_a_time(archive: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, "time": 12}


HOSTILE = {
    "repeated_tail_segment": _repeated_tail,
    "over_the_session_limit": _oversized,
    "nul_in_a_name": _renamed("conver\x00sation"),
    "name_too_long": _renamed("x" * 300),
    "time_not_a_time": _time_not_a_time,
}


def _local_state(server: BrainServer, session_id: str) -> tuple[list[str], bytes, dict[str, Any]]:
    sessions = server.data_dir / "sessions"
    names = sorted(path.name for path in sessions.iterdir())
    events = (sessions / session_id / "events.jsonl").read_bytes()
    with server.client() as client:
        session = client.get(f"/sessions/{session_id}").json()
    return names, events, session


def test_a_restore_refuses_hostile_manifests_before_writing_anything(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given: a published session with a turn (so a native file), and its manifest
    server = brain_factory(**_config(archive))
    session = create_session(server)
    _turn(server, session["id"], "kept")
    checkpoint = server.sdk().flush(session["id"])["checkpoint"]
    manifest = _manifest(archive, session["id"], checkpoint)
    assert len(manifest["files"]) == 2  # events.jsonl and the runner's conversation
    before = _local_state(server, session["id"])
    answers = {}
    with server.client() as client:
        for name, tamper in HOSTILE.items():
            planted = _plant(archive, tamper(archive, manifest))
            # when
            response = client.post(f"/sessions/{session['id']}/restore", json={"checkpoint": planted})
            answers[name] = (response.status_code, response.json()["error"]["code"])
            # then: refused, and nothing was written: no directory kept aside, none half-written,
            # the same log, the same row
            assert _local_state(server, session["id"]) == before, name
    assert answers == {name: (400, "invalid_request") for name in HOSTILE}
    # and: the genuine checkpoint still restores
    assert server.sdk().restore(session["id"], checkpoint)["status"] == "interrupted"
    assert [e["data"]["text"] for e in history(server, session["id"]) if e["type"] == "user.message"] == ["kept"]


def test_a_cold_load_of_a_hostile_latest_is_a_conflict_and_loads_nothing(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given: a session published by a server now gone, whose `latest` names an amplifying manifest
    old = brain_factory(**_config(archive))
    session = create_session(old)
    _turn(old, session["id"], "first")
    checkpoint = old.sdk().flush(session["id"])["checkpoint"]
    old.stop()
    planted = _plant(archive, _repeated_tail(archive, _manifest(archive, session["id"], checkpoint)))
    latest = archive / "sessions" / session["id"] / "latest"
    latest.write_bytes(json.dumps({"checkpoint": planted}).encode())
    # when: a server with an empty data dir is asked for it
    new = brain_factory(**_config(archive))
    with new.client() as client:
        got = client.get(f"/sessions/{session['id']}")
        events = client.get(f"/sessions/{session['id']}/events")
    # then: 409 with the error envelope, and no directory or row on the new server
    assert got.status_code == 409, got.text
    assert got.json()["error"]["code"] == "conflict"
    assert "not a valid manifest" in got.json()["error"]["message"]
    assert events.status_code == 409
    assert sorted(path.name for path in (new.data_dir / "sessions").iterdir()) == []
    with new.client() as client:
        assert client.get("/sessions").json()["sessions"] == []


def test_restores_keep_only_the_newest_replaced_directories(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given: a server that keeps two replaced directories per session
    server = brain_factory(**_config(archive, keep_replaced=2))
    session = create_session(server)
    _turn(server, session["id"], "checkpointed")
    checkpoint = server.sdk().flush(session["id"])["checkpoint"]
    sessions = server.data_dir / "sessions"
    # when: four restores, each after a turn that only the local copy has
    for round_ in range(4):
        _turn(server, session["id"], f"local {round_}")
        server.sdk().restore(session["id"], checkpoint)
        server.sdk().resume(session["id"])
    # then: the two newest replaced directories are kept, the older ones are gone
    kept = sorted(
        (path for path in sessions.iterdir() if path.name.startswith(f"{session['id']}-replaced-")),
        key=lambda path: path.stat().st_mtime,
    )
    assert len(kept) == 2
    texts = [(path / "events.jsonl").read_text() for path in kept]
    assert ["local 2" in texts[0], "local 3" in texts[0], "local 3" in texts[1]] == [True, False, True]
    assert sorted(path.name for path in sessions.iterdir() if not path.name.startswith(session["id"])) == []


def test_a_closed_session_is_never_reopened_by_a_checkpoint_from_before_its_close(
    brain_factory: Callable[..., BrainServer], archive: Path
) -> None:
    # given: a checkpoint, then a close, then a checkpoint of the closed session
    server = brain_factory(**_config(archive))
    session = create_session(server)
    _turn(server, session["id"], "before the close")
    before_close = server.sdk().flush(session["id"])["checkpoint"]
    server.sdk().close(session["id"])
    wait_for_status(server, session["id"], "closed")
    after_close = server.sdk().flush(session["id"])["checkpoint"]
    assert after_close != before_close
    sessions = server.data_dir / "sessions"
    with server.client() as client:
        # when: the operator's close would be undone by restoring the older checkpoint
        refused = client.post(f"/sessions/{session['id']}/restore", json={"checkpoint": before_close})
        # then: 409, and the session is still closed, nothing set aside
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "conflict"
        assert "closed" in refused.json()["error"]["message"]
        assert client.get(f"/sessions/{session['id']}").json()["status"] == "closed"
        assert [path.name for path in sessions.iterdir()] == [session["id"]]
        # and: the checkpoint of the closed session restores, closed
        restored = client.post(f"/sessions/{session['id']}/restore", json={"checkpoint": after_close})
        assert restored.status_code == 200, restored.text
        assert restored.json()["status"] == "closed"
        assert client.post(f"/sessions/{session['id']}/resume").status_code == 409
    # and: a server that never saw the session learns of the close from the archive's latest
    server.stop()
    other = brain_factory(**_config(archive))
    with other.client() as client:
        refused = client.post(f"/sessions/{session['id']}/restore", json={"checkpoint": before_close})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "conflict"
        assert list((other.data_dir / "sessions").iterdir()) == []
