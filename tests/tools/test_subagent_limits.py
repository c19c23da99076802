"""Sub-agents within bounds on a real `runbrain`: parents waiting on their children lend their
`limits.active` turn slots, so as many parents as there are slots each spawning a child all
complete; a turn may start at most `max_children_per_turn` children and a tenant may have at most
`max_live_per_tenant` at work, each refused with an error result naming the cap while another
tenant's sub-agents are unaffected."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, history, send_ok, wait_for_status
from tests.tools.test_subagents import children, wait_for_child

TENANTS = ["acme", "globex"]
HELPER = {"harness": "instant", "model": "openai/gpt-4.1-mini", "timeout_seconds": 120}
TOOL = {
    "name": "spawn_helper",
    "transport": "provider",
    "provider": "subagents",
    "operation": "spawn_helper",
    "tenants": TENANTS,
}
TURN_SECONDS = 30  # bounded waits: a deadlocked parent waits on its child until the 120 s deadline


def start_server(factory: Callable[..., BrainServer], *, limits: dict[str, int], **options: Any) -> BrainServer:
    brain = factory(start=False, tools=[TOOL], limits=limits)
    provider_options = {"profiles": {"helper": HELPER}, "tenants": TENANTS, **options}
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(
        {"subagents": {"class": "tools_app.providers.subagents.SubagentProvider", "options": provider_options}}
    )
    brain.start()
    return brain


@pytest.fixture
def servers(brain_factory: Callable[..., BrainServer]) -> Iterator[Callable[..., BrainServer]]:
    started: list[BrainServer] = []

    def start(**kwargs: Any) -> BrainServer:
        started.append(start_server(brain_factory, **kwargs))
        return started[-1]

    yield start
    for brain in started:
        brain.stop(signal.SIGKILL)


def parent_session(brain: BrainServer, name: str = "alice") -> str:
    return create_session(brain, name, tools=["spawn_helper"])["id"]  # type: ignore[no-any-return]


def tool_results(events: list[dict[str, Any]], input_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "tool.result" and e.get("input_id") == input_id]


def run_turns(brain: BrainServer, turns: list[tuple[str, str, str]]) -> list[list[dict[str, Any]]]:
    """Send each (session, text, persona) at once; the tool results of each turn once it ended."""
    accepted = [send_ok(brain, session, text, name) for session, text, name in turns]
    ended: list[list[dict[str, Any]]] = [[] for _ in turns]

    def wait(index: int) -> None:
        session, _, name = turns[index]
        ended[index] = wait_for_turn_end_of(brain, session, accepted[index]["id"], name)

    threads = [threading.Thread(target=wait, args=(index,)) for index in range(len(turns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TURN_SECONDS + 5)
    assert all(ended), "a turn never ended"
    return [tool_results(events, accepted[index]["id"]) for index, events in enumerate(ended)]


def wait_for_turn_end_of(brain: BrainServer, session: str, input_id: str, name: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + TURN_SECONDS
    while time.monotonic() < deadline:
        events = history(brain, session, name)
        if any(
            e["type"] == "session.status"
            and e.get("input_id") == input_id
            and e["data"]["status"] in ("idle", "interrupted", "failed")
            for e in events
        ):
            return events
        time.sleep(0.05)
    raise AssertionError(f"the turn of {input_id} never ended")


def test_as_many_parents_as_turn_slots_each_spawning_a_sub_agent_all_complete(
    servers: Callable[..., BrainServer],
) -> None:
    # given: limits.active = 2, both slots taken by parents whose child needs a slot of its own
    brain = servers(limits={"active": 2})
    parents = [parent_session(brain), parent_session(brain)]
    # when
    results = run_turns(brain, [(parent, 'tool:spawn_helper {"task": "hello"}', "alice") for parent in parents])
    # then
    for parent, (result,) in zip(parents, results, strict=True):
        assert result["outcome"] == "ok"
        (child,) = [row[0] for row in children(brain, parent)]
        assert result["result"]["structured_content"] == {
            "session_id": child,
            "status": "idle",
            "answer": "echo: hello",
        }
    assert [wait_for_status(brain, parent, "idle")["status"] for parent in parents] == ["idle", "idle"]


def test_a_turn_spawning_sub_agents_in_parallel_completes_with_a_single_turn_slot(
    servers: Callable[..., BrainServer],
) -> None:
    # given
    brain = servers(limits={"active": 1})
    parent = parent_session(brain)
    # when: three calls wait at once; the slot is lent once and taken back after the last
    ((*results,),) = run_turns(brain, [(parent, 'tools:3 spawn_helper {"task": "hi"}', "alice")])
    # then
    assert [(r["outcome"], r["result"]["structured_content"]["answer"]) for r in results] == [("ok", "echo: hi")] * 3
    assert len(children(brain, parent)) == 3
    assert history(brain, parent)[-2]["data"]["text"] == "tools said: 3 ok of 3"


def test_a_turn_may_start_at_most_max_children_per_turn_sub_agents(servers: Callable[..., BrainServer]) -> None:
    # given
    brain = servers(limits={"active": 4}, max_children_per_turn=2)
    parent = parent_session(brain)
    # when
    ((*results,),) = run_turns(brain, [(parent, 'tools:3 spawn_helper {"task": "hi"}', "alice")])
    # then: two children answered, the third call was refused and created nothing
    assert sorted(r["outcome"] for r in results) == ["error", "ok", "ok"]
    (refused,) = [r["result"] for r in results if r["outcome"] == "error"]
    assert refused == {
        "content": [
            {
                "type": "text",
                "text": "sub-agent 'helper' refused: "
                "this turn has already started 2 sub-agents (max_children_per_turn)",
            }
        ],
        "structured_content": {"session_id": None, "status": "refused", "answer": None},
        "is_error": True,
    }
    assert len(children(brain, parent)) == 2
    # and the next turn of the same session starts its own count
    ((again,),) = run_turns(brain, [(parent, 'tool:spawn_helper {"task": "once more"}', "alice")])
    assert again["outcome"] == "ok"
    assert len(children(brain, parent)) == 3


def test_a_tenant_at_max_live_per_tenant_is_refused_while_another_tenant_spawns(
    servers: Callable[..., BrainServer],
) -> None:
    # given: acme's two live sub-agents (both still working)
    brain = servers(limits={"active": 8}, max_live_per_tenant=2)
    busy = parent_session(brain)
    send_ok(brain, busy, 'tools:2 spawn_helper {"task": "sleep:60"}')
    for child in wait_for_children(brain, busy, 2):
        wait_for_status(brain, child, "running")
    other = parent_session(brain)
    charlie = parent_session(brain, "charlie")
    # when
    (acme,), (globex,) = run_turns(
        brain,
        [
            (other, 'tool:spawn_helper {"task": "hello"}', "alice"),
            (charlie, 'tool:spawn_helper {"task": "hello"}', "charlie"),
        ],
    )
    # then
    assert acme["outcome"] == "error"
    assert acme["result"]["is_error"] is True
    assert acme["result"]["content"][0]["text"] == (
        "sub-agent 'helper' refused: tenant 'acme' already has 2 sub-agents at work (max_live_per_tenant); "
        "try again when one has finished"
    )
    assert acme["result"]["structured_content"] == {"session_id": None, "status": "refused", "answer": None}
    assert children(brain, other) == []
    assert globex["outcome"] == "ok"
    assert globex["result"]["structured_content"]["answer"] == "echo: hello"
    # and once acme's sub-agents have ended, its share is free again
    with brain.client("alice") as client:
        assert client.post(f"/sessions/{busy}/events", json={"type": "user.interrupt"}).status_code == 202
    wait_for_status(brain, busy, "interrupted")
    ((later,),) = run_turns(brain, [(other, 'tool:spawn_helper {"task": "hello"}', "alice")])
    assert later["outcome"] == "ok"


def wait_for_children(brain: BrainServer, parent: str, count: int) -> list[str]:
    wait_for_child(brain, parent)
    found: list[str] = []
    for _ in range(400):
        found = [row[0] for row in children(brain, parent)]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"session {parent} spawned {len(found)} children, not {count}")
