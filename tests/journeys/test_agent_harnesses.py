"""The journeys every agent-loop harness passes, run once for `loop` and once for `pi`: a real
`runbrain` with both harnesses, the scripted provider as the model, the ToolZoo as the tool
service, driven through the published client.

Each harness offers the model exactly the tools Brain binds and runs them through Brain; a
restarted server recovers a session with no model or tool call until its next message, compacted
context included; native state grows only by each turn's new data; sessions sharing one runner
process never see each other's conversation.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import AGENT_HARNESSES, ScriptedProvider
from tests.fixtures.server import BrainServer, wait_for_turn_end
from tests.tools.servers import ToolZoo

pytestmark = pytest.mark.client

TURN_SECONDS = 60.0  # a harness's first turn starts its runner; a busy machine is slow
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"  # both harnesses start a summary so
BIG = "lorem ipsum " * 400  # 4,800 characters: three such turns fill 80% of gpt-4's 8,192 tokens


@pytest.fixture(params=sorted(AGENT_HARNESSES))
def harness(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def provider(scripted_provider: ScriptedProvider) -> Iterator[ScriptedProvider]:
    yield scripted_provider


def _echo_tool(zoo_url: str) -> dict[str, Any]:
    return {
        "name": "echo",
        "description": "Echo text back.",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "url": zoo_url + "/echo",
        "tenants": ["acme"],
    }


def _brain(factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo_url: str) -> BrainServer:
    return factory(harnesses=AGENT_HARNESSES, providers=provider.providers(), tools=[_echo_tool(zoo_url)])


def _create(server: BrainServer, harness: str, *, model: str = "openai/gpt-4.1-mini", tools: list[str]) -> str:
    session = server.sdk().create({"harness": harness, "config": {"model": model, "tools": tools}})
    return str(session["id"])


def _turn(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    """Send `text`; the events of its turn once it ended idle."""
    sent = server.sdk().send(session_id, {"type": "user.message", "text": text})
    events = wait_for_turn_end(server, session_id, sent["id"], timeout=TURN_SECONDS)
    mine = [event for event in events if event.get("input_id") == sent["id"]]
    assert mine[-1]["type"] == "session.status" and mine[-1]["data"]["status"] == "idle", mine
    return mine


def _native_files(server: BrainServer, session_id: str) -> list[Path]:
    return sorted(
        path for path in server.data_dir.rglob("*.jsonl") if session_id in str(path) and "native" in path.parts
    )


def _runner_processes(server: BrainServer, harness: str) -> int:
    """Children of the server whose command line runs this harness's runner."""
    assert server.process is not None
    marker = {"loop": b"runners.loop", "pi": b"runners/pi/src/main.mjs"}[harness]
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            status, cmdline = (entry / "status").read_text(), (entry / "cmdline").read_bytes()
        except (OSError, NotADirectoryError):
            continue
        parent = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "")
        count += parent == str(server.process.pid) and marker in cmdline
    return count


def _user_texts(body: dict[str, Any]) -> list[str]:
    """The user items of an OpenAI Responses request, as JSON text, in order."""
    return [json.dumps(item.get("content")) for item in body["input"] if item.get("role") == "user"]


def test_the_model_is_offered_exactly_the_bound_tools_and_their_calls_go_through_brain(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo: ToolZoo, zoo_url: str, harness: str
) -> None:
    # given a session bound to echo only
    server = _brain(brain_factory, provider, zoo_url)
    session_id = _create(server, harness, tools=["echo"])
    # when the model calls it, and then asks for a tool it was never offered
    called = _turn(server, session_id, 'call echo {"text": "through brain"}')
    refused = _turn(server, session_id, 'call bash {"command": "ls"}')
    # then every request offered echo and nothing else, with Brain's schema
    bodies = provider.bodies()
    assert [[tool["name"] for tool in body["tools"]] for body in bodies] == [["echo"], ["echo"], ["echo"]]
    assert bodies[0]["tools"][0]["parameters"]["properties"] == {"text": {"type": "string"}}
    # and the call ran once, through Brain's tool.call and tool.result events
    assert [event["type"] for event in called if event["type"].startswith("tool.")] == ["tool.call", "tool.result"]
    assert [call.body["arguments"] for call in zoo.calls("/echo")] == [{"text": "through brain"}]
    assert "I cannot call bash" in refused[-2]["data"]["text"]
    assert not any(event["type"].startswith("tool.") for event in refused)


