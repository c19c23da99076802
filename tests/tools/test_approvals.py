"""Approval gates in real sessions: a call of a tool that requires approval waits for a person's
decision (POST /sessions/{id}/approvals/{approval_id}); approve dispatches it, a rejection, an
expiry, an interrupt or a restart never reaches the tool."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    send_ok,
    wait_for_history,
    wait_for_status,
    wait_for_turn_end,
)
from tests.support.deciders import config_token_name
from tests.tools.servers import ToolZoo

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
PROMPT = 'tool:guarded_echo {"text": "launch"}'


def _server(brain_factory: Callable[..., BrainServer], zoo_url: str, **fields: Any) -> BrainServer:
    tool = {
        "name": "guarded_echo",
        "description": "Echo, after a person approves.",
        "input_schema": ECHO_SCHEMA,
        "url": zoo_url + "/echo",
        "tenants": ["acme"],
        "require_approval": True,
        **fields,
    }
    return brain_factory(tools=[tool])


def _pending(server: BrainServer, session_id: str) -> dict[str, Any]:
    """The data of the session's first approval.requested event, once it is recorded."""
    events = wait_for_history(server, session_id, lambda found: any(e["type"] == "approval.requested" for e in found))
    return next(event["data"] for event in events if event["type"] == "approval.requested")


def _decide(server: BrainServer, session_id: str, approval_id: str, name: str = "bob", **body: Any) -> httpx.Response:
    with server.client(name) as client:
        return client.post(f"/sessions/{session_id}/approvals/{approval_id}", json=body)


def _of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == type_]


def _text(result: dict[str, Any]) -> str:
    return " ".join(item["text"] for item in result["content"])


@pytest.fixture
def guarded(brain_factory: Callable[..., BrainServer], zoo_url: str) -> BrainServer:
    return _server(brain_factory, zoo_url)


def test_an_approved_call_runs_and_its_result_reaches_the_model(guarded: BrainServer, zoo: ToolZoo) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])
    assert zoo.calls("/echo") == []  # nothing runs before the decision

    # when
    response = _decide(guarded, session["id"], pending["approval_id"], decision="approve")
    events = wait_for_turn_end(guarded, session["id"], accepted["id"])

    # then
    assert response.status_code == 200, response.text
    approval = response.json()
    assert approval["status"] == "approved"
    assert approval["decided_by"] == config_token_name(guarded, "bob")
    assert approval["call_id"] == pending["call_id"]
    assert approval["arguments"] == {"text": "launch"}
    call = _of_type(events, "tool.call")[0]
    assert pending["call_id"] == call["id"]
    assert pending["tool"] == "guarded_echo"
    assert pending["arguments"] == {"text": "launch"}
    assert pending["expires_at"].endswith("Z")
    types = [event["type"] for event in events if event["type"].startswith(("tool.", "approval."))]
    assert types == ["tool.call", "approval.requested", "approval.decided", "tool.result"]
    decided = _of_type(events, "approval.decided")[0]
    assert (decided["decision"], decided["decided_by"]) == ("approved", config_token_name(guarded, "bob"))
    result = _of_type(events, "tool.result")[0]
    assert result["outcome"] == "ok"
    assert _text(result["result"]) == "launch"
    assert len(zoo.calls("/echo")) == 1
    assert "launch" in _of_type(events, "assistant.message")[0]["text"]
    assert events[-1]["data"]["status"] == "idle"


def test_deciding_twice_is_a_conflict(guarded: BrainServer, zoo: ToolZoo) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])
    assert _decide(guarded, session["id"], pending["approval_id"], decision="approve").status_code == 200
    wait_for_turn_end(guarded, session["id"], accepted["id"])

    # when
    again = _decide(guarded, session["id"], pending["approval_id"], decision="reject")

    # then
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert len(zoo.calls("/echo")) == 1


def test_a_rejected_call_is_an_error_result_with_the_reason_and_never_runs(guarded: BrainServer, zoo: ToolZoo) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])

    # when
    response = _decide(guarded, session["id"], pending["approval_id"], decision="reject", reason="too risky")
    events = wait_for_turn_end(guarded, session["id"], accepted["id"])

    # then
    assert response.status_code == 200, response.text
    assert (response.json()["status"], response.json()["reason"]) == ("rejected", "too risky")
    result = _of_type(events, "tool.result")[0]
    assert result["outcome"] == "error"
    assert result["result"]["is_error"] is True
    assert "unknown_outcome" not in result["result"]
    assert f"rejected by {config_token_name(guarded, 'bob')}: too risky" in _text(result["result"])
    decided = _of_type(events, "approval.decided")[0]
    assert (decided["decision"], decided["reason"]) == ("rejected", "too risky")
    assert (
        f"rejected by {config_token_name(guarded, 'bob')}: too risky"
        in _of_type(events, "assistant.message")[0]["text"]
    )
    assert zoo.calls("/echo") == []
    assert events[-1]["data"]["status"] == "idle"


