"""Harness failures: provider errors interrupt, Brain's own failures fail; isolation of hosts."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.fixtures.server import (
    INSTANT_RUNNER,
    BrainServer,
    create_session,
    history,
    outline,
    send_ok,
    wait_for_status,
    wait_for_turn_end,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

HEX32 = re.compile(r"^[0-9a-f]{32}$")
QUEUED = "queued input interrupted before execution"
ECHO_TOOL = {
    "name": "echo",
    "description": "Echo a value back.",
    "input_schema": {"type": "object"},
    "url": "http://127.0.0.1:9/echo",
    "tenants": ["acme"],
}


def test_a_provider_error_interrupts_the_session(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    # when
    message = send_ok(module_brain, session["id"], "provider_error")
    queued = send_ok(module_brain, session["id"], "queued")
    events = wait_for_turn_end(module_brain, session["id"], message["id"])
    # then
    assert outline(events[-3:]) == [
        ("session.error", message["id"], {"code": "provider_error", "message": "upstream rate limit exceeded"}),
        ("session.error", queued["id"], {"code": "conflict", "message": QUEUED}),
        ("session.status", message["id"], {"status": "interrupted"}),
    ]
    assert module_brain.sdk().get(session["id"])["status"] == "interrupted"


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        pytest.param("brain_error", "model not in catalog", id="error_reply_case"),
        pytest.param("crash", "harness process exited", id="crash_case"),
        pytest.param("garbage", "harness broke the frame protocol", id="broken_framing_case"),
        pytest.param("badcheckpoint", "checkpoint file 'conversation.jsonl' has", id="bad_checkpoint_case"),
        pytest.param(
            "badevent", "harness sent an invalid frame: unknown runner event 'assistant.bogus'", id="bad_event_case"
        ),
    ],
)
def test_brains_own_failures_fail_the_session(module_brain: BrainServer, prompt: str, message: str) -> None:
    # given
    session = create_session(module_brain)
    # when
    sent = send_ok(module_brain, session["id"], prompt)
    events = wait_for_turn_end(module_brain, session["id"], sent["id"])
    # then
    error, status = events[-2], events[-1]
    assert (error["type"], error["input_id"], error["data"]["code"]) == ("session.error", sent["id"], "brain_error")
    assert error["data"]["message"].startswith(message)
    assert outline([status]) == [("session.status", sent["id"], {"status": "failed"})]
    assert module_brain.sdk().get(session["id"])["status"] == "failed"


@pytest.mark.parametrize("prompt", ["brain_error", "crash", "garbage", "badcheckpoint", "provider_error"])
def test_after_a_failure_resume_then_a_new_message_runs(module_brain: BrainServer, prompt: str) -> None:
    # given
    client = module_brain.sdk()
    session = create_session(module_brain)
    kept = client.send(session["id"], {"type": "user.message", "text": "kept"})
    wait_for_turn_end(module_brain, session["id"], kept["id"])
    failed = client.send(session["id"], {"type": "user.message", "text": prompt})
    wait_for_turn_end(module_brain, session["id"], failed["id"])
    # when
    resumed = client.resume(session["id"])
    probe = client.send(session["id"], {"type": "user.message", "text": "history"})
    events = wait_for_turn_end(module_brain, session["id"], probe["id"])
    # then
    assert resumed["status"] == "idle"
    assert outline(events[-2:]) == [
        (
            "assistant.message",
            probe["id"],
            {"text": "history: kept | history", "usage": {"input": 7, "output": 23}, "stop_reason": "stop"},
        ),
        ("session.status", probe["id"], {"status": "idle"}),
    ]


def test_a_crashed_host_fails_only_the_sessions_it_was_running(brain_factory: Callable[..., BrainServer]) -> None:
    # given: two sessions attached to one host of `instant`, one session on a host of `other`
    server = brain_factory(
        harnesses={
            "instant": {"command": INSTANT_RUNNER, "max_shared": 2},
            "other": {"command": INSTANT_RUNNER, "max_shared": 2},
        }
    )
    neighbour, crasher = create_session(server), create_session(server)
    with server.client() as client:
        elsewhere = client.post(
            "/sessions", json={"harness": "other", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
        ).json()
    for session in (neighbour, crasher, elsewhere):
        warm = send_ok(server, session["id"], "warm")
        wait_for_turn_end(server, session["id"], warm["id"])
    slow = send_ok(server, neighbour["id"], "sleep:30")
    queued = send_ok(server, neighbour["id"], "queued")
    unaffected = send_ok(server, elsewhere["id"], "sleep:30")
    # when
    crash = send_ok(server, crasher["id"], "crash")
    wait_for_turn_end(server, crasher["id"], crash["id"])
    neighbour_events = wait_for_turn_end(server, neighbour["id"], slow["id"])
    # then
    assert outline(history(server, crasher["id"])[-2:]) == [
        ("session.error", crash["id"], {"code": "brain_error", "message": "harness process exited"}),
        ("session.status", crash["id"], {"status": "failed"}),
    ]
    assert outline(neighbour_events[-3:]) == [
        ("session.error", slow["id"], {"code": "brain_error", "message": "harness process exited"}),
        ("session.error", queued["id"], {"code": "conflict", "message": QUEUED}),
        ("session.status", slow["id"], {"status": "failed"}),
    ]
    assert server.sdk().get(elsewhere["id"])["status"] == "running"
    assert history(server, elsewhere["id"])[-1]["data"] == {"status": "running"}
    server.sdk().interrupt(elsewhere["id"])
    assert outline(wait_for_turn_end(server, elsewhere["id"], unaffected["id"])[-2:]) == [
        ("session.error", unaffected["id"], {"code": "conflict", "message": "turn interrupted"}),
        ("session.status", unaffected["id"], {"status": "interrupted"}),
    ]


def test_an_invalid_frame_of_one_session_fails_only_that_session(brain_factory: Callable[..., BrainServer]) -> None:
    # given: two sessions on one host, the neighbour mid-turn
    server = brain_factory(harnesses={"instant": {"command": INSTANT_RUNNER, "max_shared": 2, "max_hosts": 1}})
    neighbour, offender = create_session(server), create_session(server)
    for session in (neighbour, offender):
        warm = send_ok(server, session["id"], "warm")
        wait_for_turn_end(server, session["id"], warm["id"])
    slow = send_ok(server, neighbour["id"], "sleep:1")

    # when
    bad = send_ok(server, offender["id"], "badevent")
    offender_events = wait_for_turn_end(server, offender["id"], bad["id"])
    neighbour_events = wait_for_turn_end(server, neighbour["id"], slow["id"])

    # then: the offender failed; the neighbour's turn and the shared host carried on
    assert offender_events[-1]["data"] == {"status": "failed"}
    assert neighbour_events[-1]["data"] == {"status": "idle"}
    assert neighbour_events[-2]["data"]["text"] == "echo: sleep:1"
    again = send_ok(server, neighbour["id"], "history")
    answer = wait_for_turn_end(server, neighbour["id"], again["id"])[-2]
    assert answer["data"]["text"] == "history: warm | sleep:1 | history"  # same host: its memory is intact


def test_the_harness_child_sees_only_whitelisted_environment_variables(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    # when
    message = send_ok(module_brain, session["id"], "env")
    events = wait_for_turn_end(module_brain, session["id"], message["id"])
    # then: no tokens, provider keys or Django settings; PYTHONPATH lets `python` runners import
    names = set(events[-2]["data"]["text"].removeprefix("env: ").split(","))
    assert names == {"HOME", "LANG", "NO_COLOR", "PATH", "PYTHONPATH"}
    assert "TEST_OPENAI_KEY" not in names
    assert "TEST_ALICE_TOKEN" not in names


def test_a_tool_call_the_session_did_not_enable_is_an_error_result(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    # when
    message = send_ok(module_brain, session["id"], 'tool:echo {"value": "hi"}')
    events = wait_for_turn_end(module_brain, session["id"], message["id"])
    # then
    call, result, answer = events[2], events[3], events[4]
    assert (call["type"], call["input_id"]) == ("tool.call", message["id"])
    assert HEX32.match(call["data"]["id"])
    assert call["data"] == {"id": call["data"]["id"], "name": "echo", "arguments": {"value": "hi"}}
    expected = {"content": [{"type": "text", "text": "tool 'echo' is not enabled for this session"}], "is_error": True}
    expected_data = {"call_id": call["data"]["id"], "result": expected, "outcome": "error"}
    assert outline([result]) == [("tool.result", message["id"], expected_data)]
    assert answer["type"] == "assistant.message"
    assert answer["data"]["text"] == "tool said: " + '{"content": [{"type": "text", "text": ' + (
        '"tool \'echo\' is not enabled for this session"}], "is_error": true}'
    )
    assert events[-1]["data"] == {"status": "idle"}


def test_each_tool_call_gets_its_own_brain_call_id(brain_factory: Callable[..., BrainServer]) -> None:
    # given: the tool is enabled for the session; nothing listens at its URL
    server = brain_factory(tools=[ECHO_TOOL])
    session = create_session(server, tools=["echo"])
    ids = []
    # when
    for value in ("one", "two"):
        message = send_ok(server, session["id"], f'tool:echo {{"value": "{value}"}}')
        events = wait_for_turn_end(server, session["id"], message["id"])
        calls = [e for e in events if e["type"] == "tool.call" and e["input_id"] == message["id"]]
        results = [e for e in events if e["type"] == "tool.result" and e["input_id"] == message["id"]]
        assert len(calls) == len(results) == 1
        assert results[0]["data"]["call_id"] == calls[0]["data"]["id"]
        assert results[0]["data"]["result"]["is_error"] is True
        ids.append(calls[0]["data"]["id"])
    # then: Brain's ids, not the runner's (tc1, tc2)
    assert all(HEX32.match(call_id) for call_id in ids)
    assert len(set(ids)) == 2
    assert wait_for_status(server, session["id"], "idle")["status"] == "idle"
