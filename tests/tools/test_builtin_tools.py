"""Built-in tools through the provider bridge on a real `runbrain`: `memory_store`,
`memory_recall`, `manage_tasks` and `show_structured_output` named in the host config's `tools`
with `transport: provider`, called through real turns of the instant runner
(`tool:NAME {json}`). Memories and tasks are per tenant; charlie is another tenant."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, make_server, send_ok

PROVIDERS = {
    "memory": {"class": "tools_app.providers.memory.MemoryProvider"},
    "tasks": {"class": "tools_app.providers.tasks.TasksProvider"},
    "structured": {"class": "tools_app.providers.structured.StructuredOutputProvider"},
}
TENANTS = ["acme", "globex"]
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")  # foundation.rfc3339


def provider_tools() -> list[dict[str, Any]]:
    def tool(name: str, provider: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "transport": "provider", "provider": provider, "operation": name, "tenants": TENANTS}

    return [
        tool("memory_store", "memory"),
        tool("memory_recall", "memory"),
        tool("memory_forget", "memory"),
        {**tool("manage_tasks", "tasks"), "description": "Track the team's work."},
        tool("show_structured_output", "structured"),
    ]


TOOL_NAMES = [tool["name"] for tool in provider_tools()]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    brain = make_server(tmp_path_factory.mktemp("brain"), tools=provider_tools())
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    brain.start()
    yield brain
    brain.stop(signal.SIGKILL)


def call(server: BrainServer, session_id: str, tool: str, arguments: Any, name: str = "alice") -> dict[str, Any]:
    """One tool call through a real turn: its tool.result data, with the turn's events."""
    accepted = send_ok(server, session_id, f"tool:{tool} {json.dumps(arguments)}", name)
    events = _turn_events(server, session_id, accepted["id"], name)
    mine = [event for event in events if event.get("input_id") == accepted["id"]]
    (result,) = [event["data"] for event in mine if event["type"] == "tool.result"]
    return {"result": result["result"], "outcome": result["outcome"], "events": mine}


