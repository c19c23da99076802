"""Built-in tools in the admin of a real `runbrain`: a provider-backed binding added there is bound
by the server's installed providers as at startup (a refused operation or parameters is a form
error on that field, and nothing is saved) and serves new sessions; memories are listed and
deletable; tasks are listed."""

from __future__ import annotations

import html
import json
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.server import BrainServer, create_session, make_server
from tests.tools.test_builtin_tools import PROVIDERS, TOOL_NAMES, call, provider_tools, session

BINDINGS = "/admin/tools_app/toolbinding"
MEMORIES = "/admin/tools_app/memory"
TASKS = "/admin/tools_app/task"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    brain = make_server(tmp_path_factory.mktemp("brain"), tools=provider_tools())
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    brain.start()
    create_superuser(brain)
    yield brain
    brain.stop(signal.SIGKILL)


def binding_form(name: str, provider: str, operation: str, parameters: Any = None) -> dict[str, str]:
    """The add form as an operator fills it for a provider-backed tool: description and schemas
    left empty for the provider's descriptor to fill."""
    return {
        "name": name,
        "transport": "provider",
        "provider": provider,
        "operation": operation,
        "parameters": "" if parameters is None else json.dumps(parameters),
        "tenants": json.dumps(["acme"]),
        "timeout_seconds": "30",
        "max_output_bytes": "1048576",
        "approval_timeout_seconds": "600",
    }


def field_errors(page: str, field: str) -> list[str]:
    """The errors the form shows on `field`."""
    found = re.search(rf'<ul class="errorlist"[^>]*id="id_{field}_error">(.*?)</ul>', page, re.DOTALL)
    if found is None:
        return []
    return [html.unescape(item) for item in re.findall(r"<li>(.*?)</li>", found.group(1), re.DOTALL)]


def listed_ids(page: str, changelist: str) -> list[int]:
    """The ids of the rows a changelist page shows, in page order."""
    return [int(found) for found in re.findall(rf'href="{changelist}/(\d+)/change/', page)]


def catalog(server: BrainServer) -> dict[str, dict[str, Any]]:
    with server.client() as client:
        return {tool["name"]: tool for tool in client.get("/catalog").json()["tools"]}


def test_a_provider_binding_added_in_the_admin_gets_the_descriptor_and_serves_a_session(server: BrainServer) -> None:
    # when
    with AdminClient(server) as admin:
        admin.login()
        added = admin.post(f"{BINDINGS}/add/", binding_form("support_store", "memory", "memory_store", {"space": "s1"}))
    # then
    assert added.status_code == 302, added.text[:3000]
    tool = catalog(server)["support_store"]
    assert tool["description"].startswith("Store one fact to remember in later sessions")
    assert tool["input_schema"]["required"] == ["content"]
    # and a session calls it with the binding's space: the tenant's default space never sees it
    sid = create_session(server, tools=["support_store", *TOOL_NAMES])["id"]
    stored = call(server, sid, "support_store", {"content": "support rota changes on Mondays"})
    recalled = call(server, sid, "memory_recall", {"query": "support rota"})
    assert stored["outcome"] == "ok"
    assert recalled["result"]["structured_content"] == {"memories": []}
    with AdminClient(server) as admin:
        page = admin.login().page(f"{MEMORIES}/?space=s1")
    assert "support rota changes on Mondays" in page


