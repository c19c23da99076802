"""The web, storage and sandbox providers in the admin of a real `runbrain`: an operator adds a
tool of each with `transport: provider` in the tool-binding form, as for any other provider; the
provider's descriptor fills it, a session calls it at once, and the shipped web provider still
refuses loopback there."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.server import BrainServer, create_session, make_server
from tests.support.web_servers import PageServer, started
from tests.tools.test_builtin_tools import call
from tests.tools.test_builtin_tools_admin import BINDINGS, binding_form, catalog, field_errors

PROVIDERS = {
    "web": {"class": "tools_app.providers.web.WebProvider"},
    "files": {
        "class": "tools_app.providers.storage.StorageProvider",
        "options": {"backend": "filesystem", "root": "agent-files", "allow_write": True},
    },
    "sandbox": {"class": "tools_app.providers.sandbox.SandboxProvider", "options": {"backend": "local"}},
}
# name in the admin → (provider, operation)
ADDED = {
    "page_fetch": ("web", "fetch"),
    "notes_write": ("files", "write"),
    "notes_read": ("files", "read"),
    "box_create": ("sandbox", "create"),
    "box_exec": ("sandbox", "exec"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    brain = make_server(tmp_path_factory.mktemp("brain"))
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    brain.env["SANDBOX_SIGNING_KEY"] = "k" * 40
    brain.start()
    create_superuser(brain)
    with AdminClient(brain) as admin:
        admin.login()
        for name, (provider, operation) in ADDED.items():
            added = admin.post(f"{BINDINGS}/add/", binding_form(name, provider, operation))
            assert added.status_code == 302, field_errors(added.text, "operation") or added.text[:3000]
    yield brain
    brain.stop(signal.SIGKILL)


@pytest.fixture
def pages() -> Iterator[PageServer]:
    yield from started(PageServer)


def _properties(tool: dict[str, Any]) -> list[str]:
    return sorted(tool["input_schema"]["properties"])


def test_tools_of_the_web_storage_and_sandbox_providers_added_in_the_admin_carry_their_descriptors(
    server: BrainServer,
) -> None:
    # when
    tools = catalog(server)
    # then: each added tool is served with its provider's description and schema
    assert set(ADDED) <= set(tools)
    assert _properties(tools["page_fetch"]) == ["url"]
    assert tools["page_fetch"]["description"].startswith("Fetch")
    assert _properties(tools["notes_write"]) == ["content", "key"]
    assert _properties(tools["notes_read"]) == ["key"]
    assert _properties(tools["box_create"]) == []
    assert _properties(tools["box_exec"]) == ["command", "handle"]


def test_a_session_calls_the_admin_added_tools_and_the_web_tool_still_refuses_loopback(
    server: BrainServer, pages: PageServer
) -> None:
    # given
    session_id = create_session(server, tools=list(ADDED))["id"]
    # when
    wrote = call(server, session_id, "notes_write", {"key": "plan.txt", "content": "ship on Monday"})
    read = call(server, session_id, "notes_read", {"key": "plan.txt"})
    created = call(server, session_id, "box_create", {})
    handle = created["result"]["structured_content"]["handle"]
    ran = call(server, session_id, "box_exec", {"handle": handle, "command": "echo from the admin sandbox"})
    fetched = call(server, session_id, "page_fetch", {"url": f"http://127.0.0.1:{pages.port}/page"})
    # then
    assert [wrote["outcome"], read["outcome"], created["outcome"], ran["outcome"]] == ["ok"] * 4
    assert read["result"]["content"][0]["text"] == "ship on Monday"
    assert ran["result"]["structured_content"]["stdout"] == "from the admin sandbox\n"
    assert (fetched["outcome"], fetched["result"]["is_error"]) == ("error", True)
    refusal = f"refused: only port 80 is fetched for http URLs, not {pages.port}"
    assert fetched["result"]["content"][0]["text"] == refusal
    assert pages.accepts == 0
