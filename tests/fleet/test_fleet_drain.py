"""A graceful stop cuts no request: three real `runbrain` instances on one PostgreSQL behind a
balancer that checks `/health/ready` every 0.3 s and retries only refused connections (the
connection a client keeps alive stays with its instance). One instance gets SIGTERM under load:
every request is answered (2xx, or a 503/429 that a retry resolves), every stream that ends
ends after a complete event, none is cut."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import BrainServer
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory
from tests.support.balancer import Balancer
from tests.support.drain_load import Load

LEASE_SECONDS = 3
DRAIN_SECONDS = 2  # BRAIN_DRAIN_SECONDS: several of the balancer's health checks
SESSIONS = 9  # created through the balancer: a third on each instance
LOAD_SECONDS = 2.0  # of load before the signal, and again after the instance exited
EXIT_SECONDS = 25  # spec: about 20 s; a little slack for a loaded machine


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    return fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_drain",
        environment={"BRAIN_DRAIN_SECONDS": str(DRAIN_SECONDS)},
    )


def _create_sessions(url: str, token: str, count: int) -> list[str]:
    body = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    created = []
    for _ in range(count):
        # a connection each, so the balancer spreads them over the instances
        response = httpx.post(f"{url}/sessions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=15)
        assert response.status_code == 201, response.text
        created.append(response.json()["id"])
    return created


def test_a_graceful_stop_of_one_instance_of_three_under_load_cuts_no_request(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: three instances behind the balancer, sessions on each, clients reading, sending,
    # paging and streaming through it
    servers = [fleet(name) for name in ("brain-a", "brain-b", "brain-c")]
    victim = servers[1]
    balancer = Balancer([server.config["listen"] for server in servers])
    balancer.start()
    try:
        sessions = _create_sessions(balancer.url, victim.token(), SESSIONS)
        load = Load(balancer.url, victim.token(), sessions, clients=6, streams=3)
        load.start()
        time.sleep(LOAD_SECONDS)
        routed_before = balancer.counts.routed.get(victim.config["listen"], 0)
        # when: the victim is stopped gracefully in the middle of it
        began = time.monotonic()
        code = victim.stop(signal.SIGTERM, timeout=EXIT_SECONDS)
        drained = time.monotonic() - began
        time.sleep(LOAD_SECONDS)
        tally = load.stop()
    finally:
        balancer.stop()
    print(f"drain {drained:.2f} s; {tally.report()}; balancer {balancer.counts}")
    # then: nothing was cut, every request was answered (retries included), streams ended cleanly
    assert tally.cut == []
    assert tally.unresolved == []
    assert tally.answered > 0 and tally.streams > 0
    # and the victim, having served its share, drained and exited cleanly within the budget
    assert routed_before > 0
    assert code == 0
    assert drained < EXIT_SECONDS
    assert '"msg": "brain draining"' in victim.logs()


HANDED_OFF = 40  # sessions with a recent turn on the instance that stops: more than one upload at a time


def test_every_event_a_client_saw_on_a_draining_instance_is_readable_on_the_new_owner(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: many sessions on one instance, each with a turn just settled and its last event's
    # cursor in a client's hands
    victim, survivor = fleet("brain-a"), fleet("brain-b")
    headers = {"Authorization": f"Bearer {victim.token()}"}
    body = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    cursors: dict[str, str] = {}
    with httpx.Client(base_url=victim.url, headers=headers, timeout=15) as client:
        sessions = []
        for _ in range(HANDED_OFF):
            created = client.post("/sessions", json=body)
            assert created.status_code == 201, created.text
            sessions.append(created.json()["id"])
        for session_id in sessions:
            sent = client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": "hello"})
            assert sent.status_code in (200, 202), sent.text
        for session_id in sessions:
            deadline = time.monotonic() + 15
            while True:
                state = client.get(f"/sessions/{session_id}")
                assert state.status_code == 200, state.text
                if state.json()["status"] == "idle" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            page = client.get(f"/sessions/{session_id}/events", params={"limit": 100})
            assert page.status_code == 200, page.text
            cursors[session_id] = page.json()["events"][-1]["cursor"]
    # when: the instance stops gracefully
    assert victim.stop(signal.SIGTERM, timeout=EXIT_SECONDS) == 0
    # then: the new owner serves every session from the client's last cursor
    refused = {}
    with httpx.Client(base_url=survivor.url, headers=headers, timeout=15) as client:
        for session_id, cursor in cursors.items():
            answer = client.get(f"/sessions/{session_id}/events", params={"after": cursor})
            if answer.status_code != 200:
                refused[session_id] = f"{answer.status_code} {answer.text[:120]}"
    assert refused == {}
    assert "keeps its lease until it expires" not in victim.logs()
