"""The admin as a new operator first meets it, in Chromium at 1280 px: every list fits the window
with the longest values in it, labels read as English, the tool-binding form shows the chosen
transport's fields only (choices, no `null` boxes), and a binding from the host config says so."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.admin.support import OPERATOR, OPERATOR_PASSWORD, create_superuser, manage
from tests.browser.conftest import Screenshots
from tests.fixtures.server import BrainServer, make_server

LONG_ROWS = Path(__file__).resolve().parents[1] / "admin" / "long_rows.py"
CONFIG_TOOL = {
    "name": "echo",
    "description": "Echo text.",
    "input_schema": {"type": "object"},
    "url": "http://127.0.0.1:9/tools/echo",
    "tenants": ["acme"],
}
TRANSPORT_ONLY_FIELDS = {
    "url",
    "token_env",
    "inspect_session",
    "mcp_tool",
    "method",
    "query",
    "headers",
    "body",
    "provider",
    "operation",
    "parameters",
}
JSON_FIELDS = ("input_schema", "output_schema", "tenants", "query", "headers", "body", "parameters")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    server = make_server(tmp_path_factory.mktemp("brain"), tools=[CONFIG_TOOL])
    server.start()
    create_superuser(server)
    manage(server, "shell", "-c", LONG_ROWS.read_text())
    yield server
    server.stop(signal.SIGKILL)


def log_in(page: Any, server: BrainServer) -> None:
    page.goto(server.url + "/admin/")
    page.fill("#id_username", OPERATOR)
    page.fill("#id_password", OPERATOR_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(server.url + "/admin/")


def visible_fields(page: Any) -> set[str]:
    """The transport-specific fields whose rows the form shows."""
    return {name for name in TRANSPORT_ONLY_FIELDS if page.is_visible(f".form-row.field-{name}")}


def test_every_list_fits_a_1280_px_window_with_the_longest_values(
    page: Any, server: BrainServer, screenshots: Screenshots
) -> None:
    # given
    log_in(page, server)
    changelists = sorted(
        {
            href
            for href in page.eval_on_selector_all("#content-main a", "links => links.map(a => a.getAttribute('href'))")
            if re.fullmatch(r"/admin/\w+/\w+/", href or "")
        }
    )
    assert len(changelists) == 13, changelists
    # when / then: no list scrolls sideways, neither its table nor the page
    overflowing = {}
    for href in changelists:
        page.goto(server.url + href)
        rows = page.locator("#result_list tbody tr").count()
        widths = page.evaluate(
            """() => {
                const results = document.querySelector('#changelist .results') || {scrollWidth: 0, clientWidth: 0};
                const root = document.documentElement;
                return [results.scrollWidth, results.clientWidth, root.scrollWidth, root.clientWidth];
            }"""
        )
        if rows == 0 or widths[0] > widths[1] or widths[2] > widths[3]:
            overflowing[href] = (rows, widths)
            screenshots.take(page, href.strip("/").replace("/", "-"))
    assert overflowing == {}


def test_labels_read_as_english(page: Any, server: BrainServer) -> None:
    # when
    log_in(page, server)
    index = page.inner_text("#content-main")
    page.goto(server.url + "/admin/sessions_app/session/")
    crumbs = page.inner_text(".breadcrumbs")
    page.goto(server.url + "/admin/tools_app/memory/")
    memories = page.inner_text(".breadcrumbs")
    # then
    assert "TENANTS AND SESSIONS" in index.upper() and "Memories" in index and "Memorys" not in index
    assert re.sub(r"\s+", " ", crumbs).strip() == "Home › Tenants and sessions › Sessions"
    assert re.sub(r"\s+", " ", memories).strip() == "Home › Tools › Memories"


def test_the_binding_form_shows_the_chosen_transports_fields_only(
    page: Any, server: BrainServer, screenshots: Screenshots
) -> None:
    # given
    log_in(page, server)
    page.goto(server.url + "/admin/tools_app/toolbinding/add/")
    # then: transport and method are choices, and no JSON box says null
    options = page.eval_on_selector_all("#id_transport option", "options => options.map(o => o.value)")
    methods = page.eval_on_selector_all("#id_method option", "options => options.map(o => o.value)")
    assert (options, methods) == (["http", "mcp", "rest", "provider"], ["GET", "POST", "PUT", "PATCH", "DELETE"])
    assert {name: page.input_value(f"#id_{name}") for name in JSON_FIELDS} == dict.fromkeys(JSON_FIELDS, "")
    assert page.inner_text("label[for=id_url]") == "URL:"
    # and: each transport shows its own fields
    shown = {}
    for transport in ("http", "mcp", "rest", "provider"):
        page.select_option("#id_transport", transport)
        shown[transport] = visible_fields(page)
        screenshots.take(page, f"binding-{transport}")
    assert shown == {
        "http": {"url", "token_env", "inspect_session"},
        "mcp": {"url", "token_env", "mcp_tool"},
        "rest": {"method", "url", "query", "headers", "body", "token_env"},
        "provider": {"provider", "operation", "parameters"},
    }
    # when: a REST binding is saved
    page.select_option("#id_transport", "rest")
    page.fill("#id_name", "update_order")
    page.fill("#id_description", "Change the quantity of an order line.")
    schema = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
    page.fill("#id_input_schema", json.dumps(schema))
    page.fill("#id_tenants", json.dumps(["acme"]))
    page.select_option("#id_method", "PATCH")
    page.fill("#id_url", "http://127.0.0.1:9/orders/{{order}}")
    page.click("input[name=_save]")
    # then
    assert "“update_order” was added successfully" in page.inner_text("ul.messagelist li.success")
    page.click("text=update_order")
    assert page.input_value("#id_transport") == "rest" and page.input_value("#id_method") == "PATCH"
    assert visible_fields(page) == {"method", "url", "query", "headers", "body", "token_env"}
    assert page.input_value("#id_output_schema") == ""


def test_a_binding_from_the_host_config_says_so_instead_of_a_permission_error(
    page: Any, server: BrainServer, screenshots: Screenshots
) -> None:
    # given
    log_in(page, server)
    page.goto(server.url + "/admin/tools_app/toolbinding/")
    row = page.locator("#result_list tr", has_text="echo")
    assert row.locator("td.field-source").inner_text() == "host config"
    # when: the operator opens it
    row.locator("a").first.click()
    screenshots.take(page, "config-binding")
    # then: read-only, with its own transport's fields and a note saying where it comes from
    assert page.inner_text(".binding-from-config") == (
        "This binding comes from the host config (its tools) and is shown read-only: change or remove it in "
        "the config file, then restart Brain."
    )
    labels = page.eval_on_selector_all(".form-row label", "labels => labels.map(l => l.textContent.trim())")
    assert "Method:" not in labels and "Provider:" not in labels and "URL:" in labels
    # when: the operator tries to delete it from the list
    page.goto(server.url + "/admin/tools_app/toolbinding/")
    page.locator("#result_list tr", has_text="echo").locator("input.action-select").check()
    page.select_option("select[name=action]", "delete_selected")
    page.click("button[name=index]")
    screenshots.take(page, "config-binding-delete")
    # then: a note, no permission page, and the binding is still there
    assert page.inner_text("ul.messagelist li.warning") == (
        "“echo”: from the host config, not deleted; change the config's `tools` and restart Brain"
    )
    assert page.locator("#result_list tr", has_text="echo").count() == 1
