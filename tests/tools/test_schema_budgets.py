"""Tenant schemas have a budget: a schema whose references multiply is refused when it is
registered, a check against a schema whose cost the value decides stops at its deadline, and
schemas are compiled and checked on threads of their own, never on the event loop. Against a
real runbrain; other tenants' latencies are measured and printed, never asserted."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from brain import BrainError, RuntimeTool

from tests.fixtures.server import BrainServer, create_session, make_server, send_ok, wait_for_turn_end
from tests.tools.test_schema_containment import _run

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
CLIENT_TIMEOUT = 15.0  # seconds a client waits for an answer
EXPANSION_BUDGET = "more than 20000 subschemas through its references (the schema expansion budget)"


def _multiplying_schema(definitions: int = 21) -> dict[str, Any]:
    """1.5 KB: each definition points twice at the next under allOf / anyOf (2^21 expansions)."""
    defs: dict[str, Any] = {
        f"d{i}": {("anyOf" if i % 2 == 0 else "allOf"): [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(definitions)
    }
    defs[f"d{definitions}"] = {"type": "string"}
    return {"type": "object", "properties": {"q": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def _fanning_schema() -> dict[str, Any]:
    """Small and recursive (its cycle counts once at compile time): every level of nested arrays
    tries two branches that recurse, so a deep value that fails at its bottom costs 2^depth."""
    node = {
        "anyOf": [
            {"type": "array", "items": {"$ref": "#/$defs/node"}},
            {"type": "array", "maxItems": 9, "items": {"$ref": "#/$defs/node"}},
            {"type": "integer"},
        ]
    }
    return {"type": "object", "properties": {"v": {"$ref": "#/$defs/node"}}, "$defs": {"node": node}}


def _deep(depth: int = 40) -> Any:
    value: Any = "not an integer"
    for _ in range(depth):
        value = [value]
    return value


def test_a_schema_whose_references_multiply_is_refused_at_registration_naming_the_budget(brain: BrainServer) -> None:
    # given
    schema = _multiplying_schema()
    assert len(json.dumps(schema)) < 1600
    tool = {"name": "lookup", "description": "Read data", "input_schema": schema}
    output_tool = {**tool, "input_schema": {"type": "object"}, "output_schema": schema}

    # when
    with brain.client() as api:
        refused = api.post("/executors", json={"binding": "runtime", "tools": [tool]})
        refused_output = api.post("/executors", json={"binding": "runtime", "tools": [output_tool]})

    # then
    for response, key in ((refused, "input_schema"), (refused_output, "output_schema")):
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["message"].startswith(f"runtime tool 'lookup': invalid {key}: the schema expands to ")
        assert EXPANSION_BUDGET in error["message"]


def test_the_published_client_cannot_create_a_session_with_a_multiplying_schema(brain: BrainServer) -> None:
    # given
    calls: list[Any] = []
    tool = RuntimeTool("lookup", "Read data", _multiplying_schema(), lambda arguments, context: calls.append(arguments))
    client = brain.sdk()

    # when
    try:
        with pytest.raises(BrainError) as refused:
            client.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[tool])
    finally:
        client.dispose()
    with brain.client() as api:
        listed = api.get("/sessions").json()

    # then
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert EXPANSION_BUDGET in str(refused.value)
    assert listed["sessions"] == []
    assert calls == []


def test_a_config_tool_with_a_multiplying_schema_is_refused_naming_the_budget(tmp_path: Path) -> None:
    # given
    tool = {
        "name": "lookup",
        "description": "Read data",
        "url": "http://127.0.0.1:9/lookup",
        "tenants": ["acme"],
        "input_schema": _multiplying_schema(),
    }
    server = make_server(tmp_path, tools=[tool])
    server.directory.mkdir(parents=True, exist_ok=True)

    # when
    result = _run("check_brain_config", server)

    # then
    assert result.returncode != 0
    assert "tools[0].input_schema: tool 'lookup': the schema expands to " in result.stderr
    assert EXPANSION_BUDGET in result.stderr


def _client(server: BrainServer, name: str, timeout: float) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token(name)}"}, timeout=timeout)


class Bystander:
    """Another tenant reading an event page and creating sessions in a loop; every answer's
    status and latency is kept (a timeout is status 0)."""

    def __init__(self, server: BrainServer, name: str, session_id: str) -> None:
        self.server, self.name, self.session_id = server, name, session_id
        self.reads: list[tuple[int, float]] = []
        self.creates: list[tuple[int, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _timed(self, request: Callable[[], httpx.Response], into: list[tuple[int, float]]) -> None:
        started = time.monotonic()
        try:
            status = request().status_code
        except httpx.TimeoutException:
            status = 0
        into.append((status, time.monotonic() - started))

    def _run(self) -> None:
        body = {"harness": "instant", "config": {"model": MODEL, "tools": []}}
        with _client(self.server, self.name, CLIENT_TIMEOUT) as api:
            while not self.stop.is_set():
                self._timed(lambda: api.get(f"/sessions/{self.session_id}/events"), self.reads)
                self._timed(lambda: api.post("/sessions", json=body), self.creates)
                time.sleep(0.05)

    def __enter__(self) -> Bystander:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=2 * CLIENT_TIMEOUT + 5)


def _figures(label: str, samples: list[tuple[int, float]]) -> str:
    latencies = [seconds * 1000 for _, seconds in samples]
    if not latencies:
        return f"{label}: none"
    return (
        f"{label}: {len(latencies)} answered, median {statistics.median(latencies):.0f} ms, max {max(latencies):.0f} ms"
    )


ATTACK_CALLS = 6  # as many as the loop's default executor has threads on two cores


def test_a_value_that_costs_a_schema_too_much_ends_its_call_and_other_tenants_keep_answering(
    brain: BrainServer,
) -> None:
    # given: acme's sessions have a tool whose schema fans out on every level of a nested array
    calls: list[Any] = []

    def handle(arguments: Any, context: Any) -> dict[str, Any]:
        calls.append(arguments)
        return {"ok": True}

    tool = RuntimeTool("match", "Match nested values", _fanning_schema(), handle)
    clients = [brain.sdk() for _ in range(ATTACK_CALLS)]
    bystander_session = create_session(brain, "charlie")
    try:
        sessions = [
            client.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[tool])
            for client in clients
        ]

        # when: each session calls it with a value 40 levels deep, while charlie reads and creates
        with Bystander(brain, "charlie", bystander_session["id"]) as charlie:
            attacks = [
                send_ok(brain, session["id"], "tool:runtime_match " + json.dumps({"v": _deep()}))
                for session in sessions
            ]
            ended = [
                wait_for_turn_end(brain, session["id"], attack["id"], timeout=90)
                for session, attack in zip(sessions, attacks, strict=True)
            ]
    finally:
        for client in clients:
            client.dispose()

    # then: every call ended with an invalid-arguments error naming the budget it spent
    print(_figures("charlie's event-page reads during the attack", charlie.reads))
    print(_figures("charlie's session creations during the attack", charlie.creates))
    for events in ended:
        (result,) = [event["data"] for event in events if event["type"] == "tool.result"]
        assert result["outcome"] == "error"
        text = result["result"]["content"][0]["text"]
        assert text.startswith("invalid arguments for runtime_match")
        assert "(the validation deadline)" in text or "(the validation step budget)" in text
        assert events[-1]["data"]["status"] == "idle"
    assert calls == []
    assert charlie.reads and {status for status, _ in charlie.reads} == {200}
    assert charlie.creates and {status for status, _ in charlie.creates} == {201}


def _large_tool(index: int) -> dict[str, Any]:
    properties = {f"p{index}_{j}": {"type": "string", "pattern": f"^[a-z]{{{index}}}[0-9]{{{j}}}$"} for j in range(6)}
    return {
        "name": f"tool{index}",
        "description": "Read data",
        "input_schema": {"type": "object", "properties": properties, "required": list(properties)[:3]},
    }


LARGE_CREATES = 64  # 66 KB requests in flight at once: on the loop, well past a client's timeout


def test_a_large_session_create_refused_as_unregistered_compiles_nothing_and_health_answers(
    brain: BrainServer,
) -> None:
    # given: a 66 KB create whose runtime binding names an executor that was never registered
    tools = [_large_tool(index) for index in range(128)]
    body = {
        "harness": "instant",
        "config": {
            "model": MODEL,
            "tools": [],
            "bindings": [{"alias": "runtime", "executor": "0" * 32, "runtime": tools}],
        },
    }
    assert 60_000 < len(json.dumps(body)) < 70_000
    started = threading.Event()

    def create() -> httpx.Response:
        with _client(brain, "alice", 120) as api:
            started.set()
            return api.post("/sessions", json=body)

    # when: sixty-four of them at once, and /health/live asked meanwhile
    probes: list[tuple[int, float]] = []
    with ThreadPoolExecutor(LARGE_CREATES) as pool:
        futures = [pool.submit(create) for _ in range(LARGE_CREATES)]
        started.wait(10)
        time.sleep(0.2)  # the bodies are on their way
        with httpx.Client(base_url=brain.url, timeout=CLIENT_TIMEOUT) as probe:
            for _ in range(5):
                began = time.monotonic()
                try:
                    status = probe.get("/health/live").status_code
                except httpx.TimeoutException:
                    status = 0
                probes.append((status, time.monotonic() - began))
        responses = [future.result() for future in futures]

    # then
    print(_figures("/health/live during sixty-four 66 KB creates", probes))
    assert [status for status, _ in probes] == [200] * 5
    assert {response.status_code for response in responses} == {400}
    assert {response.json()["error"]["message"] for response in responses} == {
        f"binding 'runtime': runtime executor {'0' * 32!r} is not registered"
    }
