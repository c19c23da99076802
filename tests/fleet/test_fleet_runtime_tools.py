"""Runtime tools across a fleet: three real `runbrain` instances on one PostgreSQL, relaying
executor calls over a real Redis (BRAIN_CHANNEL_REDIS), driven by the published client. The
session is owned by A; the client's executor is connected through B, then (B killed) through C."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brain import RuntimeTool

from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end
from tests.fixtures.services import PostgresServer, RedisServer

MODEL = "openai/gpt-4.1-mini"
LEASE_SECONDS = 3  # B's death is seen when its instance row expires
SECRET = secrets.token_hex(32)
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    tmp_path: Path,
) -> Callable[[str], BrainServer]:
    database = postgres_server.create_database(f"brain_exec_{secrets.token_hex(4)}")
    archive = tmp_path / "archive"
    archive.mkdir()
    first: list[BrainServer] = []

    def instance(name: str) -> BrainServer:
        server = brain_factory(start=False, persistence={"provider": "filesystem", "directory": str(archive)})
        server.config["cluster"] = {
            "instance": name,
            "url": server.url,
            "lease_seconds": LEASE_SECONDS,
            "shared_directory": True,
        }
        if first:
            server.tokens = first[0].tokens
            server.env = {**first[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        else:
            server.env |= {
                "BRAIN_DATABASE_URL": database,
                "BRAIN_FLEET_SECRET": SECRET,
                "BRAIN_CHANNEL_REDIS": redis_server.url,
            }
            first.append(server)
        server.start()
        return server

    return instance


def _results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == "tool.result"]


def test_an_executor_on_another_instance_serves_the_session_and_its_death_is_an_unknown_outcome(
    fleet: Callable[[str], BrainServer],
) -> None:
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    served: list[tuple[str, Any]] = []
    started, release = threading.Event(), threading.Event()

    def lookup(arguments: Any, context: Any) -> dict[str, Any]:
        served.append((context.scope["session_id"], arguments))
        if arguments["q"] == "slow":
            started.set()
            release.wait(60)
        return {"value": f"answer to {arguments['q']}"}

    tools = [RuntimeTool("lookup", "Read application data", SCHEMA, lookup)]
    # given a session created on A (A owns it, its first executor is on A)
    on_a = a.sdk()
    session = on_a.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=tools)
    sid = session["id"]
    on_a.dispose()  # A's own executor is gone: only a remote one can answer now
    # when the client rebinds through B, and A's session calls the tool
    on_b = b.sdk()
    on_c = c.sdk()
    try:
        on_b.rebind(sid, tools)
        first = send_ok(a, sid, 'tool:runtime_lookup {"q": "through b"}')
        (result,) = _results(wait_for_turn_end(a, sid, first["id"]))
        # then the client's function answered it through B, and neither B nor C loaded the session
        assert result["outcome"] == "ok", result
        assert result["result"]["structured_content"] == {"value": "answer to through b"}
        assert served == [(sid, {"q": "through b"})]
        assert not (b.data_dir / "sessions" / sid).exists()
        assert not (c.data_dir / "sessions" / sid).exists()
        # when B is killed while a call runs in the client
        second = send_ok(a, sid, 'tool:runtime_lookup {"q": "slow"}')
        assert started.wait(30)
        b.kill()
        # then the call ends with an unknown outcome, once B has left the fleet
        first_result, lost = _results(wait_for_turn_end(a, sid, second["id"], timeout=60))
        assert first_result == result
        assert lost["outcome"] == "unknown", lost
        assert lost["result"]["unknown_outcome"] is True
        assert "left the fleet" in lost["result"]["content"][0]["text"]
        release.set()
        # when the client rebinds through C, the next call is answered through C
        on_c.rebind(sid, tools)
        third = send_ok(a, sid, 'tool:runtime_lookup {"q": "through c"}')
        *earlier, again = _results(wait_for_turn_end(a, sid, third["id"]))
        assert earlier == [result, lost]
        assert again["outcome"] == "ok", again
        assert again["result"]["structured_content"] == {"value": "answer to through c"}
        # and each call reached the client exactly once: the lost one was never sent again
        assert served == [(sid, {"q": "through b"}), (sid, {"q": "slow"}), (sid, {"q": "through c"})]
        calls = [event["data"]["id"] for event in history(a, sid) if event["type"] == "tool.call"]
        assert len(calls) == len(set(calls)) == 3
    finally:
        release.set()
        on_b._executors.clear()  # B is dead: its executor cannot be closed there
        on_c.dispose()
