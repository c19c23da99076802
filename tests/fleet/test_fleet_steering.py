"""A steer sent through an instance that does not own the session reaches the owner's running
turn: two real `runbrain` instances on one PostgreSQL, the `loop` harness and the scripted
provider, a tool that answers after a few seconds, and the published client."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.provider import ScriptedProvider
from tests.fixtures.server import BrainServer
from tests.fixtures.services import PostgresServer
from tests.support.live_turns import loop_fleet, wait_for
from tests.tools.servers import LoopbackServer, ToolZoo

pytestmark = pytest.mark.client

LEASE_SECONDS = 10  # nobody dies here
STEER = "Steered through another instance"


def test_a_steer_through_a_non_owner_reaches_the_owners_running_turn(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    tmp_path: Path,
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a fleet of two, a loop session owned by A, its turn waiting for a slow tool
    a, b = loop_fleet(
        brain_factory,
        postgres_server,
        tmp_path,
        scripted_provider,
        zoo_server[1].url,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_steer",
    )
    session = a.sdk().create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": ["stall"]}})
    session_id = session["id"]
    turn = a.sdk().send(session_id, {"type": "user.message", "text": 'call stall {"seconds": 3}'})
    wait_for(a, session_id, lambda events: any(e["type"] == "tool.call" for e in events))
    # when a steer is sent through B, twice with one key
    sent = [
        b.sdk().send(session_id, {"type": "user.message", "text": STEER, "delivery": "steer", "key": "fleet-steer"})
        for _ in range(2)
    ]
    events = wait_for(
        a,
        session_id,
        lambda events: any(e["type"] == "session.status" and e["data"]["status"] == "idle" for e in events),
    )
    # then the owner recorded it once, into its running turn, and its model saw it after the tool result
    assert sent[0] == sent[1] and sent[0]["input_id"] == turn["id"]
    assert [e["id"] for e in events if e["type"] == "user.message"] == [turn["id"], sent[0]["id"]]
    assert [e["type"] for e in events if e["type"] in ("tool.call", "user.message", "tool.result")] == [
        "user.message",
        "tool.call",
        "user.message",
        "tool.result",
    ]
    last = scripted_provider.bodies()[-1]
    assert json.dumps(last["input"][-1]).count(STEER) == 1 and last["input"][-1]["role"] == "user"
    assert events[-1]["data"] == {"status": "idle"} and not [e for e in events if e["type"] == "session.error"]
    # and B never loaded the session
    assert not (b.data_dir / "sessions" / session_id).exists()
