"""Installed tool providers on a real `runbrain`: BRAIN_TOOL_PROVIDERS installs them at startup,
sessions bind them in `config.bindings`, and the instant runner's `tool:NAME {json}` prompt
calls them through a real turn. Services are real too: the ToolZoo over HTTP, the MCP test
server over Streamable HTTP, and an MCP stdio server run by the provider itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import (
    ROOT,
    BrainServer,
    create_session,
    history,
    make_server,
    send_ok,
    wait_for_history,
    wait_for_turn_end,
)
from tests.tools.mcp_server import MCP_TOKEN
from tests.tools.servers import ToolZoo

RECORDS_TOKEN = "records-service-token-0123456789abcdef"
STDIO_SERVER = str(ROOT / "tests" / "support" / "mcp_stdio_server.py")
GREETING = "hello from the operator"
LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
    "additionalProperties": False,
}
REGION_SCHEMA = {
    "type": "object",
    "properties": {"region": {"enum": ["east", "west"]}},
    "required": ["region"],
    "additionalProperties": False,
}
PROBE = "tests.support.providers.ProbeProvider"


def provider_settings(zoo_url: str, mcp_url: str, marks: Path) -> dict[str, Any]:
    return {
        "records": {
            "class": "tools_app.providers.http.HttpProvider",
            "options": {
                "url": f"{zoo_url}/identity",
                "token_env": "TEST_RECORDS_TOKEN",
                "tenants": ["acme"],
                "parameters_schema": REGION_SCHEMA,
                "operations": [{"name": "lookup", "description": "Look a record up.", "input_schema": LOOKUP_SCHEMA}],
            },
        },
        "probe": {"class": PROBE, "options": {"timeout_seconds": 1, "marks": str(marks)}},
        "patient": {"class": PROBE, "options": {"timeout_seconds": 120, "marks": str(marks)}},
        "stdio": {
            "class": "tools_app.providers.mcp.McpStdioProvider",
            "options": {
                "command": [sys.executable, STDIO_SERVER],
                "tools": ["where", "whoami", "echo"],
                "env": ["TEST_STDIO_GREETING"],
            },
        },
        "remote": {
            "class": "tools_app.providers.mcp.McpProvider",
            "options": {"url": mcp_url, "token_env": "TEST_MCP_TOKEN", "tools": ["echo", "whoami"]},
        },
        "reads": {"class": "tools_app.providers.sessions.SessionReadsProvider", "options": {"max_events": 100}},
    }


def install(server: BrainServer, providers: dict[str, Any]) -> BrainServer:
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(providers)
    server.env["TEST_RECORDS_TOKEN"] = RECORDS_TOKEN
    server.env["TEST_MCP_TOKEN"] = MCP_TOKEN
    server.env["TEST_STDIO_GREETING"] = GREETING
    return server


def collision_tool(zoo_url: str) -> dict[str, Any]:
    return {
        "name": "east_lookup",
        "description": "A configured tool whose name a binding could take.",
        "input_schema": {"type": "object"},
        "url": f"{zoo_url}/echo",
        "tenants": ["acme"],
    }


@pytest.fixture(scope="module")
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, zoo_server: tuple[ToolZoo, Any], mcp_url: str, marks: Path
) -> Iterator[BrainServer]:
    zoo_url = zoo_server[1].url
    brain = make_server(tmp_path_factory.mktemp("brain"), tools=[collision_tool(zoo_url)])
    install(brain, provider_settings(zoo_url, mcp_url, marks)).start()
    yield brain
    brain.stop(signal.SIGKILL)


def _result(server: BrainServer, session_id: str, prompt: str) -> dict[str, Any]:
    accepted = send_ok(server, session_id, prompt)
    events = wait_for_turn_end(server, session_id, accepted["id"], timeout=60)
    (result,) = [e["data"] for e in events if e["type"] == "tool.result" and e.get("input_id") == accepted["id"]]
    return result  # type: ignore[no-any-return]


def _create_raw(server: BrainServer, bindings: list[Any], name: str = "alice", tools: list[str] | None = None):
    body = {
        "harness": "instant",
        "config": {"model": "openai/gpt-4.1-mini", "tools": tools or [], "bindings": bindings},
    }
    with server.client(name) as client:
        return client.post("/sessions", json=body)


def _session_ids(server: BrainServer, name: str) -> list[str]:
    with server.client(name) as client:
        return [session["id"] for session in client.get("/sessions", params={"limit": 1000}).json()["sessions"]]


def test_one_provider_bound_twice_reaches_the_service_with_each_bindings_parameters(
    server: BrainServer, zoo: ToolZoo
) -> None:
    # given
    session = create_session(
        server,
        bindings=[
            {"alias": "east", "provider": "records", "parameters": {"region": "east"}},
            {"alias": "west", "provider": "records", "operations": ["lookup"], "parameters": {"region": "west"}},
        ],
    )
    assert [d["name"] for d in session["descriptors"]] == ["east_lookup", "west_lookup"]
    assert session["config"]["bindings"] == [
        {"alias": "east", "provider": "records", "operations": ["lookup"], "parameters": {"region": "east"}},
        {"alias": "west", "provider": "records", "operations": ["lookup"], "parameters": {"region": "west"}},
    ]

    # when
    east = _result(server, session["id"], 'tool:east_lookup {"q": "orders"}')
    west = _result(server, session["id"], 'tool:west_lookup {"q": "invoices"}')

    # then
    assert (east["outcome"], west["outcome"]) == ("ok", "ok")
    received = zoo.calls("/identity")
    assert len(received) == 2
    bodies = [item.body for item in received]
    assert [{k: body[k] for k in ("binding", "operation", "parameters", "arguments")} for body in bodies] == [
        {"binding": "east", "operation": "lookup", "parameters": {"region": "east"}, "arguments": {"q": "orders"}},
        {"binding": "west", "operation": "lookup", "parameters": {"region": "west"}, "arguments": {"q": "invoices"}},
    ]
    assert all(body["tenant_id"] == "acme" and body["session_id"] == session["id"] for body in bodies)
    assert all(item.headers["authorization"] == f"Bearer {RECORDS_TOKEN}" for item in received)
    assert RECORDS_TOKEN not in server.logs()  # (the /identity service itself echoes it into the result)


@pytest.mark.parametrize(
    ("name", "bindings", "tools", "status", "code", "words"),
    [
        ("alice", [{"alias": "x", "provider": "nowhere"}], [], 422, "unsupported", "not installed"),
        (
            "charlie",
            [{"alias": "x", "provider": "records", "parameters": {"region": "east"}}],
            [],
            403,
            "forbidden",
            "not available to this tenant",
        ),
        (
            "alice",
            [{"alias": "x", "provider": "records", "parameters": {"region": "north"}}],
            [],
            400,
            "invalid_request",
            "parameters at region",
        ),
        (
            "alice",
            [{"alias": "x", "provider": "records", "operations": ["delete"], "parameters": {"region": "east"}}],
            [],
            400,
            "invalid_request",
            "unknown operation 'delete'",
        ),
        (
            "alice",
            [{"alias": "east", "provider": "records", "parameters": {"region": "east"}}],
            ["east_lookup"],
            400,
            "invalid_request",
            "'east_lookup' collides",
        ),
        (
            "alice",
            [{"alias": "x", "provider": "reads", "parameters": {"target": "y"}}],
            [],
            400,
            "invalid_request",
            "no parameters",
        ),
    ],
    ids=[
        "unknown_provider_case",
        "unauthorized_tenant_case",
        "bad_parameters_case",
        "unknown_operation_case",
        "collision_with_config_tool_case",
        "parameters_for_session_reads_case",
    ],
)
def test_create_refuses_a_provider_binding_it_cannot_serve(
    server: BrainServer,
    zoo: ToolZoo,
    name: str,
    bindings: list[Any],
    tools: list[str],
    status: int,
    code: str,
    words: str,
) -> None:
    # given
    before = _session_ids(server, name)

    # when
    response = _create_raw(server, bindings, name, tools)

    # then
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert words in response.json()["error"]["message"]
    assert _session_ids(server, name) == before
    assert zoo.received == []


def _process_gone(pid: int) -> bool:
    """Gone, or a zombie waiting for whoever inherited it to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], timeout: float = 5) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if not _process_gone(pid)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def test_an_mcp_stdio_operation_runs_privately_and_leaves_no_process_or_directory(server: BrainServer) -> None:
    # given
    session = create_session(
        server, bindings=[{"alias": "box", "provider": "stdio", "operations": ["where", "whoami"]}]
    )
    workroot = server.data_dir / "providers" / "stdio"
    seen: list[dict[str, Any]] = []

    for _ in range(2):
        # when
        result = _result(server, session["id"], "tool:box_where {}")

        # then
        assert result["outcome"] == "ok", result
        report = json.loads(result["result"]["content"][0]["text"])
        seen.append(report)
        cwd = Path(report["cwd"])
        assert cwd.parent == workroot.resolve()
        assert report["mode"] == 0o700
        assert report["pgid"] == report["pid"] == report["sid"]  # a session and process group of its own
        assert not cwd.exists()  # removed with what the server wrote there
        assert _wait_gone([report["pid"], report["grandchild"]]) == []
        assert report["greeting"] == GREETING
        assert set(report["env"]) <= {
            "PATH",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "TZ",
            "HOME",
            "TMPDIR",
            "TEST_STDIO_GREETING",
        }
    assert seen[0]["cwd"] != seen[1]["cwd"]
    assert list(workroot.iterdir()) == []

    # and the call carried its identity and binding in _meta
    whoami = _result(server, session["id"], "tool:box_whoami {}")
    meta = json.loads(whoami["result"]["content"][0]["text"])
    assert meta["scope"] == {"tenant_id": "acme", "session_id": session["id"], "call_id": whoami["call_id"]}
    assert meta["binding"] == {"alias": "box", "parameters": None}


