"""brain.fleet.* metrics read through the telemetry module's own instruments (an SDK in-memory
reader in place of the OTLP exporter), against real leases in PostgreSQL and a real owner on
loopback HTTP: leases held, acquisitions, failovers (a takeover after the previous owner's
lease expired, not after a release) and forwarded requests."""

from __future__ import annotations

import asyncio
import secrets

from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from fleet_app.leases import LeaseManager
from fleet_app.routing import FleetRouter
from foundation.telemetry import Telemetry
from tests.fleet.test_forwarding import WAIT_SECONDS
from tests.fleet.test_routing import LIMIT, Brain, Client, KeptAlive, scope, served

POLL_SECONDS = 0.2


def values(reader: InMemoryMetricReader) -> dict[str, float]:
    """Each brain.fleet.* metric's value, summed over its data points."""
    data = reader.get_metrics_data()
    found: dict[str, float] = {}
    for resource in data.resource_metrics if data is not None else ():
        for scope_metrics in resource.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name.startswith("brain.fleet."):
                    found[metric.name] = sum(
                        point.value for point in metric.data.data_points if isinstance(point, NumberDataPoint)
                    )
    return found


async def test_acquisitions_failovers_and_leases_held_are_counted_per_instance(fleet_db: str) -> None:
    # given: brain-a with a 1 s lease, brain-b with a long one, each its own telemetry
    reader_a, reader_b = InMemoryMetricReader(), InMemoryMetricReader()
    a = LeaseManager(
        instance="brain-a", url="http://127.0.0.1:1", lease_seconds=1.0, database=fleet_db,
        telemetry=Telemetry.read_by(reader_a),
    )  # fmt: skip
    b = LeaseManager(
        instance="brain-b", url="http://127.0.0.1:2", lease_seconds=30.0, database=fleet_db,
        telemetry=Telemetry.read_by(reader_b),
    )  # fmt: skip
    assert await a.join() and await b.join()
    expiring, released = secrets.token_hex(16), secrets.token_hex(16)
    # when: brain-a takes two sessions (and one again, already its own), releases one, lets the other lapse
    assert await a.acquire(expiring) == 1
    assert await a.acquire(released) == 1
    assert await a.acquire(released) == 1
    assert values(reader_a) == {"brain.fleet.acquisitions": 2, "brain.fleet.leases": 2}
    assert await a.release(released)
    assert await b.acquire(released) == 2
    async with asyncio.timeout(WAIT_SECONDS):
        while (epoch := await b.acquire(expiring)) is None:
            await asyncio.sleep(POLL_SECONDS)
    # then: brain-b took both, one of them a failover; brain-a holds none
    assert epoch == 2
    assert values(reader_b) == {
        "brain.fleet.acquisitions": 2,
        "brain.fleet.failovers": 1,
        "brain.fleet.leases": 2,
    }
    assert values(reader_a) == {"brain.fleet.acquisitions": 2, "brain.fleet.leases": 0}


async def test_a_forwarded_request_is_counted_on_the_forwarding_instance(fleet_db: str) -> None:
    # given: brain-a owns the session on a loopback owner; the request lands on brain-b
    origin = KeptAlive()
    server, url = await served(origin)
    reader = InMemoryMetricReader()
    telemetry = Telemetry.read_by(reader)
    a = LeaseManager(instance="brain-a", url=url, lease_seconds=30.0, database=fleet_db)
    b = LeaseManager(
        instance="brain-b", url="http://127.0.0.1:2", lease_seconds=30.0, database=fleet_db, telemetry=telemetry
    )
    assert await a.join() and await b.join()
    session_id = secrets.token_hex(16)
    assert await a.acquire(session_id) == 1
    brain, router = Brain(telemetry), FleetRouter()
    # when: two sends through brain-b, and one request for a session nobody owns (served there)
    for path in (f"/sessions/{session_id}/events", f"/sessions/{session_id}/events", f"/sessions/{'f' * 32}"):
        client = Client(body=b"{}")
        async with asyncio.timeout(WAIT_SECONDS):
            await router.route(brain, b, scope(path, method="POST"), client.receive, client.send, limit=LIMIT)
    await router.aclose()
    server.close()
    # then
    assert values(reader)["brain.fleet.forwarded"] == 2
    assert len(origin.targets) == 2