def test_a_restarted_server_recovers_a_session_without_any_model_or_tool_call(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo: ToolZoo, zoo_url: str, harness: str
) -> None:
    # given a conversation with a tool call
    server = _brain(brain_factory, provider, zoo_url)
    session_id = _create(server, harness, tools=["echo"])
    _turn(server, session_id, "Hello there")
    _turn(server, session_id, 'call echo {"text": "once"}')
    requests_before, calls_before = len(provider.requests()), len(zoo.calls("/echo"))
    # when the server restarts and the session is read back
    server.restart()
    assert server.sdk().get(session_id)["status"] == "idle"
    # then nothing was called to recover it
    assert (len(provider.requests()), len(zoo.calls("/echo"))) == (requests_before, calls_before)
    # and the next message makes one model request that carries the whole conversation, once
    events = _turn(server, session_id, "What was my first message?")
    assert len(provider.requests()) == requests_before + 1 and len(zoo.calls("/echo")) == calls_before
    assert events[-2]["data"]["text"].startswith('Your first message in this conversation was: "Hello there"')
    body = provider.bodies()[-1]
    assert [
        text.count(word) for text, word in zip(_user_texts(body), ["Hello there", "once", "first"], strict=True)
    ] == [1, 1, 1]
    assert json.dumps(body).count("function_call_output") == 1


def test_compacted_context_is_recovered_after_a_restart_without_summarising_again(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo_url: str, harness: str
) -> None:
    # given three big turns on a model with an 8,192-token window
    server = _brain(brain_factory, provider, zoo_url)
    session_id = _create(server, harness, model="openai/gpt-4", tools=[])
    for index in range(3):
        _turn(server, session_id, f"turn {index} {BIG}")
    provider.reset()
    # when the next turn would pass 80% of the window
    events = _turn(server, session_id, "turn 3")
    # then one summary request comes first, reported as such, and the turn starts from the summary
    purposes = [event["data"]["purpose"] for event in events if event["type"] == "model.request"]
    assert purposes == ["compaction", "turn"]
    summary_request, compacted = provider.bodies()
    assert "turn 0" in json.dumps(summary_request) and "turn 0" not in json.dumps(compacted)
    first_user = _user_texts(compacted)[0]
    assert json.loads(first_user)[0]["text"].startswith(SUMMARY_PREFIX)
    # when the server restarts and the conversation goes on
    server.restart()
    provider.reset()
    _turn(server, session_id, "turn 4")
    # then the context is the compacted one, rebuilt from native state with no second summary
    (after,) = provider.bodies()
    assert _user_texts(after)[0] == first_user
    assert "turn 0" not in json.dumps(after) and "turn 3" in json.dumps(after)


def test_native_state_grows_only_by_each_turns_new_data(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo_url: str, harness: str
) -> None:
    # given a session whose history is already large
    server = _brain(brain_factory, provider, zoo_url)
    session_id = _create(server, harness, tools=[])
    _turn(server, session_id, f"a long one {BIG}")
    (native,) = _native_files(server, session_id)
    before = native.read_bytes()
    # when a short turn follows
    _turn(server, session_id, "short")
    after = native.read_bytes()
    # then the file kept every byte it had and grew by far less than the history it holds
    assert after[: len(before)] == before
    growth = len(after) - len(before)
    assert 0 < growth < 2_000 < len(before)
    assert b"short" in after[len(before) :] and b"sk-test-provider-key" not in after


def test_sessions_sharing_one_runner_process_never_see_each_others_conversation(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, zoo: ToolZoo, zoo_url: str, harness: str
) -> None:
    # given four sessions of one tenant (one runner process serves up to max_shared of them)
    server = _brain(brain_factory, provider, zoo_url)
    sessions = [_create(server, harness, tools=["echo"]) for _ in range(4)]
    # when each runs a tool-calling turn at the same time
    failures: list[BaseException] = []

    def run(index: int, session_id: str) -> None:
        try:
            _turn(server, session_id, f'secret-{index}\ncall echo {{"text": "secret-{index}"}}')
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert _runner_processes(server, harness) == 1
    # then each session's history, native state and model requests hold its own secret only
    for index, session_id in enumerate(sessions):
        history = json.dumps(server.sdk().history(session_id, limit=1000)["events"])
        native = b"".join(path.read_bytes() for path in _native_files(server, session_id))
        others = [f"secret-{other}" for other in range(4) if other != index]
        assert f"secret-{index}" in history and f"secret-{index}".encode() in native
        assert not any(secret in history or secret.encode() in native for secret in others)
    for body in provider.bodies():
        assert len({secret for secret in (f"secret-{i}" for i in range(4)) if secret in json.dumps(body)}) == 1
    assert sorted(call.body["arguments"]["text"] for call in zoo.calls("/echo")) == [f"secret-{i}" for i in range(4)]
