"""How the model sees a tool placed in a host environment (a function of this process, through the
published client's executor wire) and a brain environment (the example WebAssembly component), on
both agent-loop harnesses and the scripted provider: an explicit policy sends each call to the
environment it names; a selector's wrapped input keeps the canonical schema's `$defs`; a call that
is not the selector's wrapper, or names an environment the tool is not placed in, ends as
`invalid_input` with nothing run. The events each journey records validate against the served
contract's schemas."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from tests.fixtures.provider import AGENT_HARNESSES, ScriptedProvider
from tests.fixtures.server import BrainServer
from tests.support.placed_servers import placed_server, turn_events
from tests.support.served_schemas import assert_event_data_served
from toolkits.authoring import brain_env, component, create_placed_session, host_env, tool

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
READ_INPUT = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
# A canonical input whose parts live in `$defs`, one of them referring to another.
QUERY_INPUT = {
    "type": "object",
    "properties": {"query": {"$ref": "#/$defs/Query"}},
    "required": ["query"],
    "additionalProperties": False,
    "$defs": {
        "Query": {"type": "object", "properties": {"q": {"$ref": "#/$defs/Text"}}, "required": ["q"]},
        "Text": {"type": "string", "minLength": 1},
    },
}


def _of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == type_]


def _read_file(ran: list[dict[str, Any]]) -> Any:
    """read_file, implemented here (host) and by the component (brain)."""

    def read_here(arguments: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit("host_read", {"path": arguments["path"]})
        ran.append({"input": arguments, "environment": ctx.environment})
        return {"path": arguments["path"], "bytes": 4, "text": "host"}

    return tool(
        name="read_file", description="Read a file.", input=READ_INPUT, run=read_here, implementation=component()
    )


def _placements(read_file: Any) -> list[Any]:
    return [read_file(env=host_env("app")), read_file(env=brain_env("reader", filesystem={"workspace": "read"}))]


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_a_policy_sends_each_call_to_the_environment_it_names(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given: read_file placed in both environments, one session choosing each
    server = placed_server(brain_factory, scripted_provider)
    ran: list[dict[str, Any]] = []
    read_file = _read_file(ran)
    client = server.sdk()
    sessions = {
        env: create_placed_session(
            client,
            harness=harness,
            config={"model": MODEL, "tools": []},
            placements=_placements(read_file),
            presentation={"read_file": env},
        )
        for env in ("app", "reader")
    }
    try:
        workspace = server.data_dir / "sessions" / sessions["reader"].id / "workspace"
        workspace.mkdir(parents=True)
        (workspace / "notes.txt").write_text("from the workspace")

        # when: the model calls the canonical tool in each session
        events = {
            env: turn_events(server, placed.id, 'call read_file {"path": "notes.txt"}')
            for env, placed in sessions.items()
        }

        # then: the model saw the canonical input, and each call ran where its session's policy said
        offered = [body["tools"] for body in scripted_provider.bodies()]
        assert all([t["name"] for t in tools] == ["read_file"] for tools in offered)
        assert all(tools[0]["parameters"]["properties"] == READ_INPUT["properties"] for tools in offered)
        for env in ("app", "reader"):
            (call,) = _of(events[env], "tool.call")
            (result,) = _of(events[env], "tool.result")
            assert (call["environment"], call["arguments"]) == (env, {"path": "notes.txt"})
            assert (result["environment"], result["outcome"]) == (env, "ok")
            with server.client() as api:  # and the served contract describes what was recorded
                assert assert_event_data_served(api, events[env]) == {"tool.call", "tool.result", "tool.event"}
        assert ran == [{"input": {"path": "notes.txt"}, "environment": "app"}]  # the host ran once
        (from_component,) = _of(events["reader"], "tool.result")
        assert "from the workspace" in str(from_component["result"])
        assert [e["kind"] for e in _of(events["reader"], "tool.event")] == ["read_started"]
    finally:
        for placed in sessions.values():
            placed.close()


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_a_call_the_selector_does_not_place_is_invalid_input_and_runs_nowhere(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given: read_file behind the environment selector
    server = placed_server(brain_factory, scripted_provider)
    ran: list[dict[str, Any]] = []
    placed = create_placed_session(
        server.sdk(),
        harness=harness,
        config={"model": MODEL, "tools": []},
        placements=_placements(_read_file(ran)),
        presentation="selector",
    )
    try:
        # when: the model calls it unwrapped, then wrapped with an environment it is not placed in
        prompt = 'call read_file {"path": "notes.txt"}\n'
        prompt += 'call read_file {"environment": "elsewhere", "input": {"path": "notes.txt"}}'
        events = turn_events(server, placed.id, prompt)

        # then: Brain got each as the model made it and refused it, naming the placements; nothing ran
        calls = _of(events, "tool.call")
        assert [(c.get("environment"), c["arguments"]) for c in calls] == [
            (None, {"path": "notes.txt"}),
            ("elsewhere", {"path": "notes.txt"}),
        ]
        results = {result["call_id"]: result for result in _of(events, "tool.result")}
        assert [results[c["id"]]["outcome"] for c in calls] == ["invalid_input", "invalid_input"]
        messages = [results[c["id"]]["result"]["content"][0]["text"] for c in calls]
        assert messages == [
            "invalid arguments for read_file: the call names no environment; "
            "it is placed in 'app', 'reader'; nothing ran",
            "invalid arguments for read_file: the call names environment 'elsewhere', where it is not placed; "
            "it is placed in 'app', 'reader'; nothing ran",
        ]
        assert ran == [] and _of(events, "tool.event") == []
    finally:
        placed.close()


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_a_selector_keeps_the_defs_of_a_canonical_input(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given: lookup, whose input refers to its `$defs`, behind the environment selector
    server = placed_server(brain_factory, scripted_provider)
    ran: list[Any] = []

    def lookup(arguments: Any, ctx: Any) -> dict[str, Any]:
        ran.append(arguments)
        return {"value": arguments["query"]["q"]}

    placed = create_placed_session(
        server.sdk(),
        harness=harness,
        config={"model": MODEL, "tools": []},
        placements=[tool(name="lookup", description="Look up.", input=QUERY_INPUT, run=lookup)(env=host_env("app"))],
        presentation="selector",
    )
    try:
        # when: the model calls it with the wrapped input
        wrapped = {"environment": "app", "input": {"query": {"q": "x"}}}
        events = turn_events(server, placed.id, f"call lookup {json.dumps(wrapped)}")

        # then: the schema the model saw resolves every reference and checks the wrapped call
        (offered,) = scripted_provider.bodies()[0]["tools"]
        validator = jsonschema.Draft202012Validator(offered["parameters"])
        assert list(validator.iter_errors(wrapped)) == []
        assert not validator.is_valid({"environment": "app", "input": {"query": {"q": ""}}})
        assert not validator.is_valid({"environment": "app", "input": {"query": {}}})
        (result,) = _of(events, "tool.result")
        assert (result["outcome"], result["environment"]) == ("ok", "app")
        assert ran == [{"query": {"q": "x"}}]
    finally:
        placed.close()
