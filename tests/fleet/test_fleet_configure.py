"""A configuration change sent through an instance that does not own the session applies on the
owner between its turns, and holds on the instance that takes the session over: two real
`runbrain` instances on one PostgreSQL, the `loop` harness, the scripted provider and the
published client."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.provider import ScriptedProvider
from tests.fixtures.server import BrainServer, history
from tests.fixtures.services import PostgresServer
from tests.support.live_turns import idle_after, loop_fleet, wait_for
from tests.tools.servers import LoopbackServer, ToolZoo

pytestmark = pytest.mark.client

LEASE_SECONDS = 3  # the owner is killed: B takes the session once its lease runs out
FAILOVER_BOUND_SECONDS = LEASE_SECONDS + 5
INSTRUCTIONS = "Answer through the fleet."


def _serves(server: BrainServer, session_id: str) -> None:
    """Wait (bounded) until `server` serves the session: 503 while the dead owner's lease runs."""
    deadline = time.monotonic() + FAILOVER_BOUND_SECONDS
    while time.monotonic() < deadline:
        with server.client() as client:
            response = client.get(f"/sessions/{session_id}")
        if response.status_code == 200:
            return
        assert response.status_code == 503, response.text
        time.sleep(0.1)
    raise AssertionError(f"{server.url} did not serve {session_id} within {FAILOVER_BOUND_SECONDS} s")


def test_a_change_through_a_non_owner_applies_between_the_owners_turns_and_holds_after_a_failover(
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
        database_prefix="brain_configure",
    )
    session = a.sdk().create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": ["stall"]}})
    session_id = session["id"]
    first = a.sdk().send(session_id, {"type": "user.message", "text": 'call stall {"seconds": 3}'})
    wait_for(a, session_id, lambda events: any(e["type"] == "tool.call" for e in events))
    # when the model, instructions and tools are changed through B, and a message follows through B
    change = b.sdk().send(
        session_id,
        {"type": "session.configure", "config": {"model": "openai/gpt-4.1", "instructions": INSTRUCTIONS, "tools": []}},
    )
    second = b.sdk().send(session_id, {"type": "user.message", "text": "second, through B"})
    events = wait_for(a, session_id, idle_after(second["id"]))
    # then the owner recorded the change in order and applied it after the running turn
    assert change["type"] == "session.configure"
    assert [e["id"] for e in events if e["type"] in ("user.message", "session.configure")] == [
        first["id"],
        change["id"],
        second["id"],
    ]
    bodies = scripted_provider.bodies()
    assert [body["model"] for body in bodies] == ["gpt-4.1-mini", "gpt-4.1-mini", "gpt-4.1"]
    assert bodies[2]["instructions"] == INSTRUCTIONS and bodies[2].get("tools", []) == []
    assert not (b.data_dir / "sessions" / session_id).exists()  # B only forwarded
    assert b.sdk().get(session_id)["config"] == {"model": "openai/gpt-4.1", "instructions": INSTRUCTIONS, "tools": []}
    # when A, its state uploaded, is killed and B takes the session over
    with a.client() as client:
        assert client.post(f"/sessions/{session_id}/flush").status_code == 200
    a.kill()
    _serves(b, session_id)
    third = b.sdk().send(session_id, {"type": "user.message", "text": "third, after the takeover"})
    wait_for(b, session_id, idle_after(third["id"]))
    # then B's turn used the changed configuration, on the same conversation
    last = scripted_provider.bodies()[-1]
    assert (last["model"], last["instructions"], last.get("tools", [])) == ("gpt-4.1", INSTRUCTIONS, [])
    assert "second, through B" in json.dumps(last["input"])
    assert (b.data_dir / "sessions" / session_id).exists()


def test_a_change_queued_on_an_owner_killed_before_any_upload_applies_in_its_place_on_the_next_owner(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    tmp_path: Path,
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a loop session of A, uploaded, its turn waiting for a slow tool
    a, b = loop_fleet(
        brain_factory,
        postgres_server,
        tmp_path,
        scripted_provider,
        zoo_server[1].url,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_configure",
    )
    session_id = a.sdk().create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": ["stall"]}})[
        "id"
    ]
    with a.client() as client:
        assert client.post(f"/sessions/{session_id}/flush").status_code == 200
    first = a.sdk().send(session_id, {"type": "user.message", "text": 'call stall {"seconds": 20}'})
    wait_for(a, session_id, lambda events: any(e["type"] == "tool.call" for e in events))
    # when a change (with a key) and a message are queued behind it through B, and A dies before
    # any upload
    configure = {
        "type": "session.configure",
        "config": {"model": "openai/gpt-4.1", "instructions": INSTRUCTIONS},
        "key": "change-through-b",
    }
    change = b.sdk().send(session_id, configure)
    assert b.sdk().send(session_id, configure) == change  # a retry through B: the same change
    second = b.sdk().send(session_id, {"type": "user.message", "text": "second, after the change"})
    a.kill()
    _serves(b, session_id)
    # then B has the change in its place (the lost turn reported, nothing else), not yet applied
    events = history(b, session_id)
    assert [e["id"] for e in events if e["type"] in ("user.message", "session.configure")] == [
        first["id"],
        change["id"],
        second["id"],
    ]
    assert [e["input_id"] for e in events if e["type"] == "session.error"] == [first["id"]]
    assert b.sdk().get(session_id)["config"]["model"] == "openai/gpt-4.1-mini"
    assert [e["data"] for e in events if e["type"] == "session.configure"] == [change["data"]]
    # when the session is resumed on B (where the change's key still names it)
    with b.client() as client:
        assert client.post(f"/sessions/{session_id}/resume").status_code == 200
    assert b.sdk().send(session_id, configure)["id"] == change["id"]
    wait_for(b, session_id, idle_after(second["id"]))
    # then the change applied before the message's turn, which used it, once
    last = scripted_provider.bodies()[-1]
    assert (last["model"], last["instructions"]) == ("gpt-4.1", INSTRUCTIONS)
    assert "second, after the change" in json.dumps(last["input"])
    assert b.sdk().get(session_id)["config"]["model"] == "openai/gpt-4.1"
    events = history(b, session_id)
    assert [e["id"] for e in events if e["type"] == "session.configure"] == [change["id"]]
    assert [e["input_id"] for e in events if e["type"] == "session.error"] == [first["id"]]
