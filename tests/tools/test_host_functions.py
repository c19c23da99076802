"""Host functions of `toolkits.authoring`, end to end through the published client's executor
wire, the `loop` harness and the scripted provider: a function's failure (an exception, output
JSON cannot carry, an Outcome it returns) ends its own call and the host keeps serving; an
`async def` runs; a restarted process hosts its placed session again; placement options a tool has
no schema for are refused where they are written."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from brain import BrainError

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end
from toolkits.authoring import Outcome, create_placed_session, host_env, host_placed_session, tool

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
INPUT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
OUTPUT = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}


def _server(factory: Callable[..., BrainServer], provider: ScriptedProvider) -> BrainServer:
    server = factory(
        harnesses={"loop": LOOP_HARNESS},
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.openai_base_url}},
        environments=[{"name": "app", "kind": "host", "tenants": ["acme"]}],
    )
    provider.reset()  # the built-in `call NAME {json}` directive only
    return server


def _results(server: BrainServer, session_id: str, text: str) -> dict[str, dict[str, Any]]:
    """The tool.result of each call of one turn, by the call's `q`."""
    accepted = send_ok(server, session_id, text)
    wait_for_turn_end(server, session_id, accepted["id"], timeout=60)
    events = [event for event in history(server, session_id) if event.get("input_id") == accepted["id"]]
    asked = {e["data"]["id"]: e["data"]["arguments"]["q"] for e in events if e["type"] == "tool.call"}
    return {asked[e["data"]["call_id"]]: e["data"] for e in events if e["type"] == "tool.result"}


def _text(result: dict[str, Any]) -> str:
    return str(result["result"]["content"][0]["text"])


