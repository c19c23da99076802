"""The admin's operator console through any instance of a fleet of real `runbrain` instances on
one real PostgreSQL: the live sessions list names each session's owner, and an operator logged
into another instance's admin watches the owner's live stream, interrupts, resumes and decides a
pending approval there (forwarded to the owner with the admin's cookies, signed); CSRF is still
enforced on the owner."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_history, wait_for_turn_end
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 3
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
PROMPT = 'tool:guarded_echo {"text": "launch"}'
STREAM_READ_SECONDS = 10.0


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path, zoo_url: str
) -> Callable[[str], BrainServer]:
    tool = {
        "name": "guarded_echo",
        "description": "Echo, after a person approves.",
        "input_schema": ECHO_SCHEMA,
        "url": zoo_url + "/echo",
        "tenants": ["acme"],
        "require_approval": True,
    }
    return fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_console",
        config={"tools": [tool]},
        environment={"BRAIN_SECRET_KEY": secrets.token_hex(32)},  # one admin session for the fleet
    )


def _read_stream(response: httpx.Response, until: Callable[[str], bool]) -> str:
    seen = ""
    deadline = time.monotonic() + STREAM_READ_SECONDS
    for chunk in response.iter_text():
        seen += chunk
        if until(seen) or time.monotonic() > deadline:
            break
    return seen


def _pending(server: BrainServer, session_id: str) -> dict[str, Any]:
    events = wait_for_history(server, session_id, lambda found: any(e["type"] == "approval.requested" for e in found))
    return next(event["data"] for event in events if event["type"] == "approval.requested")


def test_an_operator_on_another_instance_lists_watches_and_decides_a_session_its_owner_runs(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: a session owned by A, waiting for an approval; an operator of B's admin
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = create_session(a, tools=["guarded_echo"])["id"]
    accepted = send_ok(a, session_id, PROMPT)
    pending = _pending(a, session_id)
    create_superuser(b)
    base = f"/admin/sessions_app/session/{session_id}"
    with AdminClient(b) as operator:
        operator.login()

        # when
        live = operator.page("/admin/sessions_app/session/live/")
        with operator.http.stream("GET", base + "/stream/", headers={"accept": "text/event-stream"}) as stream:
            replayed = _read_stream(stream, lambda seen: "event: approval.requested" in seen)
        forged = operator.http.post(base + f"/approvals/{pending['approval_id']}/decide/", data={"decision": "approve"})
        decided = operator.post(base + f"/approvals/{pending['approval_id']}/decide/", {"decision": "approve"})
        events = wait_for_turn_end(a, session_id, accepted["id"])

    # then
    row = re.search(rf'data-session="{session_id}">(.*?)</tr>', live, re.DOTALL)
    assert row is not None, live[:3000]
    assert '<td class="live-owner">brain-a</td>' in row.group(1)
    assert "event: user.message" in replayed and "event: approval.requested" in replayed
    assert forged.status_code == 403
    assert decided.status_code == 302
    approvals = [event["data"] for event in events if event["type"] == "approval.decided"]
    assert [(item["decision"], item["decided_by"]) for item in approvals] == [("approved", "operator")]


def test_an_operator_on_another_instance_interrupts_and_resumes_the_owners_session(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = create_session(a)["id"]
    send_ok(a, session_id, "sleep:30")
    wait_for_history(a, session_id, lambda found: any(e["type"] == "session.status" for e in found))
    create_superuser(b)
    base = f"/admin/sessions_app/session/{session_id}"
    with AdminClient(b) as operator:
        operator.login()

        # when
        interrupted = operator.post(base + "/interrupt/")
        after_interrupt = _status(a, session_id, "interrupted")
        resumed = operator.post(base + "/resume/")
        after_resume = _status(a, session_id, "idle")

    # then
    assert (interrupted.status_code, resumed.status_code) == (302, 302)
    assert (after_interrupt, after_resume) == ("interrupted", "idle")


def _status(server: BrainServer, session_id: str, wanted: str) -> str:
    deadline = time.monotonic() + 20
    status = ""
    with server.client("alice") as api:
        while time.monotonic() < deadline:
            status = api.get(f"/sessions/{session_id}").json()["status"]
            if status == wanted:
                break
            time.sleep(0.05)
    return status


def test_an_operator_on_another_instance_decides_from_the_approvals_own_page(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: a session owned by A, waiting for an approval; an operator of B's admin on its page
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = create_session(a, tools=["guarded_echo"])["id"]
    accepted = send_ok(a, session_id, PROMPT)
    approval_id = _pending(a, session_id)["approval_id"]
    create_superuser(b)
    with AdminClient(b) as operator:
        operator.login()
        page = operator.page(f"/admin/sessions_app/approval/{approval_id}/change/")
        form = re.search(r'id="approval-decision" action="([^"]+)"', page)
        assert form is not None, page[:3000]

        # when the operator rejects it with the page's form
        decided = operator.post(form.group(1), {"decision": "reject", "reason": "not today"})
        events = wait_for_turn_end(a, session_id, accepted["id"])

    # then the form went to the session's route, which B forwarded to the owner, A
    assert form.group(1) == f"/admin/sessions_app/session/{session_id}/approvals/{approval_id}/decide/"
    assert decided.status_code == 302
    approvals = [event["data"] for event in events if event["type"] == "approval.decided"]
    assert [(item["decision"], item["decided_by"], item["reason"]) for item in approvals] == [
        ("rejected", "operator", "not today")
    ]
