"""Journeys on the real agent-loop harnesses (`loop` and `pi`) against the scripted provider:
context across restarts, resume after kill -9 of the server, and a runner killed mid-turn."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import AGENT_HARNESSES, ScriptedProvider
from tests.fixtures.server import BrainServer, history, wait_for_status

TURN_TIMEOUT = 30.0
# What a harness's runner process has on its command line.
RUNNER_MARKERS = {"loop": b"runners.loop", "pi": b"runners/pi/src/main.mjs"}


@pytest.fixture(params=sorted(AGENT_HARNESSES))
def harness(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _loop_brain(factory: Callable[..., BrainServer], provider: ScriptedProvider) -> BrainServer:
    return factory(harnesses=AGENT_HARNESSES, providers=provider.providers())


def _create(server: BrainServer, harness: str, model: str = "openai/gpt-4.1-mini") -> str:
    with server.client() as client:
        response = client.post("/sessions", json={"harness": harness, "config": {"model": model, "tools": []}})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _send(server: BrainServer, session_id: str, text: str) -> str:
    with server.client() as client:
        response = client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": text})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _turn_events(server: BrainServer, session_id: str, input_id: str) -> list[dict[str, Any]]:
    """Wait for the turn of `input_id` to end; return its events."""
    deadline = time.monotonic() + TURN_TIMEOUT
    while time.monotonic() < deadline:
        events = [e for e in history(server, session_id) if e.get("input_id") == input_id]
        if any(e["type"] == "session.error" for e in events) or any(
            e["type"] == "session.status" and e["data"]["status"] != "running" for e in events
        ):
            return events
        time.sleep(0.05)
    raise AssertionError(f"turn {input_id} did not end")


def _reply(server: BrainServer, session_id: str, text: str) -> str:
    events = _turn_events(server, session_id, _send(server, session_id, text))
    assert events[-1]["type"] == "session.status" and events[-1]["data"]["status"] == "idle", events
    return "".join(e["data"]["text"] for e in events if e["type"] == "assistant.message")


def _runner_pids(server: BrainServer, harness: str) -> list[int]:
    assert server.process is not None
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent) == server.process.pid and RUNNER_MARKERS[harness] in cmdline:
            pids.append(int(entry.name))
    return pids


def _wait_for_model_request(provider: ScriptedProvider, text: str) -> None:
    deadline = time.monotonic() + TURN_TIMEOUT
    while time.monotonic() < deadline:
        if any(text in str(body) for body in provider.bodies()):
            return
        time.sleep(0.05)
    raise AssertionError(f"the provider never saw {text!r}")


def test_a_conversation_keeps_its_context_across_a_server_restart(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given
    brain = _loop_brain(brain_factory, scripted_provider)
    session_id = _create(brain, harness)
    assert _reply(brain, session_id, "Hello there").startswith("Hello!")
    assert _reply(brain, session_id, "Tell me a fun fact").startswith("Fun fact")
    # when
    brain.restart()
    answer = _reply(brain, session_id, "What was my first message?")
    # then
    assert answer == 'Your first message in this conversation was: "Hello there". You have sent 3 messages so far.'
    last_request = str(scripted_provider.bodies()[-1])
    positions = [last_request.find(text) for text in ("Hello there", "Tell me a fun fact", "What was my first")]
    assert -1 not in positions and positions == sorted(positions)  # the whole history, in order


def test_a_turn_cut_by_kill_9_comes_back_interrupted_and_resumes_without_it(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given
    brain = _loop_brain(brain_factory, scripted_provider)
    session_id = _create(brain, harness)
    assert _reply(brain, session_id, "Hello there").startswith("Hello!")
    stalled = _send(brain, session_id, "[stall] think about this for a long time")
    _wait_for_model_request(scripted_provider, "think about this")
    # when
    brain.kill()
    brain.start()
    # then
    session = wait_for_status(brain, session_id, "interrupted")
    errors = [e for e in history(brain, session_id) if e["type"] == "session.error"]
    assert [(e["input_id"], e["data"]["code"]) for e in errors] == [(stalled, "conflict")]
    with brain.client() as client:
        assert client.post(f"/sessions/{session_id}/resume").json()["status"] == "idle"
    answer = _reply(brain, session_id, "What was my first message?")
    assert answer == 'Your first message in this conversation was: "Hello there". You have sent 2 messages so far.'
    assert session["checkpoint"]["offset"] > 0


def test_a_runner_killed_mid_turn_fails_the_turn_and_resume_restores_the_context(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, harness: str
) -> None:
    # given
    brain = _loop_brain(brain_factory, scripted_provider)
    session_id = _create(brain, harness, model="anthropic/claude-sonnet-4-5")
    assert _reply(brain, session_id, "Hello there").startswith("Hello!")
    stalled = _send(brain, session_id, "[stall] a question that never ends")
    _wait_for_model_request(scripted_provider, "never ends")
    # when
    for pid in _runner_pids(brain, harness):
        os.kill(pid, signal.SIGKILL)
    events = _turn_events(brain, session_id, stalled)
    # then
    assert [(e["type"], e["data"].get("code") or e["data"].get("status")) for e in events[-2:]] == [
        ("session.error", "brain_error"),
        ("session.status", "failed"),
    ]
    with brain.client() as client:
        assert client.post(f"/sessions/{session_id}/resume").json()["status"] == "idle"
    answer = _reply(brain, session_id, "What was my first message?")
    assert answer == 'Your first message in this conversation was: "Hello there". You have sent 2 messages so far.'
