"""The admin of a real runbrain in Chromium, as an operator uses it: a styled login and index;
a tenant, a token shown once and used against the API; a tool binding a session then calls; the
session's transcript; closing it from the admin."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.admin.support import OPERATOR, OPERATOR_PASSWORD, create_superuser
from tests.browser.conftest import Screenshots
from tests.fixtures.server import BrainServer, make_server

TENANT = "initech"
TURN_SECONDS = 20.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    server = make_server(tmp_path_factory.mktemp("brain"))
    server.start()
    create_superuser(server)
    yield server
    server.stop(signal.SIGKILL)


def log_in(page: Any, server: BrainServer) -> None:
    page.goto(server.url + "/admin/")
    page.fill("#id_username", OPERATOR)
    page.fill("#id_password", OPERATOR_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(server.url + "/admin/")


def wait_for_turn_end(api: httpx.Client, session_id: str, input_id: str) -> list[dict[str, Any]]:
    """The session's events once the turn of `input_id` has ended."""
    deadline = time.monotonic() + TURN_SECONDS
    while time.monotonic() < deadline:
        events: list[dict[str, Any]] = api.get(f"/sessions/{session_id}/events", params={"limit": 1000}).json()[
            "events"
        ]
        if any(
            event["type"] == "session.status"
            and event.get("input_id") == input_id
            and event["data"]["status"] in ("idle", "interrupted", "failed")
            for event in events
        ):
            return events
        time.sleep(0.05)
    raise AssertionError(f"the turn of {input_id} did not end within {TURN_SECONDS} s")


def success_message(page: Any) -> str:
    return str(page.inner_text("ul.messagelist li.success"))


def test_an_operator_logs_in_to_a_styled_admin(page: Any, server: BrainServer, screenshots: Screenshots) -> None:
    # when
    page.goto(server.url + "/admin/")
    screenshots.take(page, "login")
    log_in(page, server)
    screenshots.take(page, "index")

    # then: the admin's stylesheet arrived whole from its hashed name, and it styles the page
    sheets = page.evaluate(
        """() => [...document.styleSheets].map(sheet => ({href: sheet.href || "", rules: sheet.cssRules.length}))"""
    )
    base = [sheet for sheet in sheets if re.search(r"/static/admin/css/base\.[0-9a-f]{12}\.css$", sheet["href"])]
    assert len(base) == 1 and base[0]["rules"] > 100, sheets
    header = page.evaluate("() => getComputedStyle(document.querySelector('#header')).backgroundColor")
    variable = page.evaluate("() => getComputedStyle(document.documentElement).getPropertyValue('--header-bg')")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent") and variable.strip() != ""
    assert page.inner_text("#site-name") == "Brain administration"
    assert page.is_visible("text=Tool bindings") and page.is_visible("text=API tokens")


def test_an_operator_manages_tenants_tokens_and_tools_and_reads_and_closes_a_session(
    page: Any, server: BrainServer, screenshots: Screenshots, zoo_url: str
) -> None:
    log_in(page, server)

    # a tenant
    page.goto(server.url + "/admin/sessions_app/tenant/add/")
    page.fill("#id_name", TENANT)
    page.click("input[name=_save]")
    assert f"“{TENANT}” was added successfully" in success_message(page)

    # a token, shown once on the page that created it
    page.goto(server.url + "/admin/sessions_app/apitoken/add/")
    page.select_option("#id_tenant", TENANT)
    page.fill("#id_label", "browser")
    page.check("#id_manage")
    page.click("input[name=_save]")
    token = page.input_value("#issued-token")
    screenshots.take(page, "token-issued")
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    page.reload()
    assert token not in page.content()  # a reload shows it no more

    # a tool binding for the tenant, served by a loopback tool service
    page.goto(server.url + "/admin/tools_app/toolbinding/add/")
    page.fill("#id_name", "lookup")
    page.fill("#id_description", "Look something up.")
    page.fill("#id_input_schema", json.dumps({"type": "object", "properties": {"text": {"type": "string"}}}))
    page.fill("#id_url", zoo_url + "/echo")
    page.fill("#id_tenants", json.dumps([TENANT]))
    page.click("input[name=_save]")
    screenshots.take(page, "binding-saved")
    assert "“lookup” was added successfully" in success_message(page)

    # the shown token works against the API, and the new session calls the admin's binding
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
        created = api.post(
            "/sessions", json={"harness": "instant", "config": {"model": "openai/m", "tools": ["lookup"]}}
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["id"]
        text = 'tool:lookup {"text": "found it"}'
        sent = api.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": text})
        assert sent.status_code == 202, sent.text
        events = wait_for_turn_end(api, session_id, sent.json()["id"])
    results = [event["data"]["result"] for event in events if event["type"] == "tool.result"]
    assert results == [{"content": [{"type": "text", "text": "found it"}]}]

    # the operator finds the session by its tenant and reads its transcript
    page.goto(server.url + "/admin/sessions_app/session/")
    page.click(f"#changelist-filter a:text-is('{TENANT}')")
    page.click(f"a:text-is('{session_id}')")
    page.wait_for_selector("#transcript .transcript-entry")
    screenshots.take(page, "session")
    entries = page.eval_on_selector_all(
        "#transcript .transcript-entry",
        "items => items.map(item => [item.dataset.type, (item.querySelector('.entry-text') || {}).innerText || ''])",
    )
    kinds = [kind for kind, _ in entries]
    assert kinds[:1] == ["user.message"] and kinds[-1] == "session.status"
    assert ["tool.call", 'lookup({"text":"found it"})'] in entries
    assert ["tool.result", "found it"] in entries
    assert any(kind == "assistant.message" and "found it" in text for kind, text in entries)
    assert page.inner_text(".field-tool_names .readonly") == "lookup"

    # its raw JSON
    page.click("text=Raw JSON")
    raw = json.loads(page.inner_text("body"))
    assert (raw["id"], raw["status"], [d["name"] for d in raw["descriptors"]]) == (session_id, "idle", ["lookup"])
    page.go_back()

    # closing asks first, then closes through the runtime
    page.click("a.session-close")
    screenshots.take(page, "close-confirmation")
    assert page.is_visible("text=This cannot be undone.")
    page.click("#confirm-session-control")
    screenshots.take(page, "closed")
    assert "Close requested" in success_message(page)
    assert page.inner_text(".field-status .readonly") == "closed"
    last = page.eval_on_selector_all("#transcript .transcript-entry", "items => items.at(-1).dataset.type")
    assert (
        last == "session.status"
        and page.inner_text("#transcript .transcript-entry:last-child .entry-status-value") == "closed"
    )
    assert not page.is_visible("a.session-close")
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
        assert api.get(f"/sessions/{session_id}").json()["status"] == "closed"