def _turn_events(server: BrainServer, session_id: str, input_id: str, name: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    with server.client(name) as client:
        while time.monotonic() < deadline:
            page = client.get(f"/sessions/{session_id}/events", params={"limit": 1000}).json()
            events: list[dict[str, Any]] = page["events"]
            if any(
                event["type"] == "session.status"
                and event.get("input_id") == input_id
                and event["data"]["status"] in ("idle", "interrupted", "failed")
                for event in events
            ):
                return events
            time.sleep(0.02)
    raise AssertionError(f"the turn of {input_id} never ended")


def session(server: BrainServer, name: str = "alice") -> str:
    return create_session(server, name, tools=TOOL_NAMES)["id"]  # type: ignore[no-any-return]


def test_the_catalog_shows_provider_tools_with_the_providers_descriptors(server: BrainServer) -> None:
    # when
    with server.client() as client:
        tools = {tool["name"]: tool for tool in client.get("/catalog").json()["tools"]}
    # then
    assert sorted(tools) == sorted(TOOL_NAMES)
    assert tools["manage_tasks"]["description"] == "Track the team's work."
    assert tools["memory_store"]["input_schema"]["required"] == ["content"]


def test_a_stored_memory_is_recalled_in_another_session_of_the_tenant_and_never_by_another_tenant(
    server: BrainServer,
) -> None:
    # given
    first, second, other = session(server), session(server), session(server, "charlie")
    stored = call(server, first, "memory_store", {"content": "The customer's favourite colour is teal"})
    # when
    recalled = call(server, second, "memory_recall", {"query": "favourite colour?"})
    foreign = call(server, other, "memory_recall", {"query": "favourite colour"}, "charlie")
    # then
    assert stored["outcome"] == "ok"
    memory_id = stored["result"]["structured_content"]["id"]
    memories = recalled["result"]["structured_content"]["memories"]
    assert [(m["id"], m["content"]) for m in memories] == [(memory_id, "The customer's favourite colour is teal")]
    assert foreign["result"]["structured_content"] == {"memories": []}


def test_recall_ranks_the_better_match_first_and_forget_removes_one(server: BrainServer) -> None:
    # given
    sid = session(server, "charlie")
    weak = call(server, sid, "memory_store", {"content": "invoices go out monthly"}, "charlie")
    strong = call(
        server, sid, "memory_store", {"content": "overdue invoices get a reminder; overdue means 30 days"}, "charlie"
    )
    # when
    recalled = call(server, sid, "memory_recall", {"query": "overdue invoices", "limit": 5}, "charlie")
    forgotten = call(server, sid, "memory_forget", {"id": weak["result"]["structured_content"]["id"]}, "charlie")
    again = call(server, sid, "memory_recall", {"query": "invoices"}, "charlie")
    # then
    ids = [m["id"] for m in recalled["result"]["structured_content"]["memories"]]
    assert ids == [strong["result"]["structured_content"]["id"], weak["result"]["structured_content"]["id"]]
    assert forgotten["outcome"] == "ok"
    assert [m["id"] for m in again["result"]["structured_content"]["memories"]] == ids[:1]


def test_a_memory_over_8_kib_is_an_error_result_and_nothing_is_stored(server: BrainServer) -> None:
    # given
    sid = session(server)
    # when
    stored = call(server, sid, "memory_store", {"content": "zebra " * 1400})
    recalled = call(server, sid, "memory_recall", {"query": "zebra"})
    # then
    assert stored["outcome"] == "error"
    assert stored["result"]["is_error"] is True
    assert "memory too large: 8400 bytes" in stored["result"]["content"][0]["text"]
    assert recalled["result"]["structured_content"] == {"memories": []}


def test_tasks_are_created_updated_listed_per_tenant_and_served_by_get_tasks(server: BrainServer) -> None:
    # given
    sid = session(server)
    parent = call(server, sid, "manage_tasks", {"action": "create", "title": "Ship the release"})
    parent_id = parent["result"]["structured_content"]["task"]["id"]
    child = call(server, sid, "manage_tasks", {"action": "create_subtask", "parent_id": parent_id, "title": "Notes"})
    child_id = child["result"]["structured_content"]["task"]["id"]
    # when
    updated = call(server, sid, "manage_tasks", {"action": "update_status", "task_id": child_id, "status": "completed"})
    listed = call(server, sid, "manage_tasks", {"action": "list", "parent_id": parent_id})
    with server.client() as client:
        page = client.get("/tasks", params={"limit": 100}).json()
    with server.client("charlie") as client:
        foreign = client.get("/tasks").json()
    # then
    assert updated["result"]["structured_content"]["task"]["status"] == "completed"
    assert [(t["id"], t["status"]) for t in listed["result"]["structured_content"]["tasks"]] == [
        (child_id, "completed")
    ]
    assert [(t["id"], t["parent_id"], t["status"]) for t in page["tasks"] if t["id"] in (parent_id, child_id)] == [
        (parent_id, None, "pending"),
        (child_id, parent_id, "completed"),
    ]
    assert all(t["id"] not in (parent_id, child_id) for t in foreign["tasks"])


def _times(value: Any) -> list[str]:
    """Every `*_at` field anywhere in `value`."""
    if isinstance(value, list):
        return [time for item in value for time in _times(item)]
    if not isinstance(value, dict):
        return []
    own = [field for key, field in value.items() if key.endswith("_at")]
    return own + [time for field in value.values() for time in _times(field)]


def test_every_time_on_get_tasks_and_in_memory_and_task_rows_is_rfc_3339_with_z(server: BrainServer) -> None:
    # given
    sid = session(server)
    created = call(server, sid, "manage_tasks", {"action": "create", "title": "Write the notes"})
    task_id = created["result"]["structured_content"]["task"]["id"]
    updated = call(server, sid, "manage_tasks", {"action": "update_status", "task_id": task_id, "status": "completed"})
    listed = call(server, sid, "manage_tasks", {"action": "list"})
    stored = call(server, sid, "memory_store", {"content": "the notes live in the wiki"})
    recalled = call(server, sid, "memory_recall", {"query": "notes wiki"})
    # when
    with server.client() as client:
        page = client.get("/tasks", params={"limit": 100}).json()
    # then
    sources = {
        "GET /tasks": page["tasks"],
        **{
            name: result["result"]["structured_content"]
            for name, result in [
                ("task create", created),
                ("task update", updated),
                ("task list", listed),
                ("memory store", stored),
                ("memory recall", recalled),
            ]
        },
    }
    times = {name: _times(value) for name, value in sources.items()}
    assert [name for name, found in times.items() if not found] == []  # every source carries times
    assert {name: [t for t in found if not RFC3339_Z.fullmatch(t)] for name, found in times.items()} == {
        name: [] for name in sources
    }


def test_an_unknown_task_and_another_tenants_task_are_both_no_such_task(server: BrainServer) -> None:
    # given
    sid, other = session(server), session(server, "charlie")
    created = call(server, sid, "manage_tasks", {"action": "create", "title": "Private"})
    task_id = created["result"]["structured_content"]["task"]["id"]
    # when
    unknown = call(server, sid, "manage_tasks", {"action": "update_status", "task_id": 999999, "status": "completed"})
    foreign = call(
        server, other, "manage_tasks", {"action": "update_status", "task_id": task_id, "status": "cancelled"}, "charlie"
    )
    subtask = call(
        server, other, "manage_tasks", {"action": "create_subtask", "parent_id": task_id, "title": "x"}, "charlie"
    )
    # then
    assert unknown["result"] == {"content": [{"type": "text", "text": "no task 999999"}], "is_error": True}
    assert foreign["result"]["content"][0]["text"] == f"no task {task_id}"
    assert subtask["result"]["is_error"] is True
    listed = call(server, sid, "manage_tasks", {"action": "list"})
    mine = [t for t in listed["result"]["structured_content"]["tasks"] if t["id"] == task_id]
    assert [t["status"] for t in mine] == ["pending"]


FORM: dict[str, Any] = {
    "output_type": "form",
    "title": "Leave request",
    "questions": [
        {
            "id": "leave_type",
            "label": "What type of leave?",
            "type": "select",
            "options": [{"label": "Vacation", "value": "vacation"}, {"label": "Sick", "value": "sick"}],
        },
        {"id": "dates", "label": "What dates?", "type": "text"},
    ],
}


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(FORM, id="form_case"),
        pytest.param({"output_type": "info", "title": "Done", "body": "All tests pass."}, id="info_case"),
        pytest.param(
            {"output_type": "summary_table", "columns": ["Name", "Status"], "rows": [["MyApp", "Active"]]},
            id="columns_table_case",
        ),
        pytest.param(
            {"output_type": "summary_table", "rows": [{"label": "Coverage", "value": "87%"}]}, id="label_table_case"
        ),
    ],
)
def test_structured_output_is_a_retained_event_before_the_result(server: BrainServer, payload: dict[str, Any]) -> None:
    # given
    sid = session(server)
    # when
    called = call(server, sid, "show_structured_output", payload)
    # then
    types = [event["type"] for event in called["events"]]
    assert types.index("tool.call") < types.index("structured_output") < types.index("tool.result")
    (shown,) = [event["data"] for event in called["events"] if event["type"] == "structured_output"]
    call_id = next(event["data"]["id"] for event in called["events"] if event["type"] == "tool.call")
    assert shown == {"call_id": call_id, **payload}
    assert called["outcome"] == "ok"
    assert "Your turn ends here." in called["result"]["content"][0]["text"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param({**FORM, "questions": []}, "invalid form at questions", id="no_questions_case"),
        pytest.param(
            {**FORM, "questions": FORM["questions"] * 3}, "invalid form at questions", id="six_questions_case"
        ),
        pytest.param(
            {**FORM, "questions": [{**FORM["questions"][0], "options": FORM["questions"][0]["options"][:1]}]},
            "invalid form at questions/0/options",
            id="one_option_case",
        ),
        pytest.param({"output_type": "info", "title": "t"}, "invalid info", id="info_without_body_case"),
        pytest.param(
            {"output_type": "summary_table", "columns": ["a", "b"], "rows": [["only one"]]},
            "rows: each row needs exactly one cell per column",
            id="short_row_case",
        ),
        pytest.param({"output_type": "chart"}, "invalid arguments", id="unknown_type_case"),
    ],
)
def test_an_invalid_structured_payload_is_an_error_result_and_shows_nothing(
    server: BrainServer, payload: dict[str, Any], message: str
) -> None:
    # given
    sid = session(server)
    # when
    called = call(server, sid, "show_structured_output", payload)
    # then
    assert called["result"]["is_error"] is True
    assert message in called["result"]["content"][0]["text"]
    assert [event for event in called["events"] if event["type"] == "structured_output"] == []
