"""The operator console in Chromium against a real runbrain running the `loop` harness on a
scripted model: an operator watches a turn stream into the session page (deltas first, then a
gated tool call), approves the call from the page and sees its result and the model's answer
arrive; a configuration change and a steer appear as rows of their own, as the page reloaded reads
them; the layout fixes hold on the pages a new operator opens first."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.admin.support import create_superuser
from tests.browser.test_admin_in_a_browser import log_in
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, make_server, wait_for_turn_end
from tests.tools.servers import ToolZoo

pytestmark = pytest.mark.client

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
ASK = "Please launch it when an operator agrees."
BEFORE_CALL = "I will ask an operator first, then I call the launch tool and wait for the answer."
AFTER_CALL = "The launch went through and the echo came back."
STEER = "Answer in French from now on."
DELTA_MS = 120  # one word a delta, slow enough that the page shows the reply growing
SCRIPT = {
    "chunk_words": 1,
    "rules": [
        {
            "match": "launch it",
            "reply": BEFORE_CALL,
            "delay_ms": DELTA_MS,
            "tool_calls": [{"name": "guarded_echo", "arguments": {"text": "launch"}}],
        },
        {"match": "launch", "after_tool": True, "reply": AFTER_CALL, "delay_ms": DELTA_MS},
    ],
}


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def console_brain(
    tmp_path_factory: pytest.TempPathFactory, provider: ScriptedProvider, zoo_server: tuple[ToolZoo, Any]
) -> Iterator[BrainServer]:
    tool = {
        "name": "guarded_echo",
        "description": "Echo, after a person approves.",
        "input_schema": ECHO_SCHEMA,
        "url": zoo_server[1].url + "/echo",
        "tenants": ["acme"],
        "require_approval": True,
    }
    server = make_server(
        tmp_path_factory.mktemp("brain"),
        harnesses={"loop": LOOP_HARNESS},
        providers=provider.providers(),
        tools=[tool],
    )
    server.start()
    create_superuser(server)
    yield server
    server.stop(signal.SIGKILL)


def test_an_operator_watches_a_turn_stream_approves_the_gated_call_and_sees_the_result_arrive(
    page: Any, console_brain: BrainServer, provider: ScriptedProvider, zoo: ToolZoo, screenshots: Any
) -> None:
    # given: the session's page, open before the turn starts
    provider.set_script(SCRIPT)
    client = console_brain.sdk()
    session_id = str(
        client.create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": ["guarded_echo"]}})["id"]
    )
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    log_in(page, console_brain)
    page.goto(f"{console_brain.url}/admin/sessions_app/session/{session_id}/change/")
    page.wait_for_selector("#transcript[data-live=open]")
    page.evaluate("() => { window.sameDocument = true; }")

    # when: a message starts a turn; the page is never reloaded while it streams
    accepted = client.send(session_id, {"type": "user.message", "text": ASK})
    page.wait_for_selector('li[data-type="user.message"]')
    partial = page.wait_for_function(
        """(whole) => {
            const live = document.querySelector(".entry-live .entry-text");
            const text = live ? live.textContent : "";
            return text.length > 0 && text.length < whole.length && whole.startsWith(text) ? text : null;
        }""",
        arg=BEFORE_CALL,
    ).json_value()
    screenshots.take(page, "streaming")
    page.wait_for_selector('li[data-type="approval.requested"]')
    form = page.wait_for_selector("#session-approvals form.approval-decision")
    stayed = page.evaluate("() => window.sameDocument === true")
    requested = page.inner_text('li[data-type="approval.requested"] .entry-text')
    streamed_message = page.inner_text('li[data-type="assistant.message"] .entry-text')
    screenshots.take(page, "approval")
    assert zoo.calls("/echo") == []  # nothing ran before the decision
    form.query_selector('input[name="reason"]').fill("looks safe")
    form.query_selector("button.approval-approve").click()
    page.wait_for_selector("ul.messagelist li.success")
    page.wait_for_selector('li[data-type="tool.result"]')
    page.wait_for_function(
        """(text) => [...document.querySelectorAll('li[data-type="assistant.message"] .entry-text')]
            .some(node => node.textContent === text)""",
        arg=AFTER_CALL,
    )
    screenshots.take(page, "result")

    # then
    assert stayed is True and 0 < len(partial) < len(BEFORE_CALL)
    assert requested == 'guarded_echo({"text":"launch"})'
    assert streamed_message == BEFORE_CALL
    assert page.inner_text("ul.messagelist li.success") == "The guarded_echo call was approved."
    decided = page.inner_text('li[data-type="approval.decided"] .entry-text')
    assert decided == "guarded_echo: approved by operator"
    assert "why looks safe" in page.inner_text('li[data-type="approval.decided"] .entry-details')
    assert "launch" in page.inner_text('li[data-type="tool.result"] .entry-text')
    assert page.query_selector_all("#session-approvals form.approval-decision") == []
    events = wait_for_turn_end(console_brain, session_id, str(accepted["id"]))
    assert [e["data"]["decided_by"] for e in events if e["type"] == "approval.decided"] == ["operator"]
    assert len(zoo.calls("/echo")) == 1
    assert errors == []


def test_an_operator_watching_sees_a_configuration_change_and_a_steer_arrive_as_rows_of_their_own(
    page: Any, console_brain: BrainServer, provider: ScriptedProvider, screenshots: Any
) -> None:
    # given: an idle session's page, open
    provider.set_script({"rules": []})
    client = console_brain.sdk()
    session_id = str(client.create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}})["id"])
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    log_in(page, console_brain)
    page.goto(f"{console_brain.url}/admin/sessions_app/session/{session_id}/change/")
    page.wait_for_selector("#transcript[data-live=open]")
    page.evaluate("() => { window.sameDocument = true; }")

    # when: the configuration changes, then a steer is sent; the page is never reloaded
    change = {
        "model": "openai/gpt-5-mini",
        "reasoning_effort": "low",
        "tools": ["guarded_echo"],
        "instructions": "Be brief.",
    }
    client.send(session_id, {"type": "session.configure", "config": change})
    page.wait_for_selector('li[data-type="session.configure"]')
    live_change = _label_and_text(page, "session.configure")
    steer = client.send(session_id, {"type": "user.message", "text": STEER, "delivery": "steer"})
    page.wait_for_selector('li[data-type="user.message"]')
    live_steer = _label_and_text(page, "user.message")
    page.wait_for_selector('li[data-type="assistant.message"]')
    stayed = page.evaluate("() => window.sameDocument === true")
    screenshots.take(page, "configured-and-steered")
    wait_for_turn_end(console_brain, session_id, str(steer["id"]))
    page.reload()
    reloaded_change = _label_and_text(page, "session.configure")
    reloaded_steer = _label_and_text(page, "user.message")

    # then
    assert stayed is True
    assert live_change == (
        "CONFIGURATION CHANGED",  # the label is uppercased by the page's style
        'model → openai/gpt-5-mini · reasoning effort → low · tools → guarded_echo · instructions → "Be brief."',
    )
    assert live_steer == ("USER (STEER)", STEER)
    assert (reloaded_change, reloaded_steer) == (live_change, live_steer)
    assert errors == []


# Each transcript row as [type, label, text, details].
ROWS_JS = """items => items.map(item => [
    item.getAttribute("data-type"),
    ...[".entry-label", ".entry-text", ".entry-details"].map(part => item.querySelector(part)?.textContent ?? ""),
])"""


def _frame(type_: str, data: dict[str, Any], cursor: str = "") -> str:
    envelope = {"id": "e" * 32, "type": type_, "time": "2026-01-01T00:00:00Z", "data": data}
    return (f"id: {cursor}\n" if cursor else "") + f"event: {type_}\ndata: {json.dumps(envelope)}\n\n"


def test_every_type_of_event_shows_live_a_type_the_page_does_not_know_as_its_json(
    page: Any, console_brain: BrainServer
) -> None:
    # given: the page of a session whose stream (fabricated: no tool here emits events or progress,
    # and no server sends a type of the future yet) carries a call's progress, an extension event
    # and a type unknown to the page
    session_id = str(
        console_brain.sdk().create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}})["id"]
    )
    frames = [
        _frame("tool.call", {"id": "tc1", "name": "build", "arguments": {}}, "c1"),
        _frame("tool.progress", {"call_id": "tc1", "data": {"percent": 50}}),
        _frame("tool.progress", {"call_id": "tc1", "data": {"percent": 90}}),
        _frame("tool.event", {"call_id": "tc1", "environment": "ci", "kind": "step.done", "data": {"n": 2}}, "c2"),
        _frame("session.future", {"anything": [1, 2]}, "c3"),
    ]
    served: list[str] = []

    def stream(route: Any) -> None:
        served.append(route.request.url)
        body = "".join(frames) if len(served) == 1 else ""  # a reconnection hears nothing new
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body)

    page.route("**/stream/*", stream)
    log_in(page, console_brain)

    # when
    page.goto(f"{console_brain.url}/admin/sessions_app/session/{session_id}/change/")
    page.wait_for_selector('li[data-type="session.future"]')
    rows = page.eval_on_selector_all("#transcript li.transcript-entry", ROWS_JS)
    deadline = time.monotonic() + 10
    while len(served) < 2 and time.monotonic() < deadline:  # the stream ended: the page reopens it
        page.wait_for_timeout(100)

    # then: one progress row for the call, its latest; the unknown type as a generic row
    assert rows == [
        ["tool.call", "Tool call", "build({})", "call tc1"],
        ["tool.progress", "Tool progress", '{"percent":90}', "call tc1"],
        ["tool.event", "Tool event", 'step.done: {"n":2}', "call tc1 · environment ci"],
        ["session.future", "session.future", '{"anything":[1,2]}', ""],
    ]
    stream_url = f"{console_brain.url}/admin/sessions_app/session/{session_id}/stream/"
    assert served[:2] == [stream_url, stream_url + "?after=c3"]  # after the newest event seen


def test_the_pages_an_operator_opens_first_fit_their_values_and_log_no_error(
    page: Any, console_brain: BrainServer, provider: ScriptedProvider, screenshots: Any
) -> None:
    # given: a session with a decided approval
    provider.set_script(SCRIPT)
    client = console_brain.sdk()
    session_id = str(
        client.create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": ["guarded_echo"]}})["id"]
    )
    accepted = client.send(session_id, {"type": "user.message", "text": ASK})
    approval_id = _approval_id(console_brain, session_id)
    with console_brain.client("bob") as bob:
        bob.post(f"/sessions/{session_id}/approvals/{approval_id}", json={"decision": "reject", "reason": "no"})
    wait_for_turn_end(console_brain, session_id, str(accepted["id"]))
    errors: list[str] = []
    missing: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("response", lambda response: missing.append(response.url) if response.status >= 400 else None)
    log_in(page, console_brain)

    # when
    page.goto(f"{console_brain.url}/admin/sessions_app/approval/")
    screenshots.take(page, "approvals")
    id_cell = page.query_selector("#result_list .approval-id")
    id_lines = id_cell.evaluate(
        "node => Math.round(node.getBoundingClientRect().height / parseFloat(getComputedStyle(node).lineHeight))"
    )
    page.goto(f"{console_brain.url}/admin/tools_app/toolbinding/add/")
    box = page.query_selector("#id_max_output_bytes")
    box_value = box.input_value()
    box_fits = box.evaluate("node => node.scrollWidth <= node.clientWidth")
    page.goto(f"{console_brain.url}/admin/sessions_app/session/{session_id}/change/")
    screenshots.take(page, "session")
    overlap = page.evaluate(
        """() => {
            const title = document.querySelector("#content h2").getBoundingClientRect();
            return [...document.querySelectorAll(".object-tools a")].some(link => {
                const r = link.getBoundingClientRect();
                return r.left < title.right && title.left < r.right && r.top < title.bottom && title.top < r.bottom;
            });
        }"""
    )
    icon = page.evaluate("() => document.querySelector('link[rel=icon]').href")

    # then
    assert id_lines <= 4  # was one character a line
    assert (box_value, box_fits) == ("1048576", True)
    assert overlap is False
    assert page.request.get(icon).status == 200
    assert errors == [] and missing == []


def _label_and_text(page: Any, event_type: str) -> tuple[str, str]:
    row = f'li[data-type="{event_type}"]'
    return page.inner_text(f"{row} .entry-label"), page.inner_text(f"{row} .entry-text")


def _approval_id(server: BrainServer, session_id: str) -> str:
    deadline = time.monotonic() + 30
    with server.client("alice") as api:
        while time.monotonic() < deadline:
            events = api.get(f"/sessions/{session_id}/events", params={"limit": 1000}).json()["events"]
            for event in events:
                if event["type"] == "approval.requested":
                    return str(event["data"]["approval_id"])
            time.sleep(0.05)
    raise AssertionError("no approval was requested within 30 s")
