"""A delete of a session whose tool call waits for approval: the approval is cancelled (the
stream sees it), the call never reaches the tool, and deciding it afterwards is 404."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.fixtures.server import BrainServer, create_session, open_stream, send_ok, wait_for_history
from tests.support.client import delete_session
from tests.tools.servers import ToolZoo

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def test_a_delete_cancels_a_pending_approval_and_the_call_never_runs(
    brain_factory: Callable[..., BrainServer], zoo_url: str, zoo: ToolZoo
) -> None:
    # given: a call waiting for a person's decision
    tool = {
        "name": "guarded_echo",
        "description": "Echo, after a person approves.",
        "input_schema": ECHO_SCHEMA,
        "url": zoo_url + "/echo",
        "tenants": ["acme"],
        "require_approval": True,
    }
    server = brain_factory(tools=[tool])
    session = create_session(server, tools=["guarded_echo"])
    send_ok(server, session["id"], 'tool:guarded_echo {"text": "launch"}')
    events = wait_for_history(
        server, session["id"], lambda found: any(e["type"] == "approval.requested" for e in found)
    )
    pending = next(event["data"] for event in events if event["type"] == "approval.requested")
    stream = open_stream(server, session["id"])

    # when
    delete_session(server.sdk(), session["id"])

    # then: the stream saw the approval cancelled before it ended
    assert stream.wait_ended()
    decided = [e["data"] for e in stream.retained() if e["type"] == "approval.decided"]
    assert [(d["approval_id"], d["decision"]) for d in decided] == [(pending["approval_id"], "cancelled")]
    # and: the tool was never called, and the approval cannot be decided any more
    with server.client("bob") as client:
        late = client.post(
            f"/sessions/{session['id']}/approvals/{pending['approval_id']}", json={"decision": "approve"}
        )
    assert (late.status_code, late.json()["error"]["code"]) == (404, "not_found")
    assert zoo.calls("/echo") == []
