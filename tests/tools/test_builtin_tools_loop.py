"""Built-in tools called by a model: the `loop` harness with the scripted provider as the model
(`call NAME {json}` in the user's text makes it call a tool) on a real `runbrain`. A memory stored
in one session is recalled in another session of the tenant; a form shown with
`show_structured_output` ends the model's turn, and the answers start the next one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok

PROVIDERS = {
    "memory": {"class": "tools_app.providers.memory.MemoryProvider"},
    "structured": {"class": "tools_app.providers.structured.StructuredOutputProvider"},
}
SPACE = "support"
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
TURN_SECONDS = 30.0
ANSWERS = "leave_type: vacation; dates: 3-7 August"


def builtin_tools() -> list[dict[str, Any]]:
    def tool(name: str, provider: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "transport": "provider",
            "provider": provider,
            "operation": name,
            "tenants": ["acme", "globex"],
            **extra,
        }

    return [
        tool("memory_store", "memory", parameters={"space": SPACE}),
        tool("memory_recall", "memory", parameters={"space": SPACE}),
        tool("show_structured_output", "structured"),
    ]


def loop_server(brain_factory: Callable[..., BrainServer], provider: ScriptedProvider) -> BrainServer:
    server = brain_factory(
        start=False,
        harnesses={"loop": LOOP_HARNESS},
        providers=provider.providers(),
        tools=builtin_tools(),
    )
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    server.start()
    return server


def loop_session(server: BrainServer, name: str = "alice") -> str:
    config = {"model": "openai/gpt-4.1-mini", "tools": [tool["name"] for tool in builtin_tools()]}
    with server.client(name) as client:
        response = client.post("/sessions", json={"harness": "loop", "config": config})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def turn(server: BrainServer, session_id: str, text: str, name: str = "alice") -> list[dict[str, Any]]:
    """The events of the turn `text` started (those carrying its input id), once it ended."""
    sent = send_ok(server, session_id, text, name)
    deadline = time.monotonic() + TURN_SECONDS
    while time.monotonic() < deadline:
        events = [event for event in history(server, session_id, name) if event.get("input_id") == sent["id"]]
        if events and events[-1]["type"] == "session.status" and events[-1]["data"]["status"] != "running":
            return events
        time.sleep(0.02)
    raise AssertionError(f"the turn of {sent['id']} never ended")


def results_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == "tool.result"]


def test_a_memory_the_model_stores_is_recalled_by_the_model_in_another_session_of_the_tenant(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given
    server = loop_server(brain_factory, scripted_provider)
    fact = "The customer prefers invoices in Norwegian kroner"
    stored = results_of(turn(server, loop_session(server), f"call memory_store {json.dumps({'content': fact})}"))
    scripted_provider.reset()
    # when
    recall = {"query": "which currency for invoices"}
    events = turn(server, loop_session(server), f"call memory_recall {json.dumps(recall)}")
    foreign = turn(server, loop_session(server, "charlie"), f"call memory_recall {json.dumps(recall)}", "charlie")
    # then
    assert [result["outcome"] for result in stored] == ["ok"]
    memory_id = stored[0]["result"]["structured_content"]["id"]
    (recalled,) = results_of(events)
    assert recalled["outcome"] == "ok"
    memories = recalled["result"]["structured_content"]["memories"]
    assert [(memory["id"], memory["content"]) for memory in memories] == [(memory_id, fact)]
    # the model got the memory in the tool result and answered from it
    recall_requests = [body for body in scripted_provider.bodies() if fact in json.dumps(body)]
    assert len(recall_requests) == 1
    answer = [event["data"]["text"] for event in events if event["type"] == "assistant.message"][-1]
    assert answer.startswith("Tool memory_recall returned:") and "Norwegian kroner" in answer
    assert results_of(foreign)[0]["result"]["structured_content"] == {"memories": []}
    assert events[-1]["type"] == "session.status" and events[-1]["data"]["status"] == "idle"


def test_a_form_ends_the_models_turn_and_the_answers_start_the_next_turn(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given
    server = loop_server(brain_factory, scripted_provider)
    sid = loop_session(server)
    scripted_provider.reset()
    # when
    shown = turn(server, sid, f"call show_structured_output {json.dumps(FORM)}")
    requests_after_form = len(scripted_provider.requests())
    answered = turn(server, sid, ANSWERS)
    # then: one model request made the call; none followed the tool result
    assert requests_after_form == 1
    assert [event["type"] for event in shown] == [
        "session.status",
        "model.request",
        "assistant.message",
        "tool.call",
        "structured_output",
        "tool.result",
        "session.status",
    ]
    call_id = shown[3]["data"]["id"]
    assert shown[4]["data"] == {"call_id": call_id, **FORM}
    assert shown[5]["data"]["outcome"] == "ok"
    assert shown[-1]["data"]["status"] == "idle"
    # the answers are a normal user message: a new turn with one model request that sees the
    # form's result and the answers
    bodies = scripted_provider.bodies()
    assert len(bodies) == 2
    assert "Your turn ends here." in json.dumps(bodies[1]) and ANSWERS in json.dumps(bodies[1])
    assert [event["type"] for event in answered] == [
        "session.status",
        "model.request",
        "assistant.message",
        "session.status",
    ]
    assert answered[2]["data"]["text"].endswith(f"You said: {ANSWERS}")
    assert answered[-1]["data"]["status"] == "idle"
