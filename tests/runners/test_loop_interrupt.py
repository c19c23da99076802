"""Interrupt and steer: cancelling streams and waiting tool calls, guidance mid-turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import (
    ECHO_TOOL,
    HARNESS_COMMANDS,
    NATIVE_FILES,
    RunnerProcess,
    ScriptedProviderServer,
    echo_tool_handler,
    read_native_files,
    restore_checkpoint,
)

MODEL = "openai/gpt-4.1-mini"


@pytest.fixture(params=sorted(HARNESS_COMMANDS))
def harness(request: pytest.FixtureRequest) -> str:
    """Each test that starts a runner runs once per agent-loop harness."""
    return str(request.param)


def test_interrupting_while_a_tool_call_waits_settles_cleanly(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given a checkpointed turn, then a turn waiting on a tool call that Brain never answers
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    runner.prompt("a1", "first", turn="t1")
    files = runner.checkpoint("a1")
    saved = read_native_files(tmp_path / "native", files)
    prompt_id = runner.start("a1", "prompt", {"text": 'call echo {"text": "slow"}'}, turn="t2")
    call = runner.wait_for(lambda f: f.get("method") == "tool.call")

    # when
    interrupt_id = runner.start("a1", "interrupt", None, turn="t2")

    # then the prompt reports the interruption, then the interrupt is acknowledged
    prompt_reply = runner.reply_to("a1", prompt_id)
    interrupt_reply = runner.reply_to("a1", interrupt_id)
    assert prompt_reply == {"attachment": "a1", "turn": "t2", "id": prompt_id, "result": {"interrupted": True}}
    assert interrupt_reply == {"attachment": "a1", "turn": "t2", "id": interrupt_id, "result": {}}
    # a late answer to the abandoned call is ignored, and nothing else happens
    earlier = [f.get("event") or f.get("method") for f in runner.drain()]
    assert earlier == ["assistant.delta", "model.request", "assistant.message"]
    runner.send({"attachment": "a1", "turn": "t2", "id": call["id"], "result": echo_tool_handler(call)})
    assert runner.drain(quiet_for=0.5) == []
    assert len(provider.requests()) == 2
    # truncating to the last checkpoint gives back exactly the previous files
    restore_checkpoint(tmp_path / "native", tmp_path / "resumed", files)
    assert read_native_files(tmp_path / "resumed", files) == saved
    # and the stopped turn is not part of the context, with or without truncation
    provider.reset()
    runner.prompt("a1", "next", turn="t3")
    runner.request("a1", "detach")
    runner.open("a2", tmp_path / "resumed", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    runner.prompt("a2", "next", turn="t3")
    same_process, resumed = provider.bodies()
    assert same_process == resumed
    assert "slow" not in str(resumed)


@pytest.mark.parametrize(
    ("label", "model", "base"),
    [
        ("anthropic_case", "anthropic/claude-sonnet-4-5", "anthropic_base_url"),
        ("mistral_case", "mistral/mistral-small-latest", "mistral_base_url"),
        ("pi_messages_case", "radius/claude-sonnet-4-5", "radius_base_url"),
        ("codex_case", "openai-codex/gpt-5.5", "codex_base_url"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith("_case") else "",
)
def test_interrupting_a_stalled_stream_cancels_it(
    label: str,
    model: str,
    base: str,
    runner: RunnerProcess,
    provider: ScriptedProviderServer,
    tmp_path: Path,
    harness: str,
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base))
    prompt_id = runner.start("a1", "prompt", {"text": "[stall] a long answer"}, turn="t1")
    runner.wait_for(lambda f: f.get("event") == "assistant.delta")

    # when
    interrupt_id = runner.start("a1", "interrupt", None, turn="t1")

    # then
    assert runner.reply_to("a1", prompt_id, timeout=5)["result"] == {"interrupted": True}
    assert runner.reply_to("a1", interrupt_id, timeout=5)["result"] == {}
    reply, _seen = runner.prompt("a1", "still there?", turn="t2")
    assert reply["result"] == {}
    assert "[stall]" not in str(provider.bodies()[-1])


def test_interrupt_without_a_running_turn_is_a_no_op(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url)

    # when
    reply = runner.request("a1", "interrupt", None, turn="t9")

    # then
    assert reply["result"] == {}
    assert provider.requests() == []


@pytest.mark.parametrize(
    ("label", "model", "base"),
    [
        ("responses_case", MODEL, "openai_base_url"),
        ("anthropic_case", "anthropic/claude-sonnet-4-5", "anthropic_base_url"),
    ],
    ids=["responses_case", "anthropic_case"],
)
def test_a_steer_is_added_at_the_next_model_call_of_the_running_turn(
    label: str, model: str, base: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given a turn waiting on its tool call
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base), tools=[ECHO_TOOL])
    prompt_id = runner.start("a1", "prompt", {"text": 'call echo {"text": "a"}'}, turn="t1")
    call = runner.wait_for(lambda f: f.get("method") == "tool.call")

    # when
    steer = runner.request("a1", "steer", {"text": "answer in French"}, turn="t1")
    runner.send({"attachment": "a1", "turn": "t1", "id": call["id"], "result": echo_tool_handler(call)})

    # then
    assert steer == {"attachment": "a1", "turn": "t1", "id": steer["id"], "result": {}}
    assert runner.reply_to("a1", prompt_id) == {"attachment": "a1", "turn": "t1", "id": prompt_id, "result": {}}
    first, second = provider.bodies()
    assert "answer in French" not in str(first)
    assert "answer in French" in str(second["messages"][-1] if "messages" in second else second["input"][-1])


def test_a_steer_during_the_last_generation_gets_one_more_model_call(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given a slowly streamed final answer
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url)
    prompt_id = runner.start("a1", "prompt", {"text": "[slow 300] one two three four five six seven"}, turn="t1")
    runner.wait_for(lambda f: f.get("event") == "assistant.delta")

    # when
    runner.request("a1", "steer", {"text": "be brief"}, turn="t1")

    # then
    assert runner.reply_to("a1", prompt_id)["result"] == {}
    bodies = provider.bodies()
    assert len(bodies) == 2
    assert bodies[1]["input"][-1] == {"role": "user", "content": [{"type": "input_text", "text": "be brief"}]}


def test_a_steer_without_a_running_turn_is_refused(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url)

    # when
    reply = runner.request("a1", "steer", {"text": "x"}, turn="t1")

    # then
    assert reply["error"]["code"] == "brain_error"
    assert provider.requests() == []


def test_an_interrupt_right_behind_its_prompt_still_settles_the_prompt(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given prompt and interrupt arriving in the same pipe write, before the turn could start
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url)
    prompt = {"attachment": "a1", "turn": "t1", "id": "p1", "method": "prompt", "params": {"text": "hi"}}
    interrupt = {"attachment": "a1", "turn": "t1", "id": "i1", "method": "interrupt", "params": None}
    assert runner.process.stdin is not None

    # when
    runner.process.stdin.write((json.dumps(prompt) + "\n" + json.dumps(interrupt) + "\n").encode())
    runner.process.stdin.flush()

    # then
    frames = [runner.reply_to("a1", "p1"), runner.reply_to("a1", "i1")]
    assert [f["result"] for f in frames] == [{"interrupted": True}, {}]
    assert provider.requests() == []
    (native,) = runner.checkpoint("a1")
    assert (native["path"], native["append_only"]) == (NATIVE_FILES[harness], True)
    # loop writes nothing before its first model call; pi's prompt is on a branch no turn end closes
    entries = [json.loads(line) for line in (tmp_path / "native" / native["path"]).read_bytes().splitlines()]
    assert [entry["type"] for entry in entries] == {"loop": [], "pi": ["session", "message"]}[harness]
