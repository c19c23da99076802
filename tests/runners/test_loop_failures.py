"""Failure separation: tool errors go to the model; provider and Brain failures end the turn.

Tests whose outcome is the same on both agent-loop harnesses run once per harness; the others pin
`loop` (test_pi_failures.py holds Pi's side of them: pi-ai's clients retry differently, and Pi's
model registry names models of its own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ECHO_TOOL, HARNESS_COMMANDS, NATIVE_FILES, RunnerProcess, ScriptedProviderServer

MODEL = "anthropic/claude-sonnet-4-5"
# For a test whose expected outcome is the loop harness's own.
LOOP_ONLY = pytest.mark.parametrize("harness", ["loop"])


@pytest.fixture(params=sorted(HARNESS_COMMANDS))
def harness(request: pytest.FixtureRequest) -> str:
    """Each test that starts a runner runs once per agent-loop harness, unless it is LOOP_ONLY."""
    return str(request.param)


def _failing_tool(_frame: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "disk full"}], "is_error": True}


def test_a_tool_error_goes_back_to_the_model_as_a_tool_result(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.anthropic_base_url, tools=[ECHO_TOOL])

    # when
    reply, seen = runner.prompt("a1", "call echo {}", turn="t1", tool_handler=_failing_tool)

    # then
    assert reply["result"] == {}
    assert seen[-1]["data"]["text"] == "Tool echo failed with: disk full"
    last_user = provider.bodies()[1]["messages"][-1]["content"]
    assert [(b["type"], b["content"], b["is_error"]) for b in last_user] == [("tool_result", "disk full", True)]


@LOOP_ONLY
@pytest.mark.parametrize(
    ("label", "model", "base"),
    [
        ("responses_case", "openai/gpt-4.1-mini", "openai_base_url"),
        ("completions_case", "deepseek/deepseek-flash", "openai_base_url"),
        ("anthropic_case", "anthropic/claude-sonnet-4-5", "anthropic_base_url"),
        ("bedrock_case", "amazon-bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0", "bedrock_base_url"),
        ("gemini_case", "google/gemini-2.5-flash", "google_base_url"),
        ("vertex_case", "google-vertex/gemini-2.5-flash", "google_base_url"),
        ("mistral_case", "mistral/mistral-small-latest", "mistral_base_url"),
        ("pi_messages_case", "radius/gpt-5.5", "radius_base_url"),
        ("codex_case", "openai-codex/gpt-5.5", "codex_base_url"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith("_case") else "",
)
def test_a_provider_500_fails_the_turn_with_provider_error_after_bounded_retries(
    label: str, model: str, base: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base))

    # when
    reply, seen = runner.prompt("a1", "please [fail 500]", turn="t1")

    # then
    assert reply["error"]["code"] == "provider_error"
    assert "500" in reply["error"]["message"]
    assert len(provider.requests()) == 3  # one try and two retries
    # and: one failed request, reported with every attempt and no usage
    assert [
        (f["event"], f["data"]["state"], f["data"]["attempts"], f["data"]["usage"]["availability"]) for f in seen
    ] == [("model.request", "failed", "3/3", "unavailable")]


@LOOP_ONLY
@pytest.mark.parametrize(
    ("label", "model", "base"),
    [
        ("responses_case", "openai/gpt-4.1-mini", "openai_base_url"),
        ("completions_case", "deepseek/deepseek-flash", "openai_base_url"),
        ("anthropic_case", "anthropic/claude-sonnet-4-5", "anthropic_base_url"),
        ("bedrock_case", "amazon-bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0", "bedrock_base_url"),
        ("gemini_case", "google/gemini-2.5-flash", "google_base_url"),
        ("vertex_case", "google-vertex/gemini-2.5-flash", "google_base_url"),
        ("mistral_case", "mistral/mistral-small-latest", "mistral_base_url"),
        ("pi_messages_case", "radius/gpt-5.5", "radius_base_url"),
        ("codex_case", "openai-codex/gpt-5.5", "codex_base_url"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith("_case") else "",
)
def test_a_broken_stream_fails_the_turn_with_provider_error_and_leaves_no_trace(
    label: str, model: str, base: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base))
    runner.prompt("a1", "before", turn="t1")
    size = runner.checkpoint("a1")[0]["size"]

    # when
    reply, seen = runner.prompt("a1", "[break] and more words here", turn="t2")
    runner.prompt("a1", "after", turn="t3")

    # then the failed turn is not part of the next request
    assert reply["error"]["code"] == "provider_error"
    assert [f["event"] for f in seen] == ["assistant.delta", "model.request"]
    # Anthropic's message_start reported the input counts before the stream broke
    availability = "partial" if label == "anthropic_case" else "unavailable"
    assert (seen[1]["data"]["state"], seen[1]["data"]["usage"]["availability"]) == ("failed", availability)
    assert "[break]" not in str(provider.bodies()[-1])
    assert runner.checkpoint("a1")[0]["size"] > size


def test_a_rate_limit_is_a_provider_error(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model="openai/gpt-4.1-mini", base_url=provider.openai_base_url)

    # when
    reply, _seen = runner.prompt("a1", "[fail 429]", turn="t1")

    # then
    assert reply["error"]["code"] == "provider_error"
    assert "429" in reply["error"]["message"]


def test_an_unreachable_provider_is_a_provider_error(runner: RunnerProcess, tmp_path: Path) -> None:
    # given a port nothing listens on
    runner.open("a1", tmp_path / "native", model="openai/gpt-4.1-mini", base_url="http://127.0.0.1:9/v1")

    # when
    reply, _seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["error"]["code"] == "provider_error"


@LOOP_ONLY
def test_a_model_outside_the_catalog_fails_the_turn_with_brain_error(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given: open itself is accepted (it is passive)
    opened = runner.open("a1", tmp_path / "native", model="openai/not-a-model", base_url=provider.openai_base_url)

    # when
    reply, seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert opened["result"] == {}
    assert reply["error"] == {
        "code": "brain_error",
        "message": "model 'openai/not-a-model' is not in the model catalog",
    }
    assert seen == []
    assert provider.requests() == []
    assert runner.checkpoint("a1") == [{"path": "conversation.jsonl", "size": 0, "append_only": True}]


@pytest.mark.parametrize(
    ("label", "model", "effort"),
    [
        ("non_reasoning_model_case", "openai/gpt-4.1-mini", "low"),
        ("level_above_model_case", "anthropic/claude-sonnet-4-5", "max"),
        ("o_series_minimal_case", "openai/o3", "minimal"),
    ],
    ids=["non_reasoning_model_case", "level_above_model_case", "o_series_minimal_case"],
)
def test_an_unsupported_reasoning_effort_fails_the_turn_with_brain_error(
    label: str, model: str, effort: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=model, base_url=provider.openai_base_url, reasoning_effort=effort)

    # when
    reply, seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["error"]["code"] == "brain_error"
    assert reply["error"]["message"].startswith("requested reasoning effort is unsupported by the model")
    assert seen == []
    assert provider.requests() == []


@LOOP_ONLY
def test_a_provider_without_a_default_endpoint_needs_a_base_url(runner: RunnerProcess, tmp_path: Path) -> None:
    # given
    runner.request(
        "a1",
        "open",
        {
            "session_id": "s",
            "dir": str(tmp_path / "n"),
            "config": {"model": "azure/gpt-4.1", "tools": []},
            "tools": [],
            "provider": {"api_key": "k"},
        },
    )

    # when
    reply, _seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["error"]["code"] == "brain_error"
    assert "base_url" in reply["error"]["message"]


def test_a_tool_call_answered_with_an_error_frame_fails_the_turn_with_brain_error(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.anthropic_base_url, tools=[ECHO_TOOL])
    request_id = runner.start("a1", "prompt", {"text": "call echo {}"}, turn="t1")
    call = runner.wait_for(lambda f: f.get("method") == "tool.call")

    # when
    runner.send(
        {
            "attachment": "a1",
            "turn": "t1",
            "id": call["id"],
            "error": {"code": "brain_error", "message": "tool host gone"},
        }
    )

    # then
    reply = runner.reply_to("a1", request_id)
    assert reply["error"]["code"] == "brain_error"
    assert "tool host gone" in reply["error"]["message"]
    assert len(provider.requests()) == 1


def test_a_native_state_write_failure_fails_the_turn_with_brain_error(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given the conversation file replaced by a directory after open, so appending fails
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.anthropic_base_url)
    (tmp_path / "native" / NATIVE_FILES[harness]).unlink()
    (tmp_path / "native" / NATIVE_FILES[harness]).mkdir()

    # when
    reply, seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["error"]["code"] == "brain_error"
    assert "cannot write native state" in reply["error"]["message"]
    assert seen == []
    assert provider.requests() == []
