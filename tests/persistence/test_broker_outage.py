"""A Celery-mode server whose broker is down: a publish that could not be handed to Redis is
dispatched again at the next interval, not only once REDISPATCH_SECONDS (30 s) have passed, so
the session is published as soon as the broker and a worker are back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from persistence_app.scheduler import REDISPATCH_SECONDS
from tests.fixtures.server import BrainServer, create_session, free_port
from tests.fixtures.services import RedisServer
from tests.persistence.test_sync_services import SyncWorker, _events_size, _filesystem, _turn, _wait

WAIT_SECONDS = REDISPATCH_SECONDS / 2  # two dispatches within it can only come from the interval


def _dispatch_failures(server: BrainServer, session_id: str) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in server.logs().splitlines() if line.startswith("{")]
    return [
        entry for entry in entries if entry.get("msg") == "sync dispatch failed" and entry["session_id"] == session_id
    ]


def _published(state: dict[str, Any], size: int) -> dict[str, Any] | None:
    return state if state["history_bytes"] == size and not state["pending"] else None


def test_a_publish_the_broker_refused_is_dispatched_again_at_the_next_interval(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: a server whose broker is not running yet (interval_seconds 1)
    redis = RedisServer(tmp_path / "redis", port=free_port())
    redis.directory.mkdir()
    archive = tmp_path / "archive"
    server = brain_factory(start=False, persistence=_filesystem(archive))
    server.env["BRAIN_CELERY_BROKER"] = redis.url
    server.start()
    # when: a session is created (and so marked dirty) while the broker is down
    session_id = create_session(server)["id"]
    # then: the refused dispatch is tried again at the next interval, and again
    failures = _wait(
        lambda: len(_dispatch_failures(server, session_id)) >= 3 and _dispatch_failures(server, session_id),
        WAIT_SECONDS,
        "three refused dispatches of the session",
    )
    assert [entry["level"] for entry in failures[:3]] == ["error", "error", "error"]
    # and: once the broker and a worker are back, the session is published (a turn's too)
    redis.start()
    worker = SyncWorker(server, tmp_path / "syncworker.log")
    try:
        worker.start()
        _turn(server, session_id, "after the outage")
        size = _events_size(server, session_id)
        with server.client() as client:
            state = _wait(
                lambda: _published(client.get(f"/sessions/{session_id}/sync").json(), size),
                WAIT_SECONDS,
                "the session published after the outage",
            )
        assert (state["pending"], state.get("error"), len(state["checkpoint"])) == (False, None, 32)
        manifest = json.loads((archive / "sessions" / session_id / "latest").read_bytes())
        assert manifest["checkpoint"] == state["checkpoint"]
        published = [line for line in worker.log().splitlines() if '"msg": "session published"' in line]
        assert any(session_id in line for line in published)
    finally:
        worker.stop()
        redis.stop()
