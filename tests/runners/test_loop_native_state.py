"""Native state: passive open, checkpoint fidelity, crash safety and compaction."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ECHO_TOOL,
    HARNESS_COMMANDS,
    NATIVE_FILES,
    OPEN_MEDIA,
    RunnerProcess,
    ScriptedProviderServer,
    conversation,
    echo_tool_handler,
    instructions,
    read_native_files,
    restore_checkpoint,
)

MODEL = "openai/gpt-4.1-mini"


@pytest.fixture(params=sorted(HARNESS_COMMANDS))
def harness(request: pytest.FixtureRequest) -> str:
    """Each test that starts a runner runs once per agent-loop harness."""
    return str(request.param)


def _two_turns(runner: RunnerProcess, provider: ScriptedProviderServer, directory: Path) -> list[dict[str, Any]]:
    runner.open("a1", directory, model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    runner.prompt("a1", "hello", turn="t1")
    runner.prompt("a1", 'call echo {"text": "x"}', turn="t2", tool_handler=echo_tool_handler)
    return runner.checkpoint("a1")


def test_open_is_passive_and_makes_no_model_or_tool_call(
    spawn_runner: Callable[..., RunnerProcess], provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given a saved session
    first = spawn_runner()
    files = _two_turns(first, provider, tmp_path / "native")
    first.close()
    before = read_native_files(tmp_path / "native", files)
    provider.reset()

    # when it is opened again and left alone
    second = spawn_runner()
    reply = second.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    quiet = second.drain(quiet_for=1.0)

    # then
    # (the open result declares only what the model takes: images of every type, https URLs with loop)
    assert reply == {"attachment": "a1", "id": reply["id"], "result": {"media": OPEN_MEDIA[harness]}}
    assert quiet == []
    assert provider.requests() == []
    assert read_native_files(tmp_path / "native", files) == before
    assert second.checkpoint("a1") == files


def test_open_creates_a_missing_directory_with_an_empty_conversation(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # when
    runner.open("a1", tmp_path / "new" / "native", model=MODEL, base_url=provider.openai_base_url)

    # then
    assert runner.checkpoint("a1") == [{"path": NATIVE_FILES[harness], "size": 0, "append_only": True}]
    assert provider.requests() == []


def test_a_restored_checkpoint_produces_the_identical_next_model_request(
    spawn_runner: Callable[..., RunnerProcess], provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given a checkpointed session and a copy restored into a fresh directory
    original = spawn_runner()
    files = _two_turns(original, provider, tmp_path / "original")
    restore_checkpoint(tmp_path / "original", tmp_path / "restored", files)
    provider.reset()

    # when both take the same next prompt
    original.prompt("a1", "what next?", turn="t3")
    restored = spawn_runner()
    restored.open("b1", tmp_path / "restored", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    restored.prompt("b1", "what next?", turn="t3")

    # then
    from_original, from_restored = provider.bodies()
    assert from_restored == from_original
    assert len(conversation(from_original)) == 8  # 3 prompts, 3 assistant texts, 1 call, 1 result
    assert original.checkpoint("a1") == restored.checkpoint("b1")


def test_checkpoint_sizes_are_exact_and_files_only_grow(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url)
    runner.prompt("a1", "one", turn="t1")
    first = runner.checkpoint("a1")
    first_bytes = read_native_files(tmp_path / "native", first)

    # when
    runner.prompt("a1", "two", turn="t2")
    second = runner.checkpoint("a1")

    # then
    native = NATIVE_FILES[harness]
    data = (tmp_path / "native" / native).read_bytes()
    assert len(first_bytes[native]) == first[0]["size"] < second[0]["size"] == len(data)
    assert data[: first[0]["size"]] == first_bytes[native]
    assert all(json.loads(line) for line in data.splitlines())
    assert b"test-key" not in data


def test_kill_9_mid_turn_leaves_the_checkpointed_files_intact(
    spawn_runner: Callable[..., RunnerProcess], provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given a checkpoint, then a turn stalled mid-stream
    runner = spawn_runner()
    files = _two_turns(runner, provider, tmp_path / "native")
    saved = read_native_files(tmp_path / "native", files)
    runner.start("a1", "prompt", {"text": "[stall] keep talking"}, turn="t3")
    runner.wait_for(lambda f: f.get("event") == "assistant.delta")

    # when
    os.kill(runner.process.pid, signal.SIGKILL)
    runner.process.wait()

    # then the checkpointed prefix is untouched, and reopening without truncation ignores the dead turn
    data = (tmp_path / "native" / NATIVE_FILES[harness]).read_bytes()
    assert data[: files[0]["size"]] == saved[NATIVE_FILES[harness]]
    provider.reset()
    restore_checkpoint(tmp_path / "native", tmp_path / "truncated", files)
    survivor = spawn_runner()
    survivor.open("b1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    survivor.open("b2", tmp_path / "truncated", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    survivor.prompt("b1", "again", turn="t4")
    survivor.prompt("b2", "again", turn="t4")
    untruncated, truncated = provider.bodies()
    assert untruncated["input"] == truncated["input"]
    assert "[stall] keep talking" not in json.dumps(truncated)


def test_it_compacts_old_turns_near_the_context_window_and_restores_the_same_context(
    spawn_runner: Callable[..., RunnerProcess], provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given a model with an 8192-token window and turns of ~2400 tokens each
    runner = spawn_runner()
    runner.open("a1", tmp_path / "native", model="openai/gpt-4", base_url=provider.openai_base_url)
    big = "lorem ipsum " * 400  # 4800 chars ≈ 1200 tokens; the echo doubles it
    for index in range(3):
        runner.prompt("a1", f"turn {index} {big}", turn=f"t{index}")
    files = runner.checkpoint("a1")
    provider.reset()

    # when the next turn would pass 80% of the window
    reply, seen = runner.prompt("a1", "turn 3", turn="t3")

    # then one summary call happens first, and the context starts with the summary
    assert reply["result"] == {}
    summary_request, turn_request = provider.bodies()
    assert "summarize" in instructions(summary_request).lower()
    assert "turn 0" in conversation(summary_request)[0]["content"][0]["text"]
    first = conversation(turn_request)[0]["content"][0]["text"]
    assert first.startswith("Summary of the earlier conversation:\nSummary of the earlier conversation (")
    assert "turn 0" not in json.dumps(conversation(turn_request)[1:])
    assert len(json.dumps(turn_request)) < len(json.dumps(summary_request)) + 4 * 8192
    native = (tmp_path / "native" / NATIVE_FILES[harness]).read_bytes()
    records = [json.loads(line) for line in native.splitlines()]
    assert [r["type"] for r in records].count("compaction") == 1
    # and each call is reported for what it was for, the summary first
    reports = [f["data"] for f in seen if f.get("event") == "model.request"]
    summary_id, turn_id = (request["request_id"] for request in provider.requests())
    assert [(r["purpose"], r["state"], r["provider_request_id"]) for r in reports] == [
        ("compaction", "completed", summary_id),
        ("turn", "completed", turn_id),
    ]

    # and a restored copy rebuilds the compacted context without another summary call
    restore_checkpoint(tmp_path / "native", tmp_path / "restored", runner.checkpoint("a1"))
    assert files[0]["size"] < runner.checkpoint("a1")[0]["size"]
    provider.reset()
    runner.prompt("a1", "turn 4", turn="t4")
    restored = spawn_runner()
    restored.open("b1", tmp_path / "restored", model="openai/gpt-4", base_url=provider.openai_base_url)
    restored.prompt("b1", "turn 4", turn="t4")
    from_original, from_restored = provider.bodies()
    assert from_original == from_restored
    assert conversation(from_original)[0]["content"][0]["text"] == first
