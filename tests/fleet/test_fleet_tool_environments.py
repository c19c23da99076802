"""Tool environments through a non-owner instance of a fleet: a session created on A places a tool
in a host environment (its executor on A) and in a component; its turn is sent and its events are
read through B, which forwards to A; the environments, the outcomes and the committed extension
events are what a single instance records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end
from tests.fixtures.services import PostgresServer, RedisServer
from tests.fleet.support import fleet_factory
from toolkits.authoring import brain_env, component, create_placed_session, host_env, tool

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"
MODEL = "openai/gpt-4.1-mini"
READ_INPUT = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def test_a_placed_session_works_through_an_instance_that_does_not_own_it(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
) -> None:
    assert COMPONENT.is_file(), f"the example component is missing: {COMPONENT}"
    fleet = fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=5,
        database_prefix="brain_envs",
        environment={"BRAIN_CHANNEL_REDIS": redis_server.url},
        config={
            "harnesses": {"loop": LOOP_HARNESS},
            "providers": {"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": scripted_provider.openai_base_url}},
            "environments": [
                {"name": "app", "kind": "host", "tenants": ["acme"]},
                {
                    "name": "reader",
                    "kind": "brain",
                    "tenants": ["acme"],
                    "components": [str(COMPONENT)],
                    "grants": {"workspace": ["read"]},
                },
            ],
        },
    )
    a, b = fleet("brain-a"), fleet("brain-b")
    scripted_provider.reset()

    def read_here(arguments: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit("host_read", {"path": arguments["path"]})
        return {"path": arguments["path"], "bytes": 4, "text": "host"}

    read_file = tool(name="read_file", description="Read.", input=READ_INPUT, run=read_here, implementation=component())
    # given: a session created on A (A owns it and holds its host executor)
    placed = create_placed_session(
        a.sdk(),
        harness="loop",
        config={"model": MODEL, "tools": []},
        placements=[
            read_file(env=host_env("app")),
            read_file(env=brain_env("reader", filesystem={"workspace": "read"})),
        ],
        presentation="selector",
    )
    try:
        workspace = a.data_dir / "sessions" / placed.id / "workspace"
        workspace.mkdir(parents=True)
        (workspace / "notes.txt").write_text("on A")

        # when: B takes the turn and serves its events
        prompt = "\n".join(
            [
                'call read_file {"environment": "app", "input": {"path": "notes.txt"}}',
                'call read_file {"environment": "reader", "input": {"path": "notes.txt"}}',
            ]
        )
        accepted = send_ok(b, placed.id, prompt)
        wait_for_turn_end(b, placed.id, accepted["id"], timeout=60)
        events = [event for event in history(b, placed.id) if event.get("input_id") == accepted["id"]]

        # then
        results = {e["data"]["environment"]: e["data"] for e in events if e["type"] == "tool.result"}
        assert {env: result["outcome"] for env, result in results.items()} == {"app": "ok", "reader": "ok"}
        assert results["reader"]["result"]["structured_content"]["text"] == "on A"
        kinds = sorted((e["data"]["environment"], e["data"]["kind"]) for e in events if e["type"] == "tool.event")
        assert kinds == [("app", "host_read"), ("reader", "read_started")]
    finally:
        placed.close()


def test_an_executor_connected_to_a_non_owner_emits_events_the_owner_commits_before_answering(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
) -> None:
    fleet = fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=5,
        database_prefix="brain_envs_relay",
        environment={"BRAIN_CHANNEL_REDIS": redis_server.url},
        config={
            "harnesses": {"loop": LOOP_HARNESS},
            "providers": {"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": scripted_provider.openai_base_url}},
            "environments": [{"name": "app", "kind": "host", "tenants": ["acme"]}],
        },
    )
    a, b = fleet("brain-a"), fleet("brain-b")
    scripted_provider.reset()
    seen_in_log: list[list[str]] = []
    refused: list[str] = []

    def read_here(arguments: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit("host_read", {"path": arguments["path"]})
        with a.client() as api:  # the owner's log, once the emit through B returned
            page = api.get(f"/sessions/{placed.id}/events").json()["events"]
        seen_in_log.append([e["data"]["kind"] for e in page if e["type"] == "tool.event"])
        try:
            ctx.emit("Not A Kind", {})
        except Exception as exc:  # the owner's refusal reaches the executor through B
            refused.append(str(exc))
        return {"path": arguments["path"], "bytes": 4, "text": "host"}

    read_file = tool(name="read_file", description="Read.", input=READ_INPUT, run=read_here)
    # given: the executor registered and connected through B, the session created on A (its owner)
    placed = create_placed_session(
        b.sdk(),
        harness="loop",
        config={"model": MODEL, "tools": []},
        placements=[read_file(env=host_env("app"))],
        creator=a.sdk(),
    )
    try:
        # when: the model calls the host function (A relays the call to B)
        accepted = send_ok(a, placed.id, 'call read_file {"path": "notes.txt"}')
        wait_for_turn_end(a, placed.id, accepted["id"], timeout=60)
        events = [event for event in history(a, placed.id) if event.get("input_id") == accepted["id"]]

        # then: the event travelled to A and was in its log before the executor was answered
        (result,) = [e["data"] for e in events if e["type"] == "tool.result"]
        (call,) = [e["data"] for e in events if e["type"] == "tool.call"]
        assert (result["outcome"], result["environment"]) == ("ok", "app")
        assert seen_in_log == [["host_read"]]
        assert len(refused) == 1 and "kind" in refused[0]
        emitted = [e["data"] for e in events if e["type"] == "tool.event"]
        assert emitted == [
            {"call_id": call["id"], "environment": "app", "kind": "host_read", "data": {"path": "notes.txt"}}
        ]
        # the order in A's log: the call, its one event, its result
        order = [e["type"] for e in events if e["type"].startswith("tool.")]
        assert order == ["tool.call", "tool.event", "tool.result"]
    finally:
        placed.close()
