"""Tool schemas are data: a `$ref` never makes the server fetch anything, and a pattern never
stalls its loop. Against a real runbrain, with a loopback server standing in for the internal
address a schema names."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from brain import Brain, BrainError, RuntimeTool

from tests.fixtures.server import ROOT, BrainServer, history, make_server, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
CATASTROPHIC = "^(a+)+$"  # exponential for a backtracking engine on "aaa…a!"
LONG = "a" * 10_000


class SchemaHost:
    """An HTTP server on loopback that serves a JSON Schema and counts every request."""

    def __init__(self) -> None:
        host = self
        self.requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                host.requests.append(self.path)
                body = json.dumps({"type": "string"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def schema_host() -> Iterator[SchemaHost]:
    host = SchemaHost()
    host.thread.start()
    yield host
    host.server.shutdown()
    host.server.server_close()


def _remote_schema(case: str, url: str) -> dict[str, Any]:
    return {
        "remote_case": {"type": "object", "properties": {"q": {"$ref": f"{url}/q.json"}}},
        "file_case": {"type": "object", "properties": {"q": {"$ref": "file:///etc/passwd"}}},
        "id_relative_case": {"$id": f"{url}/root.json", "type": "object", "properties": {"q": {"$ref": "q.json"}}},
        "dynamic_ref_case": {"type": "object", "properties": {"q": {"$dynamicRef": f"{url}/q.json#meta"}}},
        "output_case": {"type": "object", "properties": {"q": {"$ref": f"{url}/out.json"}}},
    }[case]


@pytest.mark.parametrize(
    ("case", "reference"),
    [
        pytest.param("remote_case", "$ref '{url}/q.json'", id="remote_case"),
        pytest.param("file_case", "$ref 'file:///etc/passwd'", id="file_case"),
        pytest.param("id_relative_case", "$ref 'q.json'", id="id_relative_case"),
        pytest.param("dynamic_ref_case", "$dynamicRef '{url}/q.json#meta'", id="dynamic_ref_case"),
        pytest.param("output_case", "$ref '{url}/out.json'", id="output_case"),
    ],
)
def test_a_runtime_tool_whose_schema_points_outside_itself_is_refused_at_registration(
    brain: BrainServer, schema_host: SchemaHost, case: str, reference: str
) -> None:
    # given
    schema = _remote_schema(case, schema_host.url)
    key = "output_schema" if case == "output_case" else "input_schema"
    tool = {"name": "lookup", "description": "Read data", "input_schema": {"type": "object"}, key: schema}

    # when
    with brain.client() as api:
        response = api.post("/executors", json={"binding": "runtime", "tools": [tool]})
        listed = api.get("/sessions").json()

    # then
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith(f"runtime tool 'lookup': invalid {key}: ")
    assert reference.format(url=schema_host.url) in error["message"]
    assert schema_host.requests == []
    assert listed["sessions"] == []


def test_the_published_client_gets_a_400_for_a_remote_ref_and_nothing_is_fetched(
    brain: BrainServer, schema_host: SchemaHost
) -> None:
    # given
    calls: list[Any] = []
    tool = RuntimeTool(
        "lookup",
        "Read data",
        {"type": "object", "properties": {"q": {"$ref": f"{schema_host.url}/q.json"}}},
        lambda arguments, context: calls.append(arguments),
    )
    client: Brain = brain.sdk()

    # when
    try:
        with pytest.raises(BrainError) as refused:
            client.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[tool])
    finally:
        client.dispose()

    # then
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert str(refused.value) == (
        f"runtime tool 'lookup': invalid input_schema: $ref '{schema_host.url}/q.json' at /properties/q: only "
        "references inside the schema (#...) are allowed"
    )
    assert schema_host.requests == []
    assert calls == []


def _run(command: str, server: BrainServer) -> subprocess.CompletedProcess[str]:
    server.config_path.write_text(json.dumps(server.config))
    return subprocess.run(
        [sys.executable, "manage.py", command, "--config", str(server.config_path)],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["check_brain_config", "runbrain"])
def test_a_config_tool_with_a_file_ref_stops_the_server_naming_the_tool(tmp_path: Path, command: str) -> None:
    # given
    tool = {
        "name": "read_orders",
        "description": "Read orders",
        "url": "http://127.0.0.1:9/orders",
        "tenants": ["acme"],
        "input_schema": {"type": "object", "properties": {"path": {"$ref": "file:///etc/passwd"}}},
    }
    server = make_server(tmp_path, tools=[tool])
    server.directory.mkdir(parents=True, exist_ok=True)

    # when
    result = _run(command, server)

    # then
    assert result.returncode != 0
    assert (
        "tools[0].input_schema: tool 'read_orders': $ref 'file:///etc/passwd' at /properties/path: "
        "only references inside the schema (#...) are allowed"
    ) in result.stderr
    assert "brain listening" not in result.stderr


def test_a_config_tool_with_a_pattern_re2_cannot_run_is_refused_naming_the_tool(tmp_path: Path) -> None:
    # given
    tool = {
        "name": "codes",
        "description": "Codes",
        "url": "http://127.0.0.1:9/codes",
        "tenants": ["acme"],
        "input_schema": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a)\\1$"}}},
    }
    server = make_server(tmp_path, tools=[tool])
    server.directory.mkdir(parents=True, exist_ok=True)

    # when
    result = _run("check_brain_config", server)

    # then
    assert result.returncode != 0
    assert (
        "tools[0].input_schema: tool 'codes': pattern '^(a)\\\\1$' at /properties/code is not supported: "
        "patterns must compile as RE2 (no backreferences or lookaround)"
    ) in result.stderr


def _matching_tool(calls: list[Any], *, output_pattern: bool = False) -> RuntimeTool:
    def handle(arguments: Any, context: Any) -> dict[str, Any]:
        calls.append(arguments)
        return {"echo": arguments["text"] + "!"}

    text = {"type": "object", "properties": {"text": {"type": "string", "pattern": CATASTROPHIC}}}
    tool = RuntimeTool("match", "Match a run of a", {**text, "required": ["text"]}, handle)
    if output_pattern:
        tool = RuntimeTool(
            "match",
            "Match a run of a",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            handle,
            output_schema={"type": "object", "properties": {"echo": {"type": "string", "pattern": CATASTROPHIC}}},
        )
    return tool


def _turn_of(server: BrainServer, session_id: str, input_id: str, name: str) -> list[dict[str, Any]]:
    """`name`'s history of the session once the turn of `input_id` settled (bounded wait)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = history(server, session_id, name)
        if any(
            e["type"] == "session.status" and e.get("input_id") == input_id and e["data"]["status"] == "idle"
            for e in events
        ):
            return events
        time.sleep(0.02)
    raise AssertionError(f"the turn of {input_id} never settled")


