"""Graceful shutdown: SIGTERM/SIGINT interrupt running turns, end streams, and exit in time;
through the drain's grace period the server is not ready but still answers."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import httpx
import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    outline,
    send_ok,
    wait_for_turn_end,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

EXIT_SECONDS = 25  # spec: exits within about 20 seconds; a little slack for a loaded machine
NOT_READY_SECONDS = 2.0  # the signal reaching the server and the next readiness probe


@pytest.mark.parametrize(
    "sig", [pytest.param(signal.SIGTERM, id="sigterm_case"), pytest.param(signal.SIGINT, id="sigint_case")]
)
def test_a_signal_interrupts_the_running_turn_and_ends_streams(
    brain_factory: Callable[..., BrainServer], sig: signal.Signals
) -> None:
    # given: a running turn with a queued message and an open stream
    server = brain_factory()
    client = server.sdk()
    session = create_session(server)
    kept = client.send(session["id"], {"type": "user.message", "text": "kept"})
    wait_for_turn_end(server, session["id"], kept["id"])
    stream = open_stream(server, session["id"])
    running = client.send(session["id"], {"type": "user.message", "text": "sleep:30"})
    queued = client.send(session["id"], {"type": "user.message", "text": "queued"})
    stream.wait_for_event("session.status", input_id=running["id"], status="running")
    process = server.process
    assert process is not None
    # when
    process.send_signal(sig)
    try:
        code = process.wait(timeout=EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("brain did not exit after the signal") from None
    stream_ended = stream.wait_ended(timeout=5)
    seen = stream.retained()
    stream.close()
    server.process = None
    server.start()
    events = history(server, session["id"])
    # then
    assert code == 0
    assert stream_ended
    assert outline(events[-3:]) == [
        ("session.error", running["id"], {"code": "conflict", "message": "turn interrupted: server shutting down"}),
        ("session.error", queued["id"], {"code": "conflict", "message": "queued input interrupted before execution"}),
        ("session.status", running["id"], {"status": "interrupted"}),
    ]
    assert seen == events[: len(seen)]
    assert server.sdk().get(session["id"])["status"] == "interrupted"
    # and when: resumed, the next turn sees only the completed turn
    server.sdk().resume(session["id"])
    probe = send_ok(server, session["id"], "history")
    assert wait_for_turn_end(server, session["id"], probe["id"])[-2]["data"]["text"] == "history: kept | history"


def test_an_idle_server_stops_cleanly_and_keeps_its_sessions(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory()
    session = create_session(server)
    message = send_ok(server, session["id"], "idle")
    before = wait_for_turn_end(server, session["id"], message["id"])
    # when
    code = server.stop(signal.SIGTERM, timeout=EXIT_SECONDS)
    server.start()
    # then
    assert code == 0
    assert history(server, session["id"]) == before
    assert server.sdk().get(session["id"])["status"] == "idle"


def test_a_stopping_server_is_not_ready_but_answers_through_its_grace_period_and_exits_in_time(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: a server with the default grace period, a session, a client keeping its connection
    server = brain_factory(start=False)
    server.env.pop("BRAIN_DRAIN_SECONDS", None)
    server.start()
    session = create_session(server)
    process = server.process
    assert process is not None
    with server.client() as client:
        assert client.get(f"/sessions/{session['id']}").status_code == 200
        # when
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        ready = httpx.get(f"{server.url}/health/ready", timeout=10)
        while ready.status_code == 200 and time.monotonic() - began < NOT_READY_SECONDS:
            ready = httpx.get(f"{server.url}/health/ready", timeout=10)
        live = httpx.get(f"{server.url}/health/live", timeout=10)
        read = client.get(f"/sessions/{session['id']}")  # on the connection kept alive before
        page = httpx.get(
            f"{server.url}/sessions/{session['id']}/events",
            headers={"Authorization": f"Bearer {server.token()}"},
            timeout=10,
        )
    try:
        code = process.wait(timeout=EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("brain did not exit within the budget after SIGTERM") from None
    print(f"exited {time.monotonic() - began:.2f} s after SIGTERM")
    server.process = None
    # then: not ready at once, yet answering (every answer closing its connection), then gone
    assert (ready.status_code, ready.json()) == (503, {"status": "not_ready"})
    assert (live.status_code, live.headers["connection"]) == (200, "close")
    assert (read.status_code, read.json()["id"], read.headers["connection"]) == (200, session["id"], "close")
    assert page.status_code == 200
    assert code == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health/live", timeout=10)


def test_a_bad_drain_setting_stops_runbrain_at_start(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory(start=False)
    server.env["BRAIN_DRAIN_SECONDS"] = "60"
    # when
    with pytest.raises(RuntimeError) as refused:
        server.start()
    # then
    assert "BRAIN_DRAIN_SECONDS must be a number of seconds from 0 to 10, not '60'" in str(refused.value)