def test_an_mcp_provider_discovers_its_allowed_tools_and_calls_them(server: BrainServer) -> None:
    # given
    session = create_session(server, bindings=[{"alias": "docs", "provider": "remote"}])

    # then: discovery kept the allow-list's tools only, with the server's schemas
    assert [d["name"] for d in session["descriptors"]] == ["docs_echo", "docs_whoami"]
    assert session["descriptors"][0]["input_schema"]["required"] == ["text"]

    # when
    echoed = _result(server, session["id"], 'tool:docs_echo {"text": "over mcp"}')
    refused = _result(server, session["id"], "tool:docs_echo {}")

    # then
    assert echoed["outcome"] == "ok"
    assert echoed["result"]["content"][0]["text"] == "over mcp"
    assert refused["outcome"] == "error"
    assert "invalid arguments for docs_echo" in refused["result"]["content"][0]["text"]


def test_session_reads_returns_only_the_calling_sessions_own_history(server: BrainServer) -> None:
    # given: two sessions of the same tenant, each with something to read
    mine = create_session(server, bindings=[{"alias": "self", "provider": "reads"}])
    other = create_session(server, bindings=[{"alias": "self", "provider": "reads"}])
    send_ok(server, other["id"], "the other session's secret")
    wait_for_history(server, other["id"], lambda events: any(e["type"] == "assistant.message" for e in events))
    _result(server, mine["id"], "tool:self_status {}")  # gives the history a tool call to show

    # when
    status = _result(server, mine["id"], "tool:self_status {}")
    page = _result(server, mine["id"], 'tool:self_history {"limit": 100}')
    sneaky = _result(server, mine["id"], f'tool:self_history {{"session_id": "{other["id"]}"}}')

    # then
    assert status["result"]["structured_content"]["id"] == mine["id"]
    assert status["result"]["structured_content"]["status"] == "running"
    events = page["result"]["structured_content"]["events"]
    own_ids = {event["id"] for event in history(server, mine["id"])}
    other_ids = {event["id"] for event in history(server, other["id"])}
    assert events and {event["id"] for event in events} <= own_ids
    assert not {event["id"] for event in events} & other_ids
    assert "tool:self_status {}" in [e["data"].get("text") for e in events if e["type"] == "user.message"]
    assert "the other session's secret" not in json.dumps(page)
    assert sneaky["outcome"] == "error"  # there is no way to name another session
    assert "Additional properties" in sneaky["result"]["content"][0]["text"]


