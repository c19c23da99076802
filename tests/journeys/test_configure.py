"""Changing a session's configuration between turns through the published client:
`{"type": "session.configure", "config": {...}}` against a real `runbrain` with the `loop`
harness and the scripted provider (a tool that answers after a few seconds keeps a turn running)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brain import BrainError

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history
from tests.support.live_turns import loop_brain, settled, stall_tool, wait_for
from tests.tools.servers import LoopbackServer, ToolZoo

pytestmark = pytest.mark.client

STALL_CALL = 'call stall {"seconds": 3}'  # the change arrives while the turn waits for the tool
FIRST_MODEL, NEXT_MODEL = "openai/gpt-4.1-mini", "openai/gpt-5-mini"
INSTRUCTIONS = "Answer in one short sentence."


def _create(server: BrainServer) -> str:
    session = server.sdk().create({"harness": "loop", "config": {"model": FIRST_MODEL, "tools": ["stall"]}})
    return str(session["id"])


def _configure(server: BrainServer, session_id: str, name: str = "alice", **config: Any) -> dict[str, Any]:
    event: dict[str, Any] = server.sdk(name).send(session_id, {"type": "session.configure", "config": config})
    return event


def _message(server: BrainServer, session_id: str, text: str) -> dict[str, Any]:
    event: dict[str, Any] = server.sdk().send(session_id, {"type": "user.message", "text": text})
    return event


def _offered(body: dict[str, Any]) -> list[str]:
    return [str(tool.get("name", tool.get("function", {}).get("name"))) for tool in body.get("tools", [])]


def test_a_change_sent_during_a_turn_applies_from_the_next_turn_and_survives_a_restart(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a loop turn waiting for its tool
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    first = _message(server, session_id, STALL_CALL)
    wait_for(server, session_id, lambda events: any(e["type"] == "tool.call" for e in events))
    # when the model, instructions and reasoning effort are changed, and another message follows
    change = _configure(server, session_id, model=NEXT_MODEL, instructions=INSTRUCTIONS, reasoning_effort="low")
    second = _message(server, session_id, "and the second question")
    events = wait_for(server, session_id, settled(second["id"]))
    # then the change is a retained event, its data the change, in order between the two messages
    assert change["type"] == "session.configure" and "input_id" not in change
    assert change["data"] == {"model": NEXT_MODEL, "instructions": INSTRUCTIONS, "reasoning_effort": "low"}
    assert [e["id"] for e in events if e["type"] in ("user.message", "session.configure")] == [
        first["id"],
        change["id"],
        second["id"],
    ]
    assert [e["data"] for e in events if e["type"] == "session.error"] == []
    # and the running turn finished with the old configuration, the next one used the new one
    bodies = scripted_provider.bodies()
    assert [body["model"] for body in bodies] == ["gpt-4.1-mini", "gpt-4.1-mini", "gpt-5-mini"]
    assert INSTRUCTIONS not in json.dumps(bodies[:2]) and bodies[2]["instructions"] == INSTRUCTIONS
    assert bodies[2]["reasoning"]["effort"] == "low"
    assert "call stall" in json.dumps(bodies[2]["input"])  # the conversation went on
    config = server.sdk().get(session_id)["config"]
    assert (config["model"], config["instructions"], config["reasoning_effort"]) == (NEXT_MODEL, INSTRUCTIONS, "low")
    # when the server restarts and the conversation goes on
    server.restart()
    assert server.sdk().get(session_id)["config"]["model"] == NEXT_MODEL
    third = _message(server, session_id, "after the restart")
    wait_for(server, session_id, settled(third["id"]))
    # then the change still holds
    last = scripted_provider.bodies()[-1]
    assert (last["model"], last["instructions"]) == ("gpt-5-mini", INSTRUCTIONS)
    assert "and the second question" in json.dumps(last["input"])


def test_a_tool_removed_is_no_longer_offered_to_the_model(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given an idle session whose first turn called its tool
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    first = _message(server, session_id, 'call stall {"seconds": 0}')
    wait_for(server, session_id, settled(first["id"]))
    assert _offered(scripted_provider.bodies()[0]) == ["stall"]
    # when its tools are changed to none (applied at once: nothing runs or waits)
    reached = len(zoo_server[0].calls("/stall"))
    change = _configure(server, session_id, tools=[])
    assert change["data"] == {"tools": []}
    assert server.sdk().get(session_id)["descriptors"] == []
    # and the conversation asks for the tool again
    second = _message(server, session_id, 'call stall {"seconds": 0}')
    events = wait_for(server, session_id, settled(second["id"]))
    # then the next model request offered no tool (the scripted model says it cannot call it)
    later = scripted_provider.bodies()[2:]
    assert len(later) == 1 and _offered(later[0]) == [], later
    assert "call stall" in json.dumps(later[0]["input"])  # the same conversation, re-opened
    assert "not offered" in events[-2]["data"]["text"]
    assert events[-1]["data"] == {"status": "idle"}
    assert len(zoo_server[0].calls("/stall")) == reached


def test_a_call_to_a_tool_removed_is_refused_without_reaching_it(
    brain_factory: Callable[..., BrainServer], zoo_server: tuple[ToolZoo, LoopbackServer]
) -> None:
    # given a session of the instant runner (which calls a tool whatever it was offered)
    server = brain_factory(tools=[stall_tool(zoo_server[1].url)])
    session_id = str(
        server.sdk().create({"harness": "instant", "config": {"model": FIRST_MODEL, "tools": ["stall"]}})["id"]
    )
    allowed = _message(server, session_id, 'tool:stall {"seconds": 0}')
    wait_for(server, session_id, settled(allowed["id"]))
    # when its tools are changed to none and the harness calls the tool anyway
    reached = len(zoo_server[0].calls("/stall"))
    _configure(server, session_id, tools=[])
    refused = _message(server, session_id, 'tool:stall {"seconds": 0}')
    events = wait_for(server, session_id, settled(refused["id"]))
    # then Brain refuses the call: an error result, the tool never reached
    results = [e["data"] for e in events if e["type"] == "tool.result"]
    assert [result["result"].get("is_error", False) for result in results] == [False, True], results
    assert len(zoo_server[0].calls("/stall")) == reached
    assert events[-1]["data"] == {"status": "idle"}


@pytest.mark.parametrize(
    ("config", "status", "code"),
    [
        pytest.param({"model": "no-provider"}, 400, "invalid_request", id="model_without_provider_case"),
        pytest.param({"model": "elsewhere/x"}, 400, "invalid_request", id="unconfigured_provider_case"),
        pytest.param({"reasoning_effort": "extreme"}, 400, "invalid_request", id="unknown_effort_case"),
        pytest.param({"tools": ["stall", "stall"]}, 400, "invalid_request", id="tool_twice_case"),
        pytest.param({"tools": ["nope"]}, 403, "forbidden", id="unavailable_tool_case"),
        pytest.param({"bindings": []}, 400, "invalid_request", id="bindings_case"),
        pytest.param({}, 400, "invalid_request", id="empty_change_case"),
        pytest.param({"model": None}, 400, "invalid_request", id="null_field_case"),
    ],
)
def test_a_bad_change_is_refused_at_once_and_nothing_is_queued(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
    config: dict[str, Any],
    status: int,
    code: str,
) -> None:
    # given a session with a running turn
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    first = _message(server, session_id, STALL_CALL)
    before = len(history(server, session_id))
    # when a change create would refuse is sent
    with pytest.raises(BrainError) as refused:
        server.sdk().send(session_id, {"type": "session.configure", "config": config})
    # then it is refused as create refuses it, and nothing was recorded or queued
    assert (refused.value.status, refused.value.code) == (status, code)
    events = wait_for(server, session_id, settled(first["id"]))
    assert [e for e in events[:before] if e["type"] == "session.configure"] == []
    assert [e["type"] for e in events if e["type"] in ("session.configure", "session.error")] == []
    assert server.sdk().get(session_id)["config"] == {"model": FIRST_MODEL, "tools": ["stall"]}


def test_a_read_only_token_cannot_configure_and_other_inputs_refuse_a_config(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given an idle session
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    # when a read-only token sends a change, and a message carries a config
    with pytest.raises(BrainError) as reader:
        _configure(server, session_id, name="reader", model=NEXT_MODEL)
    with pytest.raises(BrainError) as misplaced:
        server.sdk().send(session_id, {"type": "user.message", "text": "hi", "config": {"model": NEXT_MODEL}})
    # then both are refused and nothing is recorded
    assert (reader.value.status, reader.value.code) == (403, "forbidden")
    assert (misplaced.value.status, misplaced.value.code) == (400, "invalid_request")
    assert history(server, session_id) == []
    assert server.sdk().get(session_id)["config"]["model"] == FIRST_MODEL


def test_a_change_travels_in_the_archive_and_holds_after_a_restore_on_another_server(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
    tmp_path: Path,
) -> None:
    # given a session on server A, a turn done, then changed while idle, flushed to the archive
    persistence = {"persistence": {"provider": "filesystem", "directory": str(tmp_path / "archive")}}
    old = brain_factory(
        harnesses={"loop": LOOP_HARNESS},
        providers=scripted_provider.providers(),
        tools=[stall_tool(zoo_server[1].url)],
        **persistence,
    )
    session_id = _create(old)
    first = _message(old, session_id, "before the move")
    wait_for(old, session_id, settled(first["id"]))
    _configure(old, session_id, model=NEXT_MODEL, instructions=INSTRUCTIONS, tools=[])
    checkpoint = old.sdk().flush(session_id)["checkpoint"]
    old.stop()
    manifest = json.loads((tmp_path / "archive" / "sessions" / session_id / "checkpoints" / checkpoint).read_bytes())
    assert manifest["session"]["config"] == {"model": NEXT_MODEL, "instructions": INSTRUCTIONS, "tools": []}
    assert manifest["session"]["descriptors"] == []
    # when server B (its own data directory and database) restores that checkpoint and resumes
    new = brain_factory(
        harnesses={"loop": LOOP_HARNESS},
        providers=scripted_provider.providers(),
        tools=[stall_tool(zoo_server[1].url)],
        **persistence,
    )
    assert new.sdk().restore(session_id, checkpoint)["config"]["model"] == NEXT_MODEL
    new.sdk().resume(session_id)
    after = _message(new, session_id, "after the move")
    wait_for(new, session_id, settled(after["id"]))
    # then its turn used the changed configuration, on the same conversation
    last = scripted_provider.bodies()[-1]
    assert (last["model"], last["instructions"], _offered(last)) == ("gpt-5-mini", INSTRUCTIONS, [])
    assert "before the move" in json.dumps(last["input"])


def test_a_change_queued_when_the_server_is_killed_is_reported_cancelled_and_never_applied(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a loop turn waiting for its tool, a change and a message queued behind it
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    first = _message(server, session_id, 'call stall {"seconds": 20}')
    wait_for(server, session_id, lambda events: any(e["type"] == "tool.call" for e in events))
    change = _configure(server, session_id, model=NEXT_MODEL)
    second = _message(server, session_id, "behind the change")
    # when the server is killed and started again
    server.kill()
    server.start()
    # then the turn is reported interrupted, the change and the message cancelled, in order
    events = history(server, session_id)
    errors = [(e["input_id"], e["data"]["message"]) for e in events if e["type"] == "session.error"]
    assert errors == [
        (first["id"], "turn interrupted: server restarted"),
        (change["id"], "queued input interrupted before execution"),
        (second["id"], "queued input interrupted before execution"),
    ]
    # and the change never applied, now or after a resume and another turn
    assert server.sdk().get(session_id)["config"]["model"] == FIRST_MODEL
    with server.client() as client:
        assert client.post(f"/sessions/{session_id}/resume").status_code == 200
    third = _message(server, session_id, "after the restart")
    wait_for(server, session_id, settled(third["id"]))
    assert scripted_provider.bodies()[-1]["model"] == "gpt-4.1-mini"


def test_a_change_resent_with_its_key_is_recorded_and_applied_once_even_after_a_restart(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_server: tuple[ToolZoo, LoopbackServer],
) -> None:
    # given a session with a turn waiting for its tool
    server = loop_brain(brain_factory, scripted_provider, zoo_server[1].url)
    session_id = _create(server)
    first = _message(server, session_id, STALL_CALL)
    change = {"type": "session.configure", "config": {"model": NEXT_MODEL}, "key": "change-1"}
    # when a change is sent with a key, then sent again (a retry after a lost answer)
    sent = server.sdk().send(session_id, change)
    again = server.sdk().send(session_id, change)
    # then the retry answers with the first change, and only one is recorded
    assert again == sent and sent["data"] == {"model": NEXT_MODEL, "key": "change-1"}
    events = wait_for(server, session_id, settled(first["id"]))
    assert [e["id"] for e in events if e["type"] == "session.configure"] == [sent["id"]]
    # and the key names that change: another change with it is refused, nothing recorded
    with pytest.raises(BrainError) as reused:
        server.sdk().send(session_id, {**change, "config": {"model": FIRST_MODEL}})
    assert (reused.value.status, reused.value.code) == (409, "conflict")
    # when the server restarts, the key still answers with the first change
    server.restart()
    assert server.sdk().send(session_id, change) == sent
    events = history(server, session_id)
    assert [e["id"] for e in events if e["type"] == "session.configure"] == [sent["id"]]
    assert server.sdk().get(session_id)["config"]["model"] == NEXT_MODEL
