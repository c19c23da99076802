"""Set-ups the live-session journeys share: a `loop` server (or fleet) with a tool that answers
after some seconds, so a turn is still running when a steer or a change arrives, and bounded
waits on a session's history."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

__all__ = ["TURN_TIMEOUT", "has", "idle_after", "loop_brain", "loop_fleet", "settled", "stall_tool", "wait_for"]

TURN_TIMEOUT = 30.0
Ready = Callable[[list[dict[str, Any]]], bool]


def stall_tool(zoo_url: str) -> dict[str, Any]:
    """The tool zoo's `stall`: it answers after the `seconds` its arguments name."""
    return {
        "name": "stall",
        "description": "Answer after some seconds.",
        "input_schema": {"type": "object"},
        "url": zoo_url + "/stall",
        "tenants": ["acme"],
    }


def loop_brain(factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo_url: str) -> BrainServer:
    return factory(harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), tools=[stall_tool(zoo_url)])


def loop_fleet(
    factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    tmp_path: Path,
    provider: ScriptedProvider,
    zoo_url: str,
    *,
    lease_seconds: int,
    database_prefix: str,
) -> tuple[BrainServer, BrainServer]:
    """Instances A and B of a fleet running the loop harness with the `stall` tool."""
    fleet = fleet_factory(
        factory,
        postgres_server,
        tmp_path,
        lease_seconds=lease_seconds,
        database_prefix=database_prefix,
        config={"harnesses": {"loop": LOOP_HARNESS}, "providers": provider.providers(), "tools": [stall_tool(zoo_url)]},
    )
    return fleet("brain-a"), fleet("brain-b")


def wait_for(server: BrainServer, session_id: str, ready: Ready) -> list[Any]:
    """The session's history once `ready` holds for it (bounded by TURN_TIMEOUT)."""
    deadline = time.monotonic() + TURN_TIMEOUT
    while time.monotonic() < deadline:
        events = history(server, session_id)
        if ready(events):
            return events
        time.sleep(0.05)
    raise AssertionError(f"history never got there: {[e['type'] for e in history(server, session_id)]}")


def settled(input_id: str) -> Ready:
    """The input has its outcome: a session.error, or a status other than running for it."""
    return lambda events: any(
        e.get("input_id") == input_id
        and (e["type"] == "session.error" or (e["type"] == "session.status" and e["data"]["status"] != "running"))
        for e in events
    )


def idle_after(input_id: str) -> Ready:
    return lambda events: any(
        e.get("input_id") == input_id and e["type"] == "session.status" and e["data"]["status"] == "idle"
        for e in events
    )


def has(kind: str) -> Ready:
    return lambda events: any(event["type"] == kind for event in events)
