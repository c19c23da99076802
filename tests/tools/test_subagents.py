"""Sub-agents on a real `runbrain`: `spawn_researcher` and `spawn_quick` (host-config tools with
`transport: provider`) run a child session of the caller's tenant through the instant runner and
return its answer; the child's row names its parent session and call. A failing child, a parent
interrupt, a deadline and the depth bound end the call as the model should see it; a profile the
host config cannot run refuses startup."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import ROOT, BrainServer, create_session, history, make_server, send_ok, wait_for_status
from tests.tools.test_builtin_tools import call

TENANTS = ["acme", "globex"]
PROFILES: dict[str, Any] = {
    "researcher": {
        "harness": "instant",
        "model": "openai/gpt-4.1-mini",
        "instructions": "You research one question and answer briefly.",
        "tools": ["spawn_researcher"],
        "timeout_seconds": 60,
    },
    "quick": {"harness": "instant", "model": "openai/gpt-4.1-mini", "timeout_seconds": 2},
}


def providers(profiles: dict[str, Any]) -> dict[str, Any]:
    options = {"profiles": profiles, "tenants": TENANTS, "max_depth": 1}
    return {"subagents": {"class": "tools_app.providers.subagents.SubagentProvider", "options": options}}


def spawn_tool(profile: str) -> dict[str, Any]:
    name = f"spawn_{profile}"
    return {"name": name, "transport": "provider", "provider": "subagents", "operation": name, "tenants": TENANTS}


TOOLS = [spawn_tool("researcher"), spawn_tool("quick")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    brain = make_server(tmp_path_factory.mktemp("brain"), tools=TOOLS)
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(providers(PROFILES))
    brain.start()
    yield brain
    brain.stop(signal.SIGKILL)


def session(server: BrainServer, name: str = "alice") -> str:
    return create_session(server, name, tools=[tool["name"] for tool in TOOLS])["id"]  # type: ignore[no-any-return]


def children(server: BrainServer, parent: str) -> list[tuple[str, str, str, int]]:
    """(id, tenant, parent_call, depth) of the sessions whose row names `parent`."""
    with sqlite3.connect(server.data_dir / "metadata.sqlite") as database:
        rows = database.execute(
            "SELECT id, tenant_id, parent_call, depth FROM sessions_app_session WHERE parent_session = ? ORDER BY id",
            (parent,),
        ).fetchall()
    return [(str(a), str(b), str(c), int(d)) for a, b, c, d in rows]


def wait_for_child(server: BrainServer, parent: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = children(server, parent)
        if found:
            return found[0][0]
        time.sleep(0.05)
    raise AssertionError(f"session {parent} spawned no child")


def tool_call_id(events: list[dict[str, Any]]) -> str:
    (tool_call,) = [event["data"] for event in events if event["type"] == "tool.call"]
    return str(tool_call["id"])


def test_a_sub_agent_answers_and_its_session_is_linked_to_the_parent_session_and_call(server: BrainServer) -> None:
    # given
    parent = session(server)
    # when
    spawned = call(server, parent, "spawn_researcher", {"task": "find the invoice", "context": "customer 42"})
    # then
    assert spawned["outcome"] == "ok"
    structured = spawned["result"]["structured_content"]
    child = structured["session_id"]
    answer = "echo: find the invoice\n\nContext:\ncustomer 42"
    assert structured == {"session_id": child, "status": "idle", "answer": answer}
    assert spawned["result"]["content"] == [{"type": "text", "text": answer}]
    assert children(server, parent) == [(child, "acme", tool_call_id(spawned["events"]), 1)]
    with server.client("alice") as client:
        record = client.get(f"/sessions/{child}").json()
    assert (record["status"], record["harness"], record["config"]["model"]) == (
        "idle",
        "instant",
        "openai/gpt-4.1-mini",
    )
    assert record["config"]["instructions"] == "You research one question and answer briefly."
    assert record["config"]["tools"] == ["spawn_researcher"]
    texts = [(event["type"], event["data"].get("text")) for event in history(server, child) if "text" in event["data"]]
    assert texts == [
        ("user.message", "find the invoice\n\nContext:\ncustomer 42"),
        ("assistant.message", answer),
    ]


def test_a_sub_agent_of_another_tenant_is_not_visible_to_it(server: BrainServer) -> None:
    # given
    parent = session(server, "charlie")
    # when
    spawned = call(server, parent, "spawn_researcher", {"task": "hello"}, "charlie")
    # then
    child = spawned["result"]["structured_content"]["session_id"]
    assert children(server, parent) == [(child, "globex", tool_call_id(spawned["events"]), 1)]
    with server.client("alice") as client:
        assert client.get(f"/sessions/{child}").status_code == 404
    with server.client("charlie") as client:
        assert client.get(f"/sessions/{child}").status_code == 200


def test_a_failing_sub_agent_is_an_error_result_naming_its_status_and_error(server: BrainServer) -> None:
    # given
    parent = session(server)
    # when
    spawned = call(server, parent, "spawn_researcher", {"task": "provider_error"})
    # then
    assert spawned["outcome"] == "error"
    result = spawned["result"]
    child = result["structured_content"]["session_id"]
    assert result["is_error"] is True
    assert result["structured_content"] == {"session_id": child, "status": "interrupted", "answer": None}
    assert result["content"] == [
        {
            "type": "text",
            "text": f"sub-agent 'researcher' (session {child}) ended interrupted: "
            "provider_error: upstream rate limit exceeded",
        }
    ]
    assert [row[0] for row in children(server, parent)] == [child]


def test_interrupting_the_parent_interrupts_the_sub_agent_and_cancels_the_call(server: BrainServer) -> None:
    # given
    parent = session(server)
    accepted = send_ok(server, parent, 'tool:spawn_researcher {"task": "sleep:30"}')
    child = wait_for_child(server, parent)
    wait_for_status(server, child, "running")
    # when
    with server.client("alice") as client:
        assert client.post(f"/sessions/{parent}/events", json={"type": "user.interrupt"}).status_code == 202
    # then
    wait_for_status(server, parent, "interrupted")
    wait_for_status(server, child, "interrupted", timeout=10)
    results = [e["data"] for e in history(server, parent) if e["type"] == "tool.result"]
    assert [(result["outcome"], result["result"]["is_error"]) for result in results] == [("cancelled", True)]
    assert all(
        event.get("input_id") == accepted["id"] for event in history(server, parent) if event["type"] == "tool.result"
    )


def test_a_sub_agent_past_its_deadline_is_interrupted_and_the_call_times_out(server: BrainServer) -> None:
    # given
    parent = session(server)
    started = time.monotonic()
    # when
    spawned = call(server, parent, "spawn_quick", {"task": "sleep:30"})
    # then
    assert spawned["outcome"] == "timeout"
    assert time.monotonic() - started < 20
    assert spawned["result"]["content"][0]["text"] == "tool 'spawn_quick' timed out after 2 s; remote outcome unknown"
    (child,) = [row[0] for row in children(server, parent)]
    wait_for_status(server, child, "interrupted", timeout=10)


def test_a_sub_agent_may_not_spawn_beyond_the_depth_bound(server: BrainServer) -> None:
    # given
    parent = session(server)
    nested = 'tool:spawn_researcher {"task": "dig deeper"}'
    # when
    spawned = call(server, parent, "spawn_researcher", {"task": nested})
    # then
    assert spawned["outcome"] == "ok"
    child = spawned["result"]["structured_content"]["session_id"]
    refusal = "sub-agent 'researcher' refused: sub-agents may be nested at most 1 deep"
    assert refusal in spawned["result"]["structured_content"]["answer"]
    assert children(server, child) == []
    (grandchild_call,) = [e["data"] for e in history(server, child) if e["type"] == "tool.result"]
    assert grandchild_call["outcome"] == "error"
    assert grandchild_call["result"]["structured_content"] == {"session_id": None, "status": "refused", "answer": None}


BAD_PROFILES = [
    pytest.param(
        {"harness": "missing", "model": "openai/gpt-4.1-mini"},
        "profiles.scout.harness: harness 'missing' is not configured",
        id="unknown_harness_case",
    ),
    pytest.param(
        {"harness": "instant", "model": "anthropic/claude"},
        "profiles.scout.model: model provider 'anthropic' is not configured",
        id="unknown_model_provider_case",
    ),
    pytest.param(
        {"harness": "instant", "model": "openai/gpt-4.1-mini", "tools": ["web_search"]},
        "profiles.scout.tools: 'web_search' is not a tool of the host config",
        id="unknown_tool_case",
    ),
    pytest.param(
        {"harness": "instant", "model": "openai/gpt-4.1-mini", "tools": ["acme_only"]},
        "profiles.scout.tools: 'acme_only' is not available to tenant 'globex'",
        id="tool_of_another_tenant_case",
    ),
    pytest.param(
        {"harness": "instant", "model": "gpt-4.1-mini"},
        "profiles.scout.model: must be provider/model",
        id="model_without_provider_case",
    ),
]


@pytest.mark.parametrize(("profile", "message"), BAD_PROFILES)
def test_runbrain_refuses_to_start_with_a_profile_it_cannot_run(
    tmp_path: Path, profile: dict[str, Any], message: str
) -> None:
    # given
    acme_only = {**spawn_tool("researcher"), "name": "acme_only", "tenants": ["acme"]}
    server = make_server(tmp_path, tools=[*TOOLS, acme_only])
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(providers({**PROFILES, "scout": profile}))
    server.config_path.write_text(json.dumps(server.config))
    # when
    served = subprocess.run(
        [sys.executable, "manage.py", "runbrain", "--config", str(server.config_path)],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # then
    assert served.returncode != 0
    assert "invalid tool provider: BRAIN_TOOL_PROVIDERS.subagents.options" in served.stderr
    assert message in served.stderr
    assert "brain listening" not in served.stderr