def test_a_provider_that_hangs_ends_in_a_timeout(server: BrainServer, marks: Path) -> None:
    # given
    session = create_session(server, bindings=[{"alias": "slow", "provider": "probe", "parameters": {"label": "t"}}])

    # when
    result = _result(server, session["id"], "tool:slow_hang {}")

    # then
    assert result["outcome"] == "timeout"
    assert result["result"]["unknown_outcome"] is True
    assert "timed out after 1 s" in result["result"]["content"][0]["text"]
    assert (marks / f"{result['call_id']}.cancelled").exists()


def test_an_interrupt_mid_call_cancels_the_provider_call(server: BrainServer, marks: Path) -> None:
    # given: a call the provider is running
    session = create_session(server, bindings=[{"alias": "wait", "provider": "patient", "parameters": {"label": "i"}}])
    accepted = send_ok(server, session["id"], "tool:wait_hang {}")
    events = wait_for_history(server, session["id"], lambda events: any(e["type"] == "tool.call" for e in events))
    call_id = next(e["data"]["id"] for e in events if e["type"] == "tool.call")
    deadline = time.monotonic() + 20
    while not (marks / f"{call_id}.started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)

    # when
    with server.client() as client:
        assert client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"}).status_code == 202

    # then
    events = wait_for_turn_end(server, session["id"], accepted["id"])
    (result,) = [event["data"] for event in events if event["type"] == "tool.result"]
    assert result["outcome"] == "cancelled"
    assert result["result"]["unknown_outcome"] is True
    assert (marks / f"{call_id}.cancelled").exists()


def test_a_provider_binding_works_again_after_a_crash_restart_and_resume(
    brain_factory: Callable[..., BrainServer], zoo: ToolZoo, zoo_url: str, mcp_url: str, tmp_path: Path
) -> None:
    # given: a session whose turn is running a provider call when the server is killed
    brain = brain_factory(start=False)
    install(brain, provider_settings(zoo_url, mcp_url, tmp_path / "marks")).start()
    session = create_session(
        brain,
        bindings=[
            {"alias": "east", "provider": "records", "parameters": {"region": "east"}},
            {"alias": "wait", "provider": "patient", "parameters": {"label": "r"}},
        ],
    )
    send_ok(brain, session["id"], "tool:wait_hang {}")
    wait_for_history(brain, session["id"], lambda events: any(e["type"] == "tool.call" for e in events))
    brain.kill()

    # when
    brain.start()
    with brain.client() as client:
        assert client.get(f"/sessions/{session['id']}").json()["status"] == "interrupted"
        assert client.post(f"/sessions/{session['id']}/resume").status_code == 200
    result = _result(brain, session["id"], 'tool:east_lookup {"q": "after the crash"}')

    # then: the saved binding was bound again with its saved parameters
    assert result["outcome"] == "ok"
    body = zoo.calls("/identity")[-1].body
    assert (body["binding"], body["parameters"], body["arguments"]) == (
        "east",
        {"region": "east"},
        {"q": "after the crash"},
    )


@pytest.mark.parametrize(
    ("providers", "words"),
    [
        (
            {"p": {"class": "tests.support.nowhere.Provider"}},
            "BRAIN_TOOL_PROVIDERS.p.class: cannot import tests.support.nowhere",
        ),
        (
            {"p": {"class": PROBE, "options": {"colour": "red"}}},
            "BRAIN_TOOL_PROVIDERS.p.options: colour: unknown option",
        ),
        (
            {
                "p": {
                    "class": "tools_app.providers.http.HttpProvider",
                    "options": {
                        "url": "http://127.0.0.1:1/x",
                        "token_env": "TEST_UNSET_TOKEN",
                        "operations": [{"name": "a", "description": "a", "input_schema": {"type": "object"}}],
                    },
                }
            },
            "environment variable TEST_UNSET_TOKEN is not set",
        ),
    ],
    ids=["missing_class_case", "bad_options_case", "unset_secret_case"],
)
def test_a_bad_provider_installation_refuses_to_start(
    brain_factory: Callable[..., BrainServer], providers: dict[str, Any], words: str
) -> None:
    # given
    brain = install(brain_factory(start=False), providers)
    brain.config_path.write_text(json.dumps(brain.config))
    command = [sys.executable, "manage.py"]

    # when
    served = subprocess.run(
        [*command, "runbrain", "--config", str(brain.config_path)],
        cwd=ROOT,
        env=brain.env,
        capture_output=True,
        timeout=60,
    )
    checked = subprocess.run(
        [*command, "check_brain_config", "--config", str(brain.config_path)],
        cwd=ROOT,
        env=brain.env,
        capture_output=True,
        timeout=60,
    )

    # then
    assert served.returncode != 0
    assert words in served.stderr.decode()
    assert b"brain listening" not in served.stderr
    assert checked.returncode != 0
    assert words in checked.stderr.decode()
    with pytest.raises(httpx.ConnectError):
        httpx.get(brain.url + "/health/ready", timeout=2)


def test_check_brain_config_lists_the_installed_providers(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    brain = install(
        brain_factory(start=False), {"reads": {"class": "tools_app.providers.sessions.SessionReadsProvider"}}
    )
    brain.config_path.write_text(json.dumps(brain.config))
    checked = subprocess.run(
        [sys.executable, "manage.py", "check_brain_config", "--config", str(brain.config_path)],
        cwd=ROOT,
        env={**brain.env, "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr.decode()
    assert b"tool providers installed: reads" in checked.stdout