def test_a_failing_function_ends_its_own_call_and_the_host_keeps_serving(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given: a sync function that fails in every way it can, and an async one, in one host
    server = _server(brain_factory, scripted_provider)

    def lookup(arguments: Any, ctx: Any) -> Any:
        q = arguments["q"]
        if q == "set":
            return {"value": {1, 2}}  # JSON cannot carry a set
        if q == "raise":
            raise LookupError("no such item")
        if q == "missing":
            return Outcome.error("not found", details={"q": q, "near": ["mist"]})
        if q in ("big", "huge"):  # past the server's body limit; past any server's
            return {"value": "x" * (100_000 if q == "big" else 2_000_000)}
        if q == "maybe":
            return Outcome.unknown("the store did not answer")
        return {"value": q}

    async def fetch(arguments: Any, ctx: Any) -> dict[str, str]:
        await asyncio.sleep(0.01)
        return {"value": f"{ctx.options.get('prefix', '')}{arguments['q']}"}

    placed = create_placed_session(
        server.sdk(),
        harness="loop",
        config={"model": MODEL, "tools": []},
        placements=[
            tool(name="lookup", description="Look up.", input=INPUT, output=OUTPUT, run=lookup)(env=host_env("app")),
            tool(name="fetch", description="Fetch.", input=INPUT, output=OUTPUT, run=fetch)(env=host_env("app")),
        ],
    )
    try:
        # when: each failure, then an async call and an ordinary one, then another turn
        first = _results(
            server,
            placed.id,
            "\n".join(f'call lookup {{"q": "{q}"}}' for q in ("set", "raise", "missing", "maybe", "big", "huge"))
            + '\ncall fetch {"q": "async"}\ncall lookup {"q": "plain"}',
        )
        second = _results(server, placed.id, 'call lookup {"q": "later"}')

        # then: each failure is its call's alone, with what the function said
        assert {q: result["outcome"] for q, result in first.items()} == {
            "set": "error",
            "raise": "error",
            "missing": "error",
            "maybe": "unknown",
            "big": "error",
            "huge": "error",
            "async": "ok",
            "plain": "ok",
        }
        assert _text(first["set"]).startswith("output is not JSON: ")
        assert _text(first["raise"]) == "no such item"
        assert _text(first["missing"]) == "not found"
        assert first["missing"]["result"]["structured_content"] == {"q": "missing", "near": ["mist"]}
        assert _text(first["maybe"]) == "the store did not answer"
        assert first["maybe"]["result"]["unknown_outcome"] is True
        assert _text(first["big"]).startswith("output is too large: the server refused it")
        assert _text(first["huge"]).startswith("output is too large: its reply exceeds")
        assert first["async"]["result"]["structured_content"] == {"value": "async"}
        assert first["plain"]["result"]["structured_content"] == {"value": "plain"}
        assert second["later"]["outcome"] == "ok"  # the host still serves the next turn
        assert all(not host.stopped.is_set() for host in placed.hosts)
    finally:
        placed.close()


def test_an_async_functions_task_is_cancelled_with_its_call(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given: an async function that waits far longer than the test
    server = _server(brain_factory, scripted_provider)
    started, stopped = threading.Event(), threading.Event()

    async def wait(arguments: Any, ctx: Any) -> dict[str, str]:
        started.set()
        try:
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {"value": "never"}

    client = server.sdk()
    placed = create_placed_session(
        client,
        harness="loop",
        config={"model": MODEL, "tools": []},
        placements=[tool(name="wait", description="Wait.", input=INPUT, run=wait)(env=host_env("app"))],
    )
    try:
        accepted = send_ok(server, placed.id, 'call wait {"q": "long"}')
        assert started.wait(30)

        # when: the session is interrupted while it waits
        client.interrupt(placed.id)

        # then: the call ends cancelled and the function's task is cancelled, the host serving on
        wait_for_turn_end(server, placed.id, accepted["id"], timeout=60)
        assert stopped.wait(10)
        (result,) = [e["data"] for e in history(server, placed.id) if e["type"] == "tool.result"]
        assert result["outcome"] == "cancelled"
        assert all(not host.stopped.is_set() for host in placed.hosts)
    finally:
        placed.close()


def test_a_restarted_process_hosts_its_placed_session_again(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given: a placed session whose host this process no longer holds (as after a restart)
    server = _server(brain_factory, scripted_provider)
    options = {"type": "object", "properties": {"prefix": {"type": "string"}}}

    def lookup(arguments: Any, ctx: Any) -> dict[str, str]:
        return {"value": ctx.options["prefix"] + arguments["q"]}

    def placements(description: str = "Look up.") -> list[Any]:
        looked = tool(name="lookup", description=description, input=INPUT, output=OUTPUT, options=options, run=lookup)
        return [looked(env=host_env("app"), prefix="again:")]

    client = server.sdk()
    placed = create_placed_session(
        client, harness="loop", config={"model": MODEL, "tools": []}, placements=placements()
    )
    placed.close()
    lost = _results(server, placed.id, 'call lookup {"q": "before"}')
    assert lost["before"]["outcome"] == "error"  # nothing hosts it

    # a host whose tools differ from the session's is refused
    with pytest.raises(BrainError) as refused:
        host_placed_session(client, placed.id, placements=placements("Something else."))
    assert refused.value.status == 409

    # when: a new process (a new client) hosts it again with the placements it was created with
    again = host_placed_session(server.sdk(), placed.id, placements=placements())
    try:
        # then: the model's call runs in the new host, with the session's options
        assert again.id == placed.id
        result = _results(server, placed.id, 'call lookup {"q": "after"}')["after"]
        assert result["outcome"] == "ok"
        assert result["environment"] == "app"
        assert result["result"]["structured_content"] == {"value": "again:after"}
    finally:
        again.close()


def test_placement_options_need_the_tools_options_schema() -> None:
    lookup = tool(name="lookup", description="Look up.", input=INPUT, run=lambda arguments, ctx: {})
    with pytest.raises(ValueError, match="'lookup' has no options schema: prefix not allowed"):
        lookup(env=host_env("app"), prefix="x:")
    with pytest.raises(ValueError, match="nothing to host"):
        host_placed_session(None, "s", placements=[])  # type: ignore[arg-type]  # refused before any request
    assert lookup(env=host_env("app")).options is None
