"""A full disk while a turn ends: the turn's outcome is seen live at once and recorded once
the disk has room again, before anything else, exactly once.

The disk is "full" the way bench/fault_drill.py makes it: runbrain's RLIMIT_FSIZE is lowered to
0 on the running process (prlimit(2)), so every write that would grow a file fails with EFBIG.
"""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    outline,
    send_ok,
    wait_for_status,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

QUEUED = "queued input interrupted before execution"
WRITE_FAILED = "event log write failed: File too large"


@contextlib.contextmanager
def _disk_full(server: BrainServer) -> Iterator[None]:
    assert server.process is not None
    pid = server.process.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, hard))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))


def _settled_failed(events: list[dict[str, Any]]) -> bool:
    return any(e["type"] == "session.status" and e["data"]["status"] == "failed" for e in events)


def _outcome(running: dict[str, Any], queued: dict[str, Any]) -> list[tuple[str, str | None, Any]]:
    return [
        ("session.error", running["id"], {"code": "brain_error", "message": WRITE_FAILED}),
        ("session.error", queued["id"], {"code": "conflict", "message": QUEUED}),
        ("session.status", running["id"], {"status": "failed"}),
    ]


def test_a_turn_ended_on_a_full_disk_is_streamed_at_once_and_recorded_once_after_resume(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: a running turn with an input queued behind it, a stream open, the disk full
    brain = brain_factory()
    session = create_session(brain)
    running = send_ok(brain, session["id"], "sleep:30")
    queued = send_ok(brain, session["id"], "second")
    wait_for_status(brain, session["id"], "running")
    with open_stream(brain, session["id"]) as stream:
        stream.wait_for(lambda seen: len(seen) >= 3)
        with _disk_full(brain):
            # when: the turn is stopped and its closing events cannot be appended
            with brain.client() as client:
                interrupted = client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"})
            streamed = stream.wait_for(_settled_failed)
            failed = wait_for_status(brain, session["id"], "failed")
            during = history(brain, session["id"])
            with brain.client() as client:
                refused = client.post(f"/sessions/{session['id']}/resume")
            after_refused = brain.sdk().get(session["id"])["status"]
    # and: the disk has room again and the session is resumed
    with brain.client() as client:
        resumed = client.post(f"/sessions/{session['id']}/resume")
    events = history(brain, session["id"])

    # then: the stream saw the turn end while the disk was full
    assert interrupted.status_code == 202
    assert outline(streamed[3:]) == _outcome(running, queued)
    assert failed["status"] == "failed"
    # the log had none of it yet, and a resume on the full disk changed nothing
    assert [e["type"] for e in during] == ["user.message", "session.status", "user.message"]
    assert refused.status_code == 500
    assert refused.json()["error"]["code"] == "brain_error"
    assert after_refused == "failed"
    # after the resume the history holds the outcome once, in order, then the idle status
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "idle"
    assert outline(events) == [
        ("user.message", None, {"type": "user.message", "text": "sleep:30", "delivery": "queue"}),
        ("session.status", running["id"], {"status": "running"}),
        ("user.message", None, {"type": "user.message", "text": "second", "delivery": "queue"}),
        *_outcome(running, queued),
        ("session.status", None, {"status": "idle"}),
    ]
    assert [events[0]["id"], events[2]["id"]] == [running["id"], queued["id"]]
    assert [e["id"] for e in events[3:6]] == [e["id"] for e in streamed[3:6]]
