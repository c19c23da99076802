"""Tool environments end to end: one tool placed in a host environment (a function of this
process, through the published client's executor wire) and a brain environment (the example
WebAssembly component), the model's calls through the `loop` harness (and the `pi` harness, for the
selector and policy journeys) and the scripted provider
(which calls only tools it was offered), the environment recorded on tool.call and tool.result,
committed extension events replayed to a late subscriber, `invalid_input` and `invalid_output`,
and the refusals at create."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures.provider import AGENT_HARNESSES, ScriptedProvider
from tests.fixtures.server import BrainServer, open_stream
from tests.support.placed_servers import placed_server, turn_events
from toolkits.authoring import brain_env, component, create_placed_session, host_env, tool

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
READ_INPUT = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
READ_OUTPUT = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "bytes": {"type": "integer"}, "text": {"type": "string"}},
    "required": ["path", "bytes", "text"],
}
LOOKUP_INPUT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
LOOKUP_OUTPUT = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}


def _offset(cursor: str) -> int:
    """The log position a cursor names (base64url of {"o": offset, "i": id})."""
    offset: int = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["o"]
    return offset


def _of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == type_]


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_one_tool_placed_in_two_environments_runs_where_the_model_chose_with_committed_events(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given: read_file placed in a host environment (a function here) and in a component
    server = placed_server(brain_factory, scripted_provider)
    seen: list[dict[str, Any]] = []
    committed_before_return: list[bool] = []
    sequences: list[str] = []

    def read_here(arguments: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit("host_read", {"path": arguments["path"], "prefix": ctx.options["prefix"]})
        with server.client() as api:  # the emit returned: the event is in the log already
            page = api.get(f"/sessions/{session_id}/events").json()["events"]
        committed_before_return.append(any(e["type"] == "tool.event" for e in page))
        seen.append({"input": arguments, "environment": ctx.environment, "options": ctx.options})
        sequences.append(ctx.sequence)
        text = f"{ctx.options['prefix']}{arguments['path']}"
        return {"path": arguments["path"], "bytes": len(text), "text": text}

    options = {"type": "object", "properties": {"prefix": {"type": "string"}}, "additionalProperties": False}
    read_file = tool(
        name="read_file",
        description="Read a workspace file.",
        input=READ_INPUT,
        output=READ_OUTPUT,
        options=options,
        run=read_here,
        implementation=component(),
    )
    client = server.sdk()
    placed = create_placed_session(
        client,
        harness=harness,
        config={"model": MODEL, "tools": []},
        placements=[
            read_file(env=host_env("app"), prefix="host:"),
            read_file(env=brain_env("reader", filesystem={"workspace": "read"})),
        ],
        presentation="selector",
    )
    session_id = placed.id
    try:
        assert [d["name"] for d in placed.session["descriptors"]] == ["read_file"]
        workspace = server.data_dir / "sessions" / session_id / "workspace"
        workspace.mkdir(parents=True)
        (workspace / "notes.txt").write_text("from the workspace")

        # when: the model reads once in each environment (its selector wraps the input)
        prompt = "\n".join(
            [
                'call read_file {"environment": "app", "input": {"path": "notes.txt"}}',
                'call read_file {"environment": "reader", "input": {"path": "notes.txt"}}',
            ]
        )
        events = turn_events(server, session_id, prompt)

        # then: each call reached its environment, named on tool.call and tool.result
        offered = scripted_provider.bodies()[0]["tools"]
        assert [t["name"] for t in offered] == ["read_file"]
        calls = {call["environment"]: call for call in _of(events, "tool.call")}
        assert sorted(calls) == ["app", "reader"]
        assert calls["app"]["arguments"] == {"path": "notes.txt"}  # the canonical input, unwrapped
        results = {result["environment"]: result for result in _of(events, "tool.result")}
        assert {env: result["outcome"] for env, result in results.items()} == {"app": "ok", "reader": "ok"}
        assert results["app"]["result"]["structured_content"]["text"] == "host:notes.txt"
        assert results["reader"]["result"]["structured_content"]["text"] == "from the workspace"
        assert results["app"]["call_id"] == calls["app"]["id"]
        assert seen == [{"input": {"path": "notes.txt"}, "environment": "app", "options": {"prefix": "host:"}}]
        # ctx.sequence is the committed position of the call's tool.call in the log (its cursor's offset)
        (app_call,) = [e for e in events if e["type"] == "tool.call" and e["data"]["environment"] == "app"]
        assert sequences == [str(_offset(app_call["cursor"]))]
        # the host's event was committed before its emit returned; the component's too
        assert committed_before_return == [True]
        emitted = {(e["environment"], e["kind"]): e for e in _of(events, "tool.event")}
        assert sorted(emitted) == [("app", "host_read"), ("reader", "read_started")]
        assert emitted[("app", "host_read")]["call_id"] == calls["app"]["id"]
        assert emitted[("reader", "read_started")]["data"] == {"path": "notes.txt"}

        # a late subscriber replays them like any retained event
        with open_stream(server, session_id) as stream:
            stream.wait_for(lambda seen: len([e for e in seen if e["type"] == "tool.result"]) == 2)
            replayed = stream.events()
        assert sorted((e["data"]["environment"], e["data"]["kind"]) for e in replayed if e["type"] == "tool.event") == [
            ("app", "host_read"),
            ("reader", "read_started"),
        ]
    finally:
        placed.close()


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_invalid_input_is_never_executed_and_invalid_output_is_its_own_outcome(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given: lookup placed in the host environment alone (the policy needs no choice)
    server = placed_server(brain_factory, scripted_provider)
    ran: list[Any] = []

    def lookup(arguments: Any, ctx: Any) -> dict[str, Any]:
        ran.append(arguments)
        return {"value": 5} if arguments["q"] == "bad" else {"value": arguments["q"]}

    placed = create_placed_session(
        server.sdk(),
        harness=harness,
        config={"model": MODEL, "tools": []},
        placements=[
            tool(name="lookup", description="Look up.", input=LOOKUP_INPUT, output=LOOKUP_OUTPUT, run=lookup)(
                env=host_env("app")
            )
        ],
    )
    try:
        # when: one call with input the schema refuses, one whose output breaks the output schema
        events = turn_events(server, placed.id, 'call lookup {"q": 5}\ncall lookup {"q": "bad"}')

        # then
        results = _of(events, "tool.result")
        assert sorted(result["outcome"] for result in results) == ["invalid_input", "invalid_output"]
        assert all(result["result"]["is_error"] is True for result in results)
        assert all(result["environment"] == "app" for result in results)
        assert ran == [{"q": "bad"}]  # the invalid input never reached the function
        assert _of(events, "tool.event") == []
    finally:
        placed.close()


def _create(server: BrainServer, placement: dict[str, Any]) -> httpx.Response:
    with server.client() as api:
        return api.post(
            "/sessions", json={"harness": "loop", "config": {"model": MODEL, "tools": [], "placement": placement}}
        )


def _component_tool(**extra: Any) -> dict[str, Any]:
    return {"name": "read_file", "description": "Read.", "input_schema": READ_INPUT, **extra}


def test_create_refuses_disagreeing_definitions_duplicate_pairs_bad_options_and_denied_grants(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    server = placed_server(brain_factory, scripted_provider)
    reader = {"name": "reader", "filesystem": {"workspace": "read"}}
    cases = {
        "disagree": (
            {"name": "reader"},
            [
                {"tool": _component_tool(), "env": "reader"},
                {"tool": _component_tool(description="Other."), "env": "reader"},
            ],
            400,
            "disagree",
        ),
        "duplicate": (
            reader,
            [{"tool": _component_tool(), "env": "reader"}, {"tool": _component_tool(), "env": "reader"}],
            400,
            "twice",
        ),
        "options": (
            reader,
            [
                {
                    "tool": _component_tool(
                        options_schema={"type": "object", "properties": {"depth": {"type": "integer"}}}
                    ),
                    "env": "reader",
                    "options": {"depth": "deep"},
                }
            ],
            400,
            "invalid options at depth",
        ),
        "grant": (
            {"name": "reader", "filesystem": {"workspace": "read-write"}},
            [{"tool": _component_tool(), "env": "reader"}],
            403,
            "not allowed",
        ),
        "export": (
            reader,
            [{"tool": {**_component_tool(), "name": "nope"}, "env": "reader"}],
            400,
            "no component exporting",
        ),
        "unknown": ({"name": "elsewhere"}, [{"tool": _component_tool(), "env": "elsewhere"}], 403, "not available"),
    }
    for label, (binding, tools, status, words) in cases.items():
        refused = _create(server, {"environments": [binding], "tools": tools})
        assert (label, refused.status_code) == (label, status), refused.text
        assert words in refused.json()["error"]["message"], (label, refused.text)
    with server.client() as api:
        assert api.get("/sessions").json()["sessions"] == []  # nothing was created

    # and a created placement is immutable: session.configure cannot change it
    created = _create(server, {"environments": [reader], "tools": [{"tool": _component_tool(), "env": "reader"}]})
    assert created.status_code == 201, created.text
    assert created.json()["config"]["placement"]["presentation"] == {
        "mode": "policy",
        "choose": {"read_file": "reader"},
    }
    with server.client() as api:
        change = api.post(
            f"/sessions/{created.json()['id']}/events",
            json={"type": "session.configure", "config": {"placement": {"environments": [], "tools": []}}},
        )
    assert change.status_code == 400
    assert json.loads(change.text)["error"]["code"] == "invalid_request"
