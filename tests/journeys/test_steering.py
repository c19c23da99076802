"""Steering a running turn through the published client: `delivery: "steer"` on a user.message
against a real `runbrain` with the `loop` harness and the scripted provider (a tool that answers
after a few seconds keeps the turn running), the instant runner for harnesses that do not steer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from brain import BrainError

from tests.fixtures.provider import AGENT_HARNESSES, ScriptedProvider
from tests.fixtures.server import INSTANT_RUNNER, BrainServer, history, wait_for_status
from tests.support.live_turns import has, loop_brain, settled, stall_tool, wait_for
from tests.tools.servers import LoopbackServer, ToolZoo

pytestmark = pytest.mark.client

STALL_SECONDS = 3  # the stall tool's answer time: the steer arrives while the turn waits for it
STALL_CALL = f'call stall {{"seconds": {STALL_SECONDS}}}'
STEER = "Please answer in French from now on"


def _create(server: BrainServer, harness: str = "loop", tools: tuple[str, ...] = ("stall",)) -> str:
    session = server.sdk().create(
        {"harness": harness, "config": {"model": "openai/gpt-4.1-mini", "tools": list(tools)}}
    )
    return str(session["id"])


def _items(body: dict[str, Any]) -> list[tuple[str, str]]:
    """A model request's conversation as (kind, text): user, assistant, tool (a tool result)."""
    items: list[tuple[str, str]] = []
    for item in body.get("input", body.get("messages", [])):
        text = json.dumps(item.get("content", item.get("output", "")))
        if item.get("type") == "function_call_output" or item.get("role") == "tool":
            items.append(("tool", text))
        elif item.get("type") == "function_call":
            items.append(("call", json.dumps(item)))
        elif item.get("role") in ("user", "assistant"):
            items.append((item["role"], text))
    return items


