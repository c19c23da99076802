"""Hostile JSON from a real harness child and from the tools it calls: integers beyond 64 bits,
lone surrogates, non-finite numbers and bytes that are not UTF-8.

- runner -> Brain frames (tests/support/hostile_runner.py): each such line fails its turn with a
  brain_error naming the broken rule; Brain logs no exception, and sessions on other hosts go on;
- model -> loop runner -> Brain tool-call arguments: the runner hands undecodable arguments over
  as `_raw_arguments`, the tool's schema refuses them, the turn completes;
- tool service -> Brain results (HTTP and MCP): a result outside the JSON rules is an is_error
  tool result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import (
    INSTANT_RUNNER,
    ROOT,
    BrainServer,
    create_session,
    history,
    make_server,
    send_ok,
    wait_for_turn_end,
)
from tests.support.hostile_mcp import build_app as build_hostile_mcp_app
from tests.support.hostile_runner import HOSTILE_KINDS, VALID_RECORD
from tests.tools.servers import LoopbackServer, ToolZoo

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

HOSTILE_RUNNER = ["python", str(ROOT / "tests" / "support" / "hostile_runner.py")]
BROKEN = "harness broke the frame protocol: frame is not JSON: "
TOO_BIG = "integer out of the 64-bit range"
SURROGATE = "lone surrogate in a string"
REASONS = {
    "event-int": TOO_BIG,
    "delta-negative": TOO_BIG,
    "event-digits": TOO_BIG,
    "call-int": TOO_BIG,
    "reply-int": TOO_BIG,
    "delta-surrogate": SURROGATE,
    "message-surrogate": SURROGATE,
    "key-surrogate": SURROGATE,
    "call-surrogate": SURROGATE,
    "event-infinity": "Infinity is not JSON",
    "event-utf8": "'utf-8' codec can't decode byte 0xed",
}
ANY_OBJECT = {"type": "object"}


def _tool(name: str, url: str, schema: dict[str, Any] = ANY_OBJECT) -> dict[str, Any]:
    return {"name": name, "description": f"{name} for tests.", "input_schema": schema, "url": url, "tenants": ["acme"]}


@pytest.fixture(scope="module")
def hostile_brain(tmp_path_factory: pytest.TempPathFactory, zoo_server: Any) -> Iterator[BrainServer]:
    zoo_url = zoo_server[1].url
    server = make_server(
        tmp_path_factory.mktemp("brain"),
        harnesses={"instant": {"command": INSTANT_RUNNER}, "hostile": {"command": HOSTILE_RUNNER}},
        tools=[_tool("echo", zoo_url + "/echo"), _tool("reply", zoo_url + "/reply")],
    )
    server.start()
    yield server
    server.stop()


def _create(server: BrainServer, harness: str, tools: tuple[str, ...] = ()) -> str:
    body = {"harness": harness, "config": {"model": "openai/gpt-4.1-mini", "tools": list(tools)}}
    with server.client() as client:
        response = client.post("/sessions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _turn(server: BrainServer, session: str, text: str) -> list[dict[str, Any]]:
    """Send `text` and return the events of its turn once it ended."""
    sent = send_ok(server, session, text)
    wait_for_turn_end(server, session, sent["id"])
    return [event for event in history(server, session) if event.get("input_id") == sent["id"]]


def _problems_logged(server: BrainServer) -> list[str]:
    """Log lines of errors or tracebacks: an exception Brain did not turn into an answer."""
    lines = [json.loads(line) for line in server.logs().splitlines() if line.startswith("{")]
    return [str(line) for line in lines if line["level"] in ("error", "critical") or "Traceback" in str(line)]


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
def test_a_frame_outside_the_json_rules_fails_its_turn_and_nothing_else(hostile_brain: BrainServer, kind: str) -> None:
    # given: a hostile session with one completed turn, and a session of another harness mid-turn
    offender = _create(hostile_brain, "hostile", tools=("echo",))
    bystander = _create(hostile_brain, "instant")
    assert _turn(hostile_brain, offender, "warm")[-1]["data"] == {"status": "idle"}
    slow = send_ok(hostile_brain, bystander, "sleep:0.5")
    # when
    events = _turn(hostile_brain, offender, f"hostile:{kind}")
    # then: a brain_error naming the rule; nothing of the line reached the log
    error, status = events[-2], events[-1]
    assert (error["type"], error["data"]["code"]) == ("session.error", "brain_error")
    assert error["data"]["message"].startswith(BROKEN + REASONS[kind]), error
    assert status["data"] == {"status": "failed"}
    assert not any("survived" in json.dumps(event) for event in events)
    assert [event["type"] for event in events if event["type"].startswith("tool.")] == []
    # and: the bystander's turn ran to its end
    bystander_events = wait_for_turn_end(hostile_brain, bystander, slow["id"])
    assert bystander_events[-2]["data"]["text"] == "echo: sleep:0.5"
    assert bystander_events[-1]["data"] == {"status": "idle"}
    # and: resumed, the offender runs a turn that remembers only its completed turn
    with hostile_brain.client() as client:
        assert client.post(f"/sessions/{offender}/resume").json()["status"] == "idle"
    again = _turn(hostile_brain, offender, "history")
    assert again[-2]["data"]["text"] == "history: warm | history"
    assert again[-1]["data"] == {"status": "idle"}
    assert _problems_logged(hostile_brain) == []


def test_a_hostile_frame_on_a_shared_host_leaves_its_neighbour_a_clear_outcome(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: two sessions on one hostile host, the neighbour mid-turn, and a session elsewhere
    server = brain_factory(
        harnesses={
            "instant": {"command": INSTANT_RUNNER},
            "hostile": {"command": HOSTILE_RUNNER, "max_shared": 2, "max_hosts": 1},
        }
    )
    neighbour, offender = _create(server, "hostile"), _create(server, "hostile")
    elsewhere = create_session(server)["id"]
    for session in (neighbour, offender, elsewhere):
        assert _turn(server, session, "warm")[-1]["data"] == {"status": "idle"}
    slow = send_ok(server, neighbour, "sleep:1")
    far = send_ok(server, elsewhere, "sleep:1")
    # when
    events = _turn(server, offender, "hostile:call-surrogate")
    # then: the offender failed with the rule it broke
    assert events[-2]["data"] == {"code": "brain_error", "message": BROKEN + SURROGATE}
    assert events[-1]["data"] == {"status": "failed"}
    # and: the line still named its attachment, so only the offender's turn failed: the neighbour
    # on the same host ran on
    neighbour_events = wait_for_turn_end(server, neighbour, slow["id"])
    outcome = [(e["type"], e["data"]) for e in neighbour_events if e.get("input_id") == slow["id"]][-2:]
    assert outcome == [
        ("assistant.message", neighbour_events[-2]["data"]),
        ("session.status", {"status": "idle"}),
    ], outcome
    # and: the session on another host never noticed
    assert wait_for_turn_end(server, elsewhere, far["id"])[-1]["data"] == {"status": "idle"}
    # and: both hostile sessions work again after a resume, on a live host
    with server.client() as client:
        assert client.post(f"/sessions/{offender}/resume").json()["status"] == "idle"
    for session in (neighbour, offender):
        assert _turn(server, session, "again")[-1]["data"] == {"status": "idle"}
    assert _problems_logged(server) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param('{"content":[{"type":"text","text":"half \\ud800"}]}', "is not valid JSON", id="surrogate_case"),
        pytest.param('{"content":[{"type":"text","text":"x"}],"n":1e999}', "is not valid JSON", id="infinity_case"),
        pytest.param(
            '{"content":[{"type":"text","text":"x"}],"structured_content":{"n":' + "9" * 5000 + "}}",
            "is not valid JSON",
            id="five_thousand_digits_case",
        ),
    ],
)
def test_a_tool_result_outside_the_json_rules_is_an_error_result(
    hostile_brain: BrainServer, zoo: ToolZoo, body: str, reason: str
) -> None:
    # given
    session = _create(hostile_brain, "instant", tools=("reply",))
    # when
    events = _turn(hostile_brain, session, "tool:reply " + json.dumps({"body": body}))
    # then: the tool ran, so its outcome is unknown; the turn goes on with the error
    (result,) = [event["data"]["result"] for event in events if event["type"] == "tool.result"]
    assert result["is_error"] is True and result["unknown_outcome"] is True, result
    assert reason in result["content"][0]["text"]
    assert len(zoo.calls("/reply")) == 1
    assert events[-1]["data"] == {"status": "idle"}
    assert _problems_logged(hostile_brain) == []


def test_a_tool_result_with_an_integer_beyond_64_bits_is_an_error_result_not_a_float(
    hostile_brain: BrainServer, zoo: ToolZoo
) -> None:
    # given
    session = _create(hostile_brain, "instant", tools=("reply",))
    body = '{"content":[{"type":"text","text":"id"}],"structured_content":{"id":18446744073709551616}}'
    # when
    events = _turn(hostile_brain, session, "tool:reply " + json.dumps({"body": body}))
    # then
    (result,) = [event["data"]["result"] for event in events if event["type"] == "tool.result"]
    assert result.get("is_error") is True, result
    assert events[-1]["data"] == {"status": "idle"}


@pytest.fixture(scope="module")
def hostile_mcp_url() -> Iterator[str]:
    server = LoopbackServer(build_hostile_mcp_app(), lifespan="on").start()
    yield server.url + "/mcp"
    server.stop()


def test_an_mcp_result_with_an_integer_beyond_64_bits_is_an_error_result_without_a_crash(
    brain_factory: Callable[..., BrainServer], hostile_mcp_url: str
) -> None:
    # given
    server = brain_factory(tools=[{**_tool("huge", hostile_mcp_url), "mcp_tool": "huge"}])
    session = _create(server, "instant", tools=("huge",))
    # when
    events = _turn(server, session, "tool:huge {}")
    # then: the tool ran, so the outcome is unknown; the error names the result, not a crash
    (result,) = [event["data"]["result"] for event in events if event["type"] == "tool.result"]
    assert result["is_error"] is True and result["unknown_outcome"] is True, result
    assert "inside Brain" not in result["content"][0]["text"], result
    assert events[-1]["data"] == {"status": "idle"}
    assert _problems_logged(server) == []


@pytest.mark.parametrize(
    ("arguments", "raw"),
    [
        pytest.param('{"n": 18446744073709551616}', '{"n": 18446744073709551616}', id="above_uint64_case"),
        pytest.param('{"n": -9223372036854775809}', '{"n": -9223372036854775809}', id="below_int64_case"),
        pytest.param('{"s": "\\ud800"}', '{"s": "\\ud800"}', id="lone_surrogate_case"),
    ],
)
def test_model_tool_arguments_outside_the_json_rules_reach_the_tool_as_raw_text_and_are_refused(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    zoo_url: str,
    zoo: ToolZoo,
    arguments: str,
    raw: str,
) -> None:
    # given: a loop session whose tool takes one integer or string
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}
    server = brain_factory(
        harnesses={"loop": LOOP_HARNESS},
        providers=scripted_provider.providers(),
        tools=[_tool("echo", zoo_url + "/echo", {**schema, "additionalProperties": False})],
    )
    session = _create(server, "loop", tools=("echo",))
    # when: the model streams arguments the frame rules refuse
    events = _turn(server, session, f"call echo {arguments}")
    # then: Brain records them as the runner's raw text, the schema refuses them, the turn ends
    (call,) = [event["data"] for event in events if event["type"] == "tool.call"]
    (result,) = [event["data"]["result"] for event in events if event["type"] == "tool.result"]
    assert call["arguments"] == {"_raw_arguments": raw}
    assert result["is_error"] is True and "invalid arguments for echo" in result["content"][0]["text"]
    assert not result.get("unknown_outcome")
    assert zoo.calls("/echo") == []
    assert events[-1]["data"] == {"status": "idle"}
    # and: the session takes another turn
    assert _turn(server, session, "hi again")[-1]["data"] == {"status": "idle"}
    assert _problems_logged(server) == []


RECORD_REASONS = {
    "not-an-object": "data must be an object",
    "unknown-field": "unknown field 'cost_usd'",
    "harness-claimed": "unknown field 'harness'",
    "string-count": "usage.input_tokens must be an integer from 0 to 9007199254740991",
    "boolean-count": "usage.output_tokens must be an integer from 0 to 9007199254740991",
    "negative-count": "usage.cache_read_tokens must be an integer from 0 to 9007199254740991",
    "float-count": "usage.reasoning_tokens must be an integer from 0 to 9007199254740991",
    "huge-count": "usage.input_tokens must be an integer from 0 to 9007199254740991",
    "long-id": "request_id is not a valid value",
    "unknown-state": "state must be one of completed, failed, interrupted",
    "missing-usage": "usage must be an object",
    "unmeasured-but-present": "usage.input_tokens is named in unmeasured",
    "availability-lies": "usage.availability must be 'partial' for the counts present",
    "attempts-beyond-allowed": "attempts must be <made>/<allowed> with made <= allowed <= 100",
    "unknown-usage-field": "unknown usage field 'cost'",
}


@pytest.mark.parametrize("kind", sorted(RECORD_REASONS))
def test_a_malformed_model_request_fails_its_turn_and_reaches_no_log(hostile_brain: BrainServer, kind: str) -> None:
    # given: a hostile session with one completed turn
    session = _create(hostile_brain, "hostile")
    assert _turn(hostile_brain, session, "warm")[-1]["data"] == {"status": "idle"}
    before = hostile_brain.sdk().history(session, limit=1000)["events"]
    # when
    events = _turn(hostile_brain, session, f"record:{kind}")
    # then: a brain_error naming the broken rule, and nothing of the record or what followed it
    assert [(e["type"], e["data"]) for e in events[-2:]] == [
        (
            "session.error",
            {"code": "brain_error", "message": f"harness sent an invalid model.request: {RECORD_REASONS[kind]}"},
        ),
        ("session.status", {"status": "failed"}),
    ]
    after = hostile_brain.sdk().history(session, limit=1000)["events"]
    assert after[: len(before)] == before  # what the log held is untouched
    assert [e["type"] for e in after[len(before) :]] == [
        "user.message",
        "session.status",
        "session.error",
        "session.status",
    ]
    assert not any("survived" in json.dumps(event) for event in after)
    # and: resumed, the session runs a turn with only its completed turn in mind
    assert hostile_brain.sdk().resume(session)["status"] == "idle"
    again = _turn(hostile_brain, session, "history")
    assert again[-2]["data"]["text"] == "history: warm | history"
    assert _problems_logged(hostile_brain) == []


def test_a_valid_model_request_is_retained_with_the_harness_and_boundary_brain_gives_it(
    hostile_brain: BrainServer,
) -> None:
    # given
    session = _create(hostile_brain, "hostile")
    # when
    events = _turn(hostile_brain, session, "record:valid")
    # then: the record as sent, plus the session's harness and the turn's input id
    input_id = events[0]["input_id"]
    assert [e["type"] for e in events] == ["session.status", "model.request", "assistant.message", "session.status"]
    assert events[1]["input_id"] == input_id and events[1]["cursor"]
    assert events[1]["data"] == {**VALID_RECORD, "harness": "hostile", "boundary": input_id}
    assert events[-1]["data"] == {"status": "idle"}