def test_an_approval_nobody_decides_expires_as_an_error_result(
    brain_factory: Callable[..., BrainServer], zoo_url: str, zoo: ToolZoo
) -> None:
    # given
    server = _server(brain_factory, zoo_url, approval_timeout_seconds=1)
    session = create_session(server, tools=["guarded_echo"])
    accepted = send_ok(server, session["id"], PROMPT)
    pending = _pending(server, session["id"])

    # when
    events = wait_for_turn_end(server, session["id"], accepted["id"])
    late = _decide(server, session["id"], pending["approval_id"], decision="approve")

    # then
    result = _of_type(events, "tool.result")[0]
    assert result["outcome"] == "error"
    assert "approval expired" in _text(result["result"])
    assert _of_type(events, "approval.decided")[0]["decision"] == "expired"
    assert late.status_code == 409
    assert zoo.calls("/echo") == []


def test_an_interrupt_cancels_a_pending_approval(guarded: BrainServer, zoo: ToolZoo) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])

    # when
    with guarded.client() as client:
        assert client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"}).status_code == 202
    events = wait_for_turn_end(guarded, session["id"], accepted["id"])
    late = _decide(guarded, session["id"], pending["approval_id"], decision="approve")

    # then
    assert _of_type(events, "tool.result")[0]["outcome"] == "cancelled"
    decided = _of_type(events, "approval.decided")[0]
    assert (decided["decision"], decided["decided_by"]) == ("cancelled", "brain")
    assert events[-1]["data"]["status"] == "interrupted"
    assert late.status_code == 409
    assert zoo.calls("/echo") == []


@pytest.mark.parametrize("stop", ["kill", "terminate"], ids=["kill_case", "graceful_case"])
def test_a_restart_while_an_approval_is_pending_interrupts_the_turn_and_never_runs_the_call(
    guarded: BrainServer, zoo: ToolZoo, stop: str
) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])

    # when
    if stop == "kill":
        guarded.kill()
    else:
        guarded.stop()
    guarded.start()
    wait_for_status(guarded, session["id"], "interrupted")
    late = _decide(guarded, session["id"], pending["approval_id"], decision="approve")
    with guarded.client() as client:
        resumed = client.post(f"/sessions/{session['id']}/resume")
    follow_up = send_ok(guarded, session["id"], "after the restart")
    events = wait_for_turn_end(guarded, session["id"], follow_up["id"])

    # then
    assert late.status_code == 409
    assert resumed.status_code == 200, resumed.text
    decided = _of_type(events, "approval.decided")
    assert [item["decision"] for item in decided] == ["cancelled"]
    turn = [event for event in events if event.get("input_id") == accepted["id"]]
    assert turn[-1]["data"]["status"] == "interrupted"
    assert "echo: after the restart" in _of_type(events, "assistant.message")[-1]["text"]
    assert events[-1]["data"]["status"] == "idle"
    assert zoo.calls("/echo") == []


def test_the_approval_request_arrives_on_the_stream(guarded: BrainServer) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    stream = open_stream(guarded, session["id"])

    # when
    try:
        send_ok(guarded, session["id"], PROMPT)
        live = stream.wait_for_event("approval.requested")
    finally:
        stream.close()

    # then
    stored = _pending(guarded, session["id"])
    assert [event["data"] for event in live if event["type"] == "approval.requested"] == [stored]
    assert stored["tool"] == "guarded_echo"
    _decide(guarded, session["id"], stored["approval_id"], decision="reject")


def test_who_may_decide(guarded: BrainServer, zoo: ToolZoo) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    approval_id = _pending(guarded, session["id"])["approval_id"]

    # when
    reader = _decide(guarded, session["id"], approval_id, name="reader", decision="approve")
    stranger = _decide(guarded, session["id"], approval_id, name="charlie", decision="approve")
    unknown = _decide(guarded, session["id"], "0" * 32, decision="approve")
    bad_decision = _decide(guarded, session["id"], approval_id, decision="maybe")
    extra_field = _decide(guarded, session["id"], approval_id, decision="approve", by="me")
    long_reason = _decide(guarded, session["id"], approval_id, decision="reject", reason="x" * 1001)
    still_pending = [event for event in history(guarded, session["id"]) if event["type"] == "approval.decided"]
    approved = _decide(guarded, session["id"], approval_id, name="alice", decision="approve")
    wait_for_turn_end(guarded, session["id"], accepted["id"])

    # then
    assert reader.status_code == 403
    assert stranger.status_code == 404
    assert unknown.status_code == 404
    assert [bad_decision.status_code, extra_field.status_code, long_reason.status_code] == [400, 400, 400]
    assert bad_decision.json()["error"]["code"] == "invalid_request"
    assert still_pending == []
    assert approved.status_code == 200
    assert approved.json()["decided_by"] == config_token_name(guarded, "alice")
    assert len(zoo.calls("/echo")) == 1


def test_a_tool_without_require_approval_runs_at_once(
    brain_factory: Callable[..., BrainServer], zoo_url: str, zoo: ToolZoo
) -> None:
    # given
    server = _server(brain_factory, zoo_url, require_approval=False)
    session = create_session(server, tools=["guarded_echo"])

    # when
    accepted = send_ok(server, session["id"], PROMPT)
    events = wait_for_turn_end(server, session["id"], accepted["id"])

    # then
    assert [event["type"] for event in events if event["type"].startswith("approval.")] == []
    assert _of_type(events, "tool.result")[0]["outcome"] == "ok"
    assert len(zoo.calls("/echo")) == 1
