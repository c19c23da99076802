"""A damaged event log takes down its own session only; the server and every other session work."""

from __future__ import annotations

from collections.abc import Callable

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_status, wait_for_turn_end


def test_a_corrupt_line_breaks_only_its_session_across_a_restart(brain_factory: Callable[..., BrainServer]) -> None:
    # given: two sessions with a turn each; the first is marked running on disk so startup loads it
    server = brain_factory()
    broken, healthy = create_session(server), create_session(server)
    for session in (broken, healthy):
        message = send_ok(server, session["id"], "hello")
        wait_for_turn_end(server, session["id"], message["id"])
    server.stop()
    log = server.data_dir / "sessions" / broken["id"] / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    damaged_at = len(lines[0]) + 1
    lines[1] = b'{"id":"' + b"0" * 10 + b"not json"
    log.write_bytes(b"\n".join(lines))
    (log.parent / "running").touch()

    # when
    server.start()
    client = server.client()

    # then: the server is up, the other session works, the broken one says why
    assert client.get("/health/ready").status_code == 200
    message = send_ok(server, healthy["id"], "still here")
    assert wait_for_turn_end(server, healthy["id"], message["id"])[-1]["data"] == {"status": "idle"}
    response = client.get(f"/sessions/{broken['id']}")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "brain_error"
    assert f"event log is damaged at byte {damaged_at}" in error["message"]
    assert str(server.data_dir) not in error["message"]
    assert wait_for_status(server, healthy["id"], "idle")["status"] == "idle"


def test_session_files_and_the_database_are_private_to_brains_user(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory()
    session = create_session(server)
    message = send_ok(server, session["id"], "hello")
    wait_for_turn_end(server, session["id"], message["id"])
    directory = server.data_dir / "sessions" / session["id"]

    # when
    paths = [
        server.data_dir / "sessions",
        directory,
        directory / "events.jsonl",
        directory / "checkpoints.jsonl",
        directory / "native",
        *(path for path in (directory / "native").rglob("*")),
        *server.data_dir.glob("metadata.sqlite*"),
    ]

    # then: nothing is readable, writable or searchable by group or others
    assert len(paths) >= 6
    assert {str(path.relative_to(server.data_dir)): path.stat().st_mode & 0o077 for path in paths} == {
        str(path.relative_to(server.data_dir)): 0 for path in paths
    }