def _steer(server: BrainServer, session_id: str, text: str = STEER, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = server.sdk().send(
        session_id, {"type": "user.message", "text": text, "delivery": "steer", **fields}
    )
    return event


def _outline(events: list[dict[str, Any]]) -> list[str]:
    kinds = {"assistant.message", "tool.call", "tool.result", "user.message", "session.status", "session.error"}
    return [
        event["type"] + (f":{event['data'].get('status')}" if event["type"] == "session.status" else "")
        for event in events
        if event["type"] in kinds
    ]


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_a_steer_reaches_the_running_turn_after_its_tool_result_exactly_once(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
    harness: str,
) -> None:
    # given a turn waiting for a tool that answers in a few seconds
    server = brain_factory(
        harnesses=AGENT_HARNESSES, providers=scripted_provider.providers(), tools=[stall_tool(zoo_server[1].url)]
    )
    session_id = _create(server, harness)
    turn = server.sdk().send(session_id, {"type": "user.message", "text": STALL_CALL})
    wait_for(server, session_id, has("tool.call"))
    # when guidance is sent as a steer
    steer = _steer(server, session_id)
    events = wait_for(server, session_id, settled(turn["id"]))
    # then it is recorded into the running turn, in order, before the tool's result
    assert steer["data"] == {"type": "user.message", "text": STEER, "delivery": "steer"}
    assert steer["input_id"] == turn["id"]
    assert _outline(events) == [
        "user.message",
        "session.status:running",
        "assistant.message",
        "tool.call",
        "user.message",
        "tool.result",
        "assistant.message",
        "session.status:idle",
    ]
    assert [e["id"] for e in events if e["type"] == "user.message"] == [turn["id"], steer["id"]]
    # and the model's next request has it as a user message after the tool result, once
    bodies = scripted_provider.bodies()
    assert len(bodies) == 2
    assert STEER not in json.dumps(bodies[0])
    items = _items(bodies[1])
    assert [kind for kind, _ in items] == ["user", "assistant", "call", "tool", "user"], items
    assert STEER in items[-1][1] and json.dumps(bodies[1]).count(STEER) == 1
    assert STEER in events[-2]["data"]["text"]  # the scripted model answered the steer
    # when the server restarts and the conversation goes on
    server.restart()
    assert server.sdk().get(session_id)["status"] == "idle"
    follow = server.sdk().send(session_id, {"type": "user.message", "text": "and now?"})
    after = wait_for(server, session_id, settled(follow["id"]))
    # then the steer is part of the native state the checkpoint kept, and nothing was reopened
    assert [e for e in after if e["type"] == "session.error"] == []
    assert after[-1]["data"] == {"status": "idle"}
    users = [text for kind, text in _items(scripted_provider.bodies()[-1]) if kind == "user"]
    assert [STEER in text for text in users] == [False, True, False] and "and now?" in users[-1]


def test_a_steer_with_no_running_turn_runs_as_an_ordinary_message(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given an idle loop session
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    # when a steer is sent
    steer = _steer(server, session_id, "steer while idle")
    events = wait_for(server, session_id, settled(steer["id"]))
    # then it is queued like any message: its own turn, no input_id on its event
    assert "input_id" not in steer
    assert steer["data"] == {"type": "user.message", "text": "steer while idle", "delivery": "steer"}
    assert _outline(events) == ["user.message", "session.status:running", "assistant.message", "session.status:idle"]
    assert {e.get("input_id") for e in events if e["type"] == "session.status"} == {steer["id"]}
    assert events[-2]["data"]["text"] == "You said: steer while idle"


def test_a_steer_resent_with_its_key_is_recorded_and_delivered_once(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a running loop turn
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    turn = server.sdk().send(session_id, {"type": "user.message", "text": STALL_CALL})
    wait_for(server, session_id, has("tool.call"))
    # when the same steer is sent three times with one key
    sent = [_steer(server, session_id, key="steer-1") for _ in range(3)]
    events = wait_for(server, session_id, settled(turn["id"]))
    # then one event answers all three, and the model saw the text once
    assert len({event["id"] for event in sent}) == 1
    assert [e["id"] for e in events if e["type"] == "user.message"] == [turn["id"], sent[0]["id"]]
    assert json.dumps(scripted_provider.bodies()[-1]).count(STEER) == 1
    assert events[-1]["data"] == {"status": "idle"}
    # and the key with another delivery is a conflict, recording nothing
    with pytest.raises(BrainError) as refused:
        server.sdk().send(session_id, {"type": "user.message", "text": STEER, "key": "steer-1"})
    assert (refused.value.status, refused.value.code) == (409, "conflict")
    assert len(history(server, session_id)) == len(events)


def test_a_steer_to_a_harness_that_cannot_steer_is_422_unsupported_and_keeps_its_key(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given a running turn on the instant runner, whose config does not say it steers
    server = brain_factory()
    session_id = _create(server, harness="instant", tools=())
    turn = server.sdk().send(session_id, {"type": "user.message", "text": "sleep:2"})
    before = len(history(server, session_id))
    # when a steer is sent
    with pytest.raises(BrainError) as refused:
        _steer(server, session_id, key="k-1")
    # then it is refused as the spec's error table says, and nothing is recorded
    assert (refused.value.status, refused.value.code) == (422, "unsupported")
    assert len([e for e in history(server, session_id) if e["type"] == "user.message"]) == 1
    assert before <= len(history(server, session_id))
    # and its key was not consumed: a queued message may use it
    queued = server.sdk().send(session_id, {"type": "user.message", "text": "queued", "key": "k-1"})
    events = wait_for(server, session_id, settled(queued["id"]))
    assert [e["data"]["text"] for e in events if e["type"] == "assistant.message"] == ["echo: sleep:2", "echo: queued"]
    assert turn["id"] != queued["id"]


def test_a_steer_its_harness_refuses_runs_next_as_an_input_of_its_own_and_survives_a_restart(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given an instant runner configured as steering (it answers `steer` with an error)
    server = brain_factory(harnesses={"instant": {"command": INSTANT_RUNNER, "steering": True}})
    session_id = _create(server, harness="instant", tools=())
    turn = server.sdk().send(session_id, {"type": "user.message", "text": "sleep:2"})
    queued = server.sdk().send(session_id, {"type": "user.message", "text": "queued before the steer"})
    wait_for_status(server, session_id, "running")
    # when a steer is sent during the turn
    steer = _steer(server, session_id, "refused steer")
    events = wait_for(server, session_id, settled(queued["id"]))
    # then it was recorded into the turn, and runs right after it, as its own input, before the queue
    assert steer["input_id"] == turn["id"]
    assert [e["data"]["text"] for e in events if e["type"] == "assistant.message"] == [
        "echo: sleep:2",
        "echo: refused steer",
        "echo: queued before the steer",
    ]
    running = [e["input_id"] for e in events if e["type"] == "session.status" and e["data"]["status"] == "running"]
    assert running == [turn["id"], steer["id"], queued["id"]]
    assert [e for e in events if e["type"] == "session.error"] == []
    # when the server restarts, nothing is reopened or run again
    server.restart()
    assert server.sdk().get(session_id)["status"] == "idle"
    assert history(server, session_id) == events


def test_a_steer_not_yet_taken_when_the_server_dies_is_cancelled_with_its_turn_once(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a loop turn waiting for its tool, with a steer recorded into it
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    turn = server.sdk().send(session_id, {"type": "user.message", "text": 'call stall {"seconds": 30}'})
    wait_for(server, session_id, has("tool.call"))
    steer = _steer(server, session_id)
    # when the server is killed before the model saw the steer, and starts again
    server.kill()
    server.start()
    wait_for_status(server, session_id, "interrupted")
    # then the turn and its steer each have exactly one outcome, as a queued input would
    errors = [
        (e["input_id"], e["data"]["message"]) for e in history(server, session_id) if e["type"] == "session.error"
    ]
    assert errors == [
        (turn["id"], "turn interrupted: server restarted"),
        (steer["id"], "queued input interrupted before execution"),
    ]
    assert all(STEER not in json.dumps(body) for body in scripted_provider.bodies())
    # and after a resume the conversation goes on without either of them
    assert server.sdk().resume(session_id)["status"] == "idle"
    follow = server.sdk().send(session_id, {"type": "user.message", "text": "hello again"})
    wait_for(server, session_id, settled(follow["id"]))
    last = json.dumps(scripted_provider.bodies()[-1])
    assert STEER not in last and "call stall" not in last
    # and a later restart reports nothing again
    server.restart()
    assert len([e for e in history(server, session_id) if e["type"] == "session.error"]) == 2