@pytest.mark.parametrize(
    ("name", "operation", "parameters", "field", "message"),
    [
        pytest.param(
            "memory_shred",
            "memory_shred",
            None,
            "operation",
            "tool provider 'memory' refused it: unknown operation 'memory_shred' "
            "(this provider serves: memory_store, memory_recall, memory_forget)",
            id="refused_operation_case",
        ),
        pytest.param(
            "team_recall",
            "memory_recall",
            {"space": "team notes"},
            "parameters",
            "tool provider 'memory' refused them: parameters.space: must be 1-64 of",
            id="refused_parameters_case",
        ),
    ],
)
def test_a_binding_the_provider_refuses_is_a_form_error_on_its_field_and_nothing_is_saved(
    server: BrainServer, name: str, operation: str, parameters: Any, field: str, message: str
) -> None:
    # when
    with AdminClient(server) as admin:
        admin.login()
        answered = admin.post(f"{BINDINGS}/add/", binding_form(name, "memory", operation, parameters))
        listed = admin.page(f"{BINDINGS}/")
    # then
    assert answered.status_code == 200
    (error,) = field_errors(answered.text, field)
    assert error.startswith(message), error
    assert f">{name}</a>" not in listed
    assert name not in catalog(server)


def test_a_provider_the_server_has_not_installed_is_a_form_error(server: BrainServer) -> None:
    # when
    with AdminClient(server) as admin:
        admin.login()
        answered = admin.post(f"{BINDINGS}/add/", binding_form("notes_recall", "notes", "memory_recall"))
    # then
    assert answered.status_code == 200
    assert field_errors(answered.text, "provider") == ["tool provider 'notes' is not installed (BRAIN_TOOL_PROVIDERS)"]


def test_memories_are_listed_per_tenant_and_a_deleted_one_is_no_longer_recalled(server: BrainServer) -> None:
    # given
    sid, other = session(server), session(server, "charlie")
    kept = call(server, sid, "memory_store", {"content": "the warehouse opens at seven"})
    doomed = call(server, sid, "memory_store", {"content": "the warehouse closes at noon on Fridays"})
    foreign = call(server, other, "memory_store", {"content": "globex warehouse is in Oslo"}, "charlie")
    kept_id, doomed_id, foreign_id = (
        stored["result"]["structured_content"]["id"] for stored in (kept, doomed, foreign)
    )
    # when
    with AdminClient(server) as admin:
        admin.login()
        listed = admin.page(f"{MEMORIES}/?tenant=acme&q=warehouse")
        confirm = admin.page(f"{MEMORIES}/{doomed_id}/delete/")
        deleted = admin.post(f"{MEMORIES}/{doomed_id}/delete/", {"post": "yes"})
        after = admin.page(f"{MEMORIES}/?q=warehouse")
    recalled = call(server, session(server), "memory_recall", {"query": "warehouse"})
    # then
    assert listed_ids(listed, MEMORIES) == [doomed_id, kept_id]  # the tenant's, newest first
    assert "the warehouse opens at seven" in listed and "the warehouse closes at noon on Fridays" in listed
    assert "Are you sure" in confirm
    assert deleted.status_code == 302
    assert listed_ids(after, MEMORIES) == [foreign_id, kept_id]
    assert [m["id"] for m in recalled["result"]["structured_content"]["memories"]] == [kept_id]


def test_tasks_the_model_creates_are_listed_with_their_status(server: BrainServer) -> None:
    # given
    sid = session(server)
    parent = call(server, sid, "manage_tasks", {"action": "create", "title": "Audit the vendor contracts"})
    parent_id = parent["result"]["structured_content"]["task"]["id"]
    child = call(
        server, sid, "manage_tasks", {"action": "create_subtask", "parent_id": parent_id, "title": "Collect the PDFs"}
    )
    child_id = child["result"]["structured_content"]["task"]["id"]
    call(server, sid, "manage_tasks", {"action": "update_status", "task_id": child_id, "status": "in_progress"})
    # when
    with AdminClient(server) as admin:
        admin.login()
        listed = admin.page(f"{TASKS}/?tenant=acme")
        detail = admin.page(f"{TASKS}/{child_id}/change/")
    # then
    assert {parent_id, child_id} <= set(listed_ids(listed, TASKS))
    assert "Audit the vendor contracts" in listed and "Collect the PDFs" in listed
    assert "In Progress" in listed
    assert "Audit the vendor contracts" in detail  # the parent, shown read-only