def test_a_catastrophic_pattern_on_a_long_argument_settles_its_turn_and_others_run(brain: BrainServer) -> None:
    # given: acme's session has a tool whose argument pattern backtracks exponentially in `re`
    calls: list[Any] = []
    client = brain.sdk()
    other = brain.sdk("charlie")
    try:
        session = client.create(
            {"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[_matching_tool(calls)]
        )
        bystander = other.create({"harness": "instant", "config": {"model": MODEL, "tools": []}})

        # when: a 10,001-character argument that does not match, then another tenant's turn
        attack = send_ok(brain, session["id"], "tool:runtime_match " + json.dumps({"text": LONG + "!"}))
        meanwhile = send_ok(brain, bystander["id"], "hello", name="charlie")
        bystander_events = _turn_of(brain, bystander["id"], meanwhile["id"], "charlie")
        events = wait_for_turn_end(brain, session["id"], attack["id"], timeout=30)
    finally:
        client.dispose()
        other.dispose()

    # then
    assert bystander_events[-2]["data"]["text"] == "echo: hello"
    assert bystander_events[-1]["data"]["status"] == "idle"
    (result,) = [event["data"] for event in events if event["type"] == "tool.result"]
    assert result["outcome"] == "error"
    assert result["result"]["is_error"] is True
    assert result["result"]["content"][0]["text"].startswith("invalid arguments for runtime_match at text: 'aaaa")
    assert f"does not match '{CATASTROPHIC}'" in result["result"]["content"][0]["text"]
    assert events[-1]["data"]["status"] == "idle"
    assert calls == []


def test_a_catastrophic_output_pattern_on_a_long_result_settles_its_turn(brain: BrainServer) -> None:
    # given: the tool's output schema has the pattern; the tool answers 10,001 characters
    calls: list[Any] = []
    client = brain.sdk()
    try:
        session = client.create(
            {"harness": "instant", "config": {"model": MODEL, "tools": []}},
            runtime_tools=[_matching_tool(calls, output_pattern=True)],
        )

        # when
        attack = send_ok(brain, session["id"], "tool:runtime_match " + json.dumps({"text": LONG}))
        events = wait_for_turn_end(brain, session["id"], attack["id"], timeout=30)
    finally:
        client.dispose()

    # then: the result is refused as invalid (the tool ran: an unknown outcome)
    (result,) = [event["data"] for event in events if event["type"] == "tool.result"]
    assert result["outcome"] == "unknown"
    assert result["result"]["content"][0]["text"].startswith(
        "tool 'runtime_match' returned an invalid result: structured_content does not match output_schema: 'aaaa"
    )
    assert events[-1]["data"]["status"] == "idle"
    assert calls == [{"text": LONG}]
