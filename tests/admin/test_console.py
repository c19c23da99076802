"""The operator console in the admin, over HTTP against a real server: pending approvals decided
from the admin as the logged-in operator, approval events, configuration changes and steers as
readable transcript rows, resume and interrupt, the live transcript's SSE stream (admin session
auth, no API token), and the list of live sessions; CSRF enforced and non-staff refused
throughout."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.admin.support import (
    VIEWER,
    VIEWER_PASSWORD,
    AdminClient,
    create_superuser,
    create_viewer,
    transcript_rows,
)
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import (
    BrainServer,
    create_session,
    send_ok,
    wait_for_history,
    wait_for_status,
    wait_for_turn_end,
)
from tests.tools.servers import ToolZoo

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
PROMPT = 'tool:guarded_echo {"text": "launch"}'
STREAM_READ_SECONDS = 10.0  # how long a test reads the live stream for the frames it expects
STEER = "Answer in French from now on"


@pytest.fixture
def guarded(brain_factory: Callable[..., BrainServer], zoo_url: str) -> BrainServer:
    tool = {
        "name": "guarded_echo",
        "description": "Echo, after a person approves.",
        "input_schema": ECHO_SCHEMA,
        "url": zoo_url + "/echo",
        "tenants": ["acme"],
        "require_approval": True,
    }
    server = brain_factory(tools=[tool])
    create_superuser(server)
    return server


def _pending(server: BrainServer, session_id: str) -> dict[str, Any]:
    events = wait_for_history(server, session_id, lambda found: any(e["type"] == "approval.requested" for e in found))
    return next(event["data"] for event in events if event["type"] == "approval.requested")


def _decide_path(approval_id: str) -> str:
    return f"/admin/sessions_app/approval/{approval_id}/decide/"


def _of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == type_]


def _approval_status(server: BrainServer, session_id: str, approval_id: str) -> str:
    with AdminClient(server) as operator:
        page = operator.login().page(f"/admin/sessions_app/approval/{approval_id}/change/")
    match = re.search(r'field-status.*?<div class="readonly">([a-z]+)</div>', page, re.DOTALL)
    assert match is not None, page[:3000]
    return match.group(1)


def test_an_operator_approves_a_pending_call_from_the_session_page_and_it_runs_as_decided_by_them(
    guarded: BrainServer, zoo: ToolZoo
) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])
    with AdminClient(guarded) as operator:
        operator.login()
        page = operator.page(f"/admin/sessions_app/session/{session['id']}/change/")
        assert f'data-approval="{pending["approval_id"]}"' in page  # the decision form is on the page

        # when
        action = f"/admin/sessions_app/session/{session['id']}/approvals/{pending['approval_id']}/decide/"
        assert f'action="{action}"' in page
        response = operator.post(action, {"decision": "approve", "reason": "fine", "back": "session"})

    # then
    assert response.status_code == 302, response.text[:2000]
    assert response.headers["location"] == f"/admin/sessions_app/session/{session['id']}/change/"
    events = wait_for_turn_end(guarded, session["id"], accepted["id"])
    decided = _of_type(events, "approval.decided")[0]
    assert (decided["decision"], decided["decided_by"], decided["reason"]) == ("approved", "operator", "fine")
    assert _of_type(events, "tool.result")[0]["outcome"] == "ok"
    assert len(zoo.calls("/echo")) == 1


def test_an_operator_rejects_with_a_reason_the_model_sees_and_the_tool_never_runs(
    guarded: BrainServer, zoo: ToolZoo
) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])

    # when
    with AdminClient(guarded) as operator:
        response = operator.login().post(_decide_path(pending["approval_id"]), {"decision": "reject", "reason": "no"})

    # then
    assert response.status_code == 302
    assert response.headers["location"] == f"/admin/sessions_app/approval/{pending['approval_id']}/change/"
    events = wait_for_turn_end(guarded, session["id"], accepted["id"])
    result = _of_type(events, "tool.result")[0]
    assert result["result"]["is_error"] is True
    assert "rejected by operator: no" in result["result"]["content"][0]["text"]
    assert zoo.calls("/echo") == []


def test_a_decision_without_the_csrf_token_or_by_a_viewer_is_refused_and_the_call_still_waits(
    guarded: BrainServer,
) -> None:
    # given
    create_viewer(guarded)
    session = create_session(guarded, tools=["guarded_echo"])
    send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])
    path = _decide_path(pending["approval_id"])

    # when
    with AdminClient(guarded) as operator:
        operator.login()
        no_token = operator.http.post(path, data={"decision": "approve"})
        as_get = operator.get(path)
    with AdminClient(guarded) as viewer:
        viewer_page = viewer.login(VIEWER, VIEWER_PASSWORD).page(f"/admin/sessions_app/session/{session['id']}/change/")
        by_viewer = viewer.post(path, {"decision": "approve"})
    anonymous = httpx.post(guarded.url + path, data={"decision": "approve"})

    # then
    assert no_token.status_code == 403
    assert as_get.status_code == 405
    assert by_viewer.status_code == 403
    assert "approval-approve" not in viewer_page  # no buttons for who may not decide
    assert anonymous.status_code == 403  # Django's CSRF check comes before the login redirect
    assert _approval_status(guarded, session["id"], pending["approval_id"]) == "pending"


def test_approval_events_read_as_rows_naming_the_tool_its_arguments_who_decided_and_why(
    guarded: BrainServer,
) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    accepted = send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])
    with AdminClient(guarded) as operator:
        operator.login().post(_decide_path(pending["approval_id"]), {"decision": "reject", "reason": "not today"})
        wait_for_turn_end(guarded, session["id"], accepted["id"])

        # when
        page = operator.page(f"/admin/sessions_app/session/{session['id']}/change/")

    # then
    rows = dict(transcript_rows(page))
    assert rows["approval.requested"] == 'guarded_echo({"text":"launch"})'
    assert rows["approval.decided"] == "guarded_echo: rejected by operator"
    assert "why not today" in page
    assert '"approval_id"' not in page  # no raw JSON row


def test_a_configuration_change_and_a_steer_read_as_rows_of_their_own(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, zoo_url: str
) -> None:
    # given a loop session (its harness steers) and an operator
    tool = {
        "name": "guarded_echo",
        "description": "Echo.",
        "input_schema": ECHO_SCHEMA,
        "url": zoo_url + "/echo",
        "tenants": ["acme"],
    }
    server = brain_factory(harnesses={"loop": LOOP_HARNESS}, providers=scripted_provider.providers(), tools=[tool])
    create_superuser(server)
    with server.client() as alice:
        body = {"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
        session = alice.post("/sessions", json=body).json()
        change = {"model": "openai/gpt-5-mini", "instructions": "Be brief.\nBe kind.", "reasoning_effort": "low"}
        configured = alice.post(
            f"/sessions/{session['id']}/events",
            json={"type": "session.configure", "config": {**change, "tools": ["guarded_echo"]}},
        )
    assert configured.status_code == 202, configured.text
    steer = send_ok(server, session["id"], STEER, delivery="steer")
    wait_for_turn_end(server, session["id"], steer["id"])

    # when
    with AdminClient(server) as operator:
        page = operator.login().page(f"/admin/sessions_app/session/{session['id']}/change/")

    # then
    rows = transcript_rows(page)
    assert [text for kind, text in rows if kind == "session.configure"] == [
        "model → openai/gpt-5-mini · reasoning effort → low · tools → guarded_echo"
        ' · instructions → "Be brief.\\nBe kind."'
    ]
    labels = re.findall(r'data-type="([^"]+)">\s*<div class="entry-meta">\s*<span class="entry-label">([^<]+)<', page)
    assert ("session.configure", "Configuration changed") in labels
    assert [label for kind, label in labels if kind == "user.message"] == ["User (steer)"]
    assert ("user.message", STEER) in rows
    assert '"reasoning_effort"' not in page  # no raw JSON row


def test_a_config_token_decides_under_its_digest_not_its_environment_variable(guarded: BrainServer) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    send_ok(guarded, session["id"], PROMPT)
    pending = _pending(guarded, session["id"])

    # when
    with guarded.client("bob") as bob:
        response = bob.post(
            f"/sessions/{session['id']}/approvals/{pending['approval_id']}", json={"decision": "approve"}
        )

    # then
    assert response.status_code == 200, response.text
    digest = hashlib.sha256(guarded.tokens["bob"].encode()).hexdigest()
    assert response.json()["decided_by"] == f"token {digest[:12]}"
    assert "TOKEN" not in response.json()["decided_by"]


def test_the_session_page_interrupts_and_resumes_with_one_button_each(guarded: BrainServer) -> None:
    # given
    session = create_session(guarded, tools=["guarded_echo"])
    send_ok(guarded, session["id"], PROMPT)
    _pending(guarded, session["id"])
    base = f"/admin/sessions_app/session/{session['id']}"
    with AdminClient(guarded) as operator:
        page = operator.login().page(base + "/change/")
        assert 'id="session-interrupt"' in page and 'id="session-resume"' in page

        # when
        interrupted = operator.post(base + "/interrupt/")
        status_after_interrupt = wait_for_status(guarded, session["id"], "interrupted")["status"]
        resumed = operator.post(base + "/resume/")
        status_after_resume = wait_for_status(guarded, session["id"], "idle")["status"]
        forged = operator.http.post(base + "/resume/")

    # then
    assert (interrupted.status_code, resumed.status_code) == (302, 302)
    assert (status_after_interrupt, status_after_resume) == ("interrupted", "idle")
    assert forged.status_code == 403


def _read_stream(response: httpx.Response, until: Callable[[str], bool]) -> str:
    seen = ""
    deadline = time.monotonic() + STREAM_READ_SECONDS
    for chunk in response.iter_text():
        seen += chunk
        if until(seen) or time.monotonic() > deadline:
            break
    return seen


def test_the_live_transcript_streams_events_and_deltas_to_staff_only_and_never_needs_a_token(
    guarded: BrainServer,
) -> None:
    # given
    create_viewer(guarded)
    session = create_session(guarded)
    path = f"/admin/sessions_app/session/{session['id']}/stream/"
    with AdminClient(guarded) as viewer:
        viewer.login(VIEWER, VIEWER_PASSWORD)
        page = viewer.page(f"/admin/sessions_app/session/{session['id']}/change/")

        # when
        with viewer.http.stream("GET", path, headers={"accept": "text/event-stream"}) as stream:
            send_ok(guarded, session["id"], "hello there")
            frames = _read_stream(stream, lambda seen: "event: assistant.message" in seen)
            content_type = stream.headers["content-type"]
    anonymous = httpx.get(guarded.url + path, headers={"accept": "text/event-stream"})
    forged = httpx.get(guarded.url + path, cookies={"sessionid": "0" * 32})

    # then
    assert f'data-stream="{path}"' in page
    assert content_type == "text/event-stream"
    assert "event: user.message" in frames and "event: assistant.delta" in frames
    assert "event: assistant.message" in frames
    for value in guarded.tokens.values():
        assert value not in page and value not in frames
    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (403, "forbidden")
    assert forged.status_code == 403


def test_the_live_sessions_page_lists_each_loaded_session_with_status_owner_and_age(guarded: BrainServer) -> None:
    # given
    create_viewer(guarded)
    session = create_session(guarded)
    send_ok(guarded, session["id"], "hello")
    wait_for_status(guarded, session["id"], "idle")

    # when
    with AdminClient(guarded) as viewer:
        page = viewer.login(VIEWER, VIEWER_PASSWORD).page("/admin/sessions_app/session/live/")
        changelist = viewer.page("/admin/sessions_app/session/")
    anonymous = httpx.get(guarded.url + "/admin/sessions_app/session/live/")

    # then
    row = re.search(rf'<tr class="live-session" data-session="{session["id"]}">(.*?)</tr>', page, re.DOTALL)
    assert row is not None, page[:3000]
    assert '<td class="live-status">idle</td>' in row.group(1)
    assert '<td class="live-owner">this server</td>' in row.group(1)
    assert re.search(r'<td class="live-age"[^>]*>\d+\xa0(minute|second)', row.group(1)) or "0\xa0minutes" in row.group(
        1
    )
    assert "/admin/sessions_app/session/live/" in changelist
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous.headers["location"]


def test_every_admin_page_names_its_icon_and_the_icon_is_served(guarded: BrainServer) -> None:
    # when
    with AdminClient(guarded) as operator:
        page = operator.login().page("/admin/")
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page)

    # then
    assert icon is not None
    assert httpx.get(guarded.url + icon.group(1)).status_code == 200
