"""Tool services in a service environment: a placed call reaches the host-config tool the
environment maps it to, and the service emits committed extension events with the per-call
capability Brain gave it (HTTP JSON, SSE and MCP alike); the event is in the log before the emit
returns, replayed to a late subscriber, and every refusal (a forged token, an API token, a bad
kind, data over the bound, an emit after the call ended) appends nothing. A tool placed in a
service environment and a host environment runs where the model chose."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.ports import free_port
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, open_stream, send_ok, wait_for_turn_end
from tests.tools.emit_services import KIND, EmitProbe, EmittingService, build_mcp_app
from tests.tools.servers import LoopbackServer
from toolkits.authoring import create_placed_session, host_env, service_env, tool

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
MCP_TOKEN = "mcp-emit-token-0123456789abcdef"
OPEN = {"type": "object"}
LOOKUP_INPUT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


@pytest.fixture
def probe() -> EmitProbe:
    return EmitProbe()


@pytest.fixture
def services(probe: EmitProbe) -> Iterator[tuple[str, str]]:
    """(the HTTP service's URL, the MCP server's URL)."""
    http = LoopbackServer(EmittingService(probe)).start()
    mcp = LoopbackServer(build_mcp_app(probe, token=MCP_TOKEN), lifespan="on").start()
    yield http.url, mcp.url + "/mcp"
    http.stop()
    mcp.stop()


def _tool(name: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "description": f"the {name} tool", "url": url, "tenants": ["acme"], **fields}


def _server(
    factory: Callable[..., BrainServer], provider: ScriptedProvider, http: str, mcp: str, probe: EmitProbe
) -> BrainServer:
    port = free_port()  # the emit URL is the public URL: this server's own address here
    server = factory(
        start=False,
        listen=f"127.0.0.1:{port}",
        public_url=f"http://127.0.0.1:{port}",
        harnesses={"loop": LOOP_HARNESS},
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.openai_base_url}},
        tools=[
            _tool("zoo_json", http + "/json", input_schema=OPEN),
            _tool("zoo_sse", http + "/sse", input_schema=OPEN),
            _tool("zoo_mcp", mcp, input_schema=OPEN, transport="mcp", mcp_tool="emitter", token_env="MCP_KEY"),
            _tool("zoo_lookup", http + "/json", input_schema=LOOKUP_INPUT),
        ],
        environments=[
            {"name": "app", "kind": "host", "tenants": ["acme"]},
            {
                "name": "svc",
                "kind": "service",
                "tenants": ["acme"],
                "services": {"json": "zoo_json", "sse": "zoo_sse", "mcp": "zoo_mcp", "lookup": "zoo_lookup"},
            },
        ],
    )
    server.env["MCP_KEY"] = MCP_TOKEN
    server.start()
    probe.reader_token = server.tokens["reader"]
    provider.reset()
    return server


def _turn(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    accepted = send_ok(server, session_id, text)
    wait_for_turn_end(server, session_id, accepted["id"], timeout=60)
    return [event for event in history(server, session_id) if event.get("input_id") == accepted["id"]]


def _of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == type_]


def _unused(arguments: Any, ctx: Any) -> Any:
    raise AssertionError("a service placement never runs in this process")


def test_http_sse_and_mcp_services_emit_committed_events_and_every_refusal_appends_nothing(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    services: tuple[str, str],
    probe: EmitProbe,
) -> None:
    # given: three tools placed in a service environment, one per kind of tool service
    server = _server(brain_factory, scripted_provider, *services, probe)
    placements = [
        tool(name=name, description=f"{name} service", input=OPEN, run=_unused)(env=service_env("svc"))
        for name in ("json", "sse", "mcp")
    ]
    placed = create_placed_session(
        server.sdk(), harness="loop", config={"model": MODEL, "tools": []}, placements=placements
    )

    # when: the model calls each (the loop runs them concurrently)
    events = _turn(server, placed.id, "call json {}\ncall sse {}\ncall mcp {}")

    # then: each call ran in the service environment with its outcome ok
    calls = _of(events, "tool.call")
    results = {r["call_id"]: r for r in _of(events, "tool.result")}
    assert [(c["name"], c["environment"]) for c in calls] == [("json", "svc"), ("sse", "svc"), ("mcp", "svc")]
    assert [results[c["id"]]["outcome"] for c in calls] == ["ok", "ok", "ok"]
    reports = {}
    for call in calls:
        result = results[call["id"]]["result"]
        if call["name"] == "mcp":
            reports[call["name"]] = json.loads(result["content"][0]["text"])
        else:
            reports[call["name"]] = result["structured_content"]
    for via, call in zip(("/json", "/sse", "mcp"), calls, strict=True):
        report = reports[call["name"]]
        # the emit was answered committed, and the event was in the log when it returned
        assert report["emit"] == 200 and report["answer"] == {"status": "committed"}
        assert {"call_id": call["id"], "environment": "svc", "kind": KIND, "data": {"via": via}} in report["in_log"]
        # refusals: a forged token and an API token 401, a bad kind and data over 16 KiB 400
        assert (report["forged"], report["api_token"], report["bad_kind"], report["too_big"]) == (401, 401, 400, 400)
    emitted = _of(events, "tool.event")
    assert sorted((e["call_id"], e["data"]["via"]) for e in emitted) == sorted(
        zip((c["id"] for c in calls), ("/json", "/sse", "mcp"), strict=True)
    )
    # each call's one event precedes its result in the log
    for call in calls:
        mine = [
            e["type"]
            for e in events
            if e["type"] in ("tool.event", "tool.result") and e["data"]["call_id"] == call["id"]
        ]
        assert mine == ["tool.event", "tool.result"]

    # when: a capability is used after its call ended
    assert sorted(url for url, _ in probe.given) == sorted(
        f"{server.config['public_url']}/sessions/{placed.id}/tool-calls/{c['id']}/events" for c in calls
    )
    before = len(history(server, placed.id))
    late = [
        httpx.post(url, json={"kind": KIND, "data": {}}, headers={"Authorization": f"Bearer {token}"}, timeout=15)
        for url, token in probe.given
    ]
    # a token of another call is refused on this call's route
    (url0, _), (_, token1) = probe.given[0], probe.given[1]
    crossed = httpx.post(url0, json={"kind": KIND, "data": {}}, headers={"Authorization": f"Bearer {token1}"})

    # then: the calls are over (409), the crossed token is not this call's (401), nothing appended
    assert [(r.status_code, r.json()["error"]["code"]) for r in late] == [(409, "conflict")] * 3
    assert (crossed.status_code, crossed.json()["error"]["code"]) == (401, "forbidden")
    assert len(history(server, placed.id)) == before

    # a late subscriber replays the committed events
    with open_stream(server, placed.id) as stream:
        stream.wait_for(lambda seen: len([e for e in seen if e["type"] == "tool.result"]) == 3)
        replayed = [e["data"]["data"] for e in stream.events() if e["type"] == "tool.event"]
    assert sorted(data["via"] for data in replayed) == ["/json", "/sse", "mcp"]


def test_a_tool_placed_in_a_service_and_a_host_environment_runs_where_the_model_chose(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    services: tuple[str, str],
    probe: EmitProbe,
) -> None:
    # given: lookup placed in the service environment (an HTTP tool) and the host environment
    server = _server(brain_factory, scripted_provider, *services, probe)
    ran: list[tuple[Any, str]] = []

    def here(arguments: Any, ctx: Any) -> dict[str, Any]:
        ran.append((arguments, ctx.environment))
        return {"from": "host", "q": arguments["q"]}

    lookup = tool(name="lookup", description="Look up.", input=LOOKUP_INPUT, run=here)
    placed = create_placed_session(
        server.sdk(),
        harness="loop",
        config={"model": MODEL, "tools": []},
        placements=[lookup(env=service_env("svc")), lookup(env=host_env("app"))],
        presentation="selector",
    )
    try:
        # when
        prompt = "\n".join(
            [
                'call lookup {"environment": "svc", "input": {"q": "a"}}',
                'call lookup {"environment": "app", "input": {"q": "b"}}',
            ]
        )
        events = _turn(server, placed.id, prompt)

        # then: each reached the environment it named, and only that one
        calls = _of(events, "tool.call")
        results = {r["call_id"]: r for r in _of(events, "tool.result")}
        outcomes = [(c["environment"], c["arguments"], results[c["id"]]["outcome"]) for c in calls]
        assert outcomes == [("svc", {"q": "a"}, "ok"), ("app", {"q": "b"}, "ok")]
        assert [results[c["id"]]["environment"] for c in calls] == ["svc", "app"]
        assert ran == [({"q": "b"}, "app")]
        assert results[calls[1]["id"]]["result"]["structured_content"] == {"from": "host", "q": "b"}
        assert len(probe.given) == 1  # the service got the svc call alone, with its emit capability
        assert results[calls[0]["id"]]["result"]["structured_content"]["emit"] == 200
        assert [(e["call_id"], e["environment"]) for e in _of(events, "tool.event")] == [(calls[0]["id"], "svc")]
    finally:
        placed.close()
