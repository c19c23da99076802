"""Runtime tools: functions in the client's process, reached by Brain over the executor command
stream, driven by the published client against a real server."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from brain import Brain, RuntimeTool

from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"


def _tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == "tool.result"]


def _lookup(arguments: Any, context: Any) -> dict[str, Any]:
    context.progress({"stage": "reading"})
    return {"value": f"data for {context.scope['tenant_id']}", "echo": arguments}


LOOKUP = RuntimeTool(
    "lookup",
    "Read application data",
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False},
    _lookup,
)


def _create(client: Brain, tools: list[RuntimeTool]) -> Any:
    return client.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=tools)


def test_a_runtime_tool_runs_in_the_client_and_its_result_reaches_the_model(brain: BrainServer) -> None:
    client = brain.sdk()
    try:
        session = _create(client, [LOOKUP])
        assert [d["name"] for d in session["descriptors"]] == ["runtime_lookup"]
        assert session["config"]["bindings"][0]["alias"] == "runtime"
        accepted = send_ok(brain, session["id"], 'tool:runtime_lookup {"q": "orders"}')
        events = wait_for_turn_end(brain, session["id"], accepted["id"])
        (result,) = _tool_results(events)
        assert result["outcome"] == "ok"
        assert result["result"]["structured_content"] == {"value": "data for acme", "echo": {"q": "orders"}}
        assert "tool said:" in events[-2]["data"]["text"]
        calls = [e["data"] for e in events if e["type"] == "tool.call"]
        assert calls[0]["name"] == "runtime_lookup"
    finally:
        client.dispose()


def test_invalid_arguments_never_reach_the_client(brain: BrainServer) -> None:
    seen: list[Any] = []

    def record(arguments: Any, context: Any) -> dict[str, bool]:
        seen.append(arguments)
        return {"ok": True}

    tool = RuntimeTool("lookup", "x", LOOKUP.input_schema, record)
    client = brain.sdk()
    try:
        session = _create(client, [tool])
        accepted = send_ok(brain, session["id"], 'tool:runtime_lookup {"q": 5}')
        (result,) = _tool_results(wait_for_turn_end(brain, session["id"], accepted["id"]))
        assert result["outcome"] == "error"
        assert result["result"]["is_error"] is True
        assert seen == []
    finally:
        client.dispose()


def test_a_call_to_an_executor_that_is_gone_fails_before_dispatch(brain: BrainServer) -> None:
    client = brain.sdk()
    session = _create(client, [LOOKUP])
    client.dispose()  # closes the executor
    accepted = send_ok(brain, session["id"], 'tool:runtime_lookup {"q": "x"}')
    (result,) = _tool_results(wait_for_turn_end(brain, session["id"], accepted["id"]))
    assert result["outcome"] == "error"
    assert "unknown_outcome" not in result["result"]
    assert "unavailable" in result["result"]["content"][0]["text"]


def test_an_executor_lost_mid_call_gives_an_unknown_outcome(brain: BrainServer) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(arguments: Any, context: Any) -> dict[str, Any]:
        started.set()
        release.wait(30)
        return {"late": True}

    client = brain.sdk()
    session = _create(client, [RuntimeTool("slow", "slow", {"type": "object"}, slow)])
    executor = client._executors[session["id"]]
    try:
        accepted = send_ok(brain, session["id"], "tool:runtime_slow {}")
        assert started.wait(20)
        executor.close()  # the command stream and the executor end while the call runs
        (result,) = _tool_results(wait_for_turn_end(brain, session["id"], accepted["id"]))
        assert result["outcome"] == "unknown"
        assert result["result"]["unknown_outcome"] is True
    finally:
        release.set()


def test_rebind_after_a_restart_serves_the_session_again(brain: BrainServer) -> None:
    client = brain.sdk()
    session = _create(client, [LOOKUP])
    client.dispose()
    brain.stop()
    brain.start()
    client = brain.sdk()
    try:
        client.resume(session["id"]) if client.get(session["id"])["status"] != "idle" else None
        client.rebind(session["id"], [LOOKUP])
        accepted = send_ok(brain, session["id"], 'tool:runtime_lookup {"q": "after restart"}')
        (result,) = _tool_results(wait_for_turn_end(brain, session["id"], accepted["id"]))
        assert result["outcome"] == "ok"
        # a rebind whose tools differ from the saved descriptors is refused
        other = RuntimeTool("lookup", "changed description", LOOKUP.input_schema, _lookup)
        with pytest.raises(Exception) as refused:
            client.rebind(session["id"], [other])
        assert getattr(refused.value, "status", None) == 409
    finally:
        client.dispose()


def test_executor_credentials_and_api_tokens_never_stand_in_for_each_other(brain: BrainServer) -> None:
    with brain.client() as api:
        registered = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]})
        assert registered.status_code == 201
        credential = registered.json()
        # the API token cannot drive the executor
        assert api.post(f"/executors/{credential['id']}/close").status_code == 401
        # the executor token cannot use the API
        as_executor = {"Authorization": f"Bearer {credential['token']}"}
        assert httpx.get(f"{brain.url}/sessions", headers=as_executor).status_code == 401
        # a read-only token cannot register executors
        reader = brain.client("reader").post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]})
        assert reader.status_code == 403
        closed = httpx.post(f"{brain.url}/executors/{credential['id']}/close", headers=as_executor)
        assert closed.status_code == 200
        again = httpx.post(f"{brain.url}/executors/{credential['id']}/close", headers=as_executor)
        assert again.status_code == 401


def test_stale_duplicate_and_unsolicited_replies_fail(brain: BrainServer) -> None:
    with brain.client() as api:
        credential = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]}).json()
    headers = {"Authorization": f"Bearer {credential['token']}"}
    base = f"{brain.url}/executors/{credential['id']}"
    with httpx.Client(headers=headers, timeout=10) as http, http.stream("GET", f"{base}/commands") as stream:
        lines = stream.iter_lines()
        ready = json.loads(next(line for line in lines if line.startswith("data:"))[5:])
        assert ready["type"] == "ready"
        unsolicited = http.post(
            f"{base}/responses",
            json={"connection": ready["connection"], "call_id": "x" * 32, "result": {"content": []}},
        )
        assert unsolicited.status_code == 409
        stale = http.post(
            f"{base}/responses", json={"connection": "0" * 32, "call_id": "x" * 32, "result": {"content": []}}
        )
        assert stale.status_code == 409


def test_closing_a_session_revokes_its_executor_tokens(brain: BrainServer) -> None:
    client = brain.sdk()
    session = _create(client, [LOOKUP])
    executor = client._executors[session["id"]]
    client.close(session["id"])  # the SDK closes its executor too; a 401 there is expected
    token_headers = {"Authorization": f"Bearer {executor.client.token}"}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        response = httpx.post(f"{brain.url}/executors/{executor.id}/close", headers=token_headers)
        if response.status_code == 401:
            break
        time.sleep(0.05)
    assert response.status_code == 401
    assert history(brain, session["id"])[-1]["data"]["status"] == "closed"


def test_the_websocket_rpc_carries_calls_and_replies(brain: BrainServer) -> None:
    from websockets.sync.client import connect

    with brain.client() as api:
        credential = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]}).json()
    url = f"ws://{brain.config['listen']}/executors/{credential['id']}/rpc"
    with connect(url, subprotocols=["brain-rpc", f"brain-auth.{credential['token']}"]) as socket:  # type: ignore[list-item]
        assert socket.subprotocol == "brain-rpc"
        ready = json.loads(socket.recv(timeout=10))
        assert ready["type"] == "ready"
        config = {
            "model": MODEL,
            "tools": [],
            "bindings": [{"alias": "runtime", "executor": credential["id"], "runtime": [LOOKUP.descriptor()]}],
        }
        with brain.client() as api:
            session = api.post("/sessions", json={"harness": "instant", "config": config}).json()
        accepted = send_ok(brain, session["id"], 'tool:runtime_lookup {"q": "ws"}')
        command = json.loads(socket.recv(timeout=10))
        while command["type"] == "ping":
            command = json.loads(socket.recv(timeout=10))
        assert command["type"] == "call"
        assert command["scope"] == {"tenant_id": "acme", "session_id": session["id"], "call_id": command["call_id"]}
        reply = {"connection": ready["connection"], "call_id": command["call_id"]}
        socket.send(json.dumps({**reply, "progress": {"stage": "half"}}))
        socket.send(json.dumps({**reply, "result": {"content": [{"type": "text", "text": "over ws"}]}}))
        socket.send(json.dumps({**reply, "result": {"content": [{"type": "text", "text": "twice"}]}}))
        duplicate = json.loads(socket.recv(timeout=10))
        assert duplicate["type"] == "error" and duplicate["error"]["code"] == "conflict"
        (result,) = _tool_results(wait_for_turn_end(brain, session["id"], accepted["id"]))
        assert result == {
            "call_id": command["call_id"],
            "result": {"content": [{"type": "text", "text": "over ws"}]},
            "outcome": "ok",
        }


def test_the_websocket_rpc_refuses_browser_origins_and_bad_credentials(brain: BrainServer) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with brain.client() as api:
        credential = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP.descriptor()]}).json()
    url = f"ws://{brain.config['listen']}/executors/{credential['id']}/rpc"
    good = ["brain-rpc", f"brain-auth.{credential['token']}"]
    for subprotocols, origin in (
        (good, "https://evil.example"),
        (["brain-rpc", "brain-auth.wrong"], None),
        (["brain-rpc"], None),
    ):
        with pytest.raises(InvalidStatus):
            connect(url, subprotocols=subprotocols, origin=origin, open_timeout=10)  # type: ignore[arg-type]
