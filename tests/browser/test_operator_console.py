"""The operator console in Chromium against a real runbrain running the `loop` harness on a
scripted model: an operator watches a turn stream into the session page (deltas first, then a
gated tool call), approves the call from the page and sees its result and the model's answer
arrive; the layout fixes hold on the pages a new operator opens first."""

from __future__ import annotations

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
