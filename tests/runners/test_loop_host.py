"""The host process: many attachments, protocol errors, lifecycle, and no Django."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    ECHO_TOOL,
    HARNESS_COMMANDS,
    NATIVE_FILES,
    OPEN_MEDIA,
    PROJECT_ROOT,
    RunnerProcess,
    ScriptedProviderServer,
    conversation,
    echo_tool_handler,
    runner_env,
)

MODEL = "openai/gpt-4.1-mini"


@pytest.fixture(params=sorted(HARNESS_COMMANDS))
def harness(request: pytest.FixtureRequest) -> str:
    """Each test that starts a runner runs once per agent-loop harness."""
    return str(request.param)


# Runs the runner with every `django` import failing, as if Django were not installed.
_WITHOUT_DJANGO = """
import importlib.abc, runpy, sys
class NoDjango(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "django" or name.startswith("django."):
            raise ImportError("django is not available to runners")
        return None
sys.meta_path.insert(0, NoDjango())
runpy.run_module("runners.loop", run_name="__main__", alter_sys=True)
"""


def test_it_serves_a_turn_with_django_unimportable(
    spawn_runner: Callable[..., RunnerProcess], provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner = spawn_runner([sys.executable, "-c", _WITHOUT_DJANGO])
    runner.open(
        "a1",
        tmp_path / "native",
        model="anthropic/claude-sonnet-4-5",
        base_url=provider.anthropic_base_url,
        tools=[ECHO_TOOL],
    )

    # when
    reply, _seen = runner.prompt("a1", "call echo {}", turn="t1", tool_handler=echo_tool_handler)

    # then
    assert reply["result"] == {}
    assert "django" not in "".join(runner.stderr).lower()


def test_importing_every_runner_module_loads_no_django() -> None:
    # given
    code = (
        "import sys, runners.loop.host, runners.loop.catalog_gen, runners.loop.providers.openai_completions, "
        "runners.loop.providers.openai_responses, runners.loop.providers.anthropic_messages; "
        "server = ('django', 'foundation', 'brainsite', 'sessions_app', 'tools_app', 'persistence_app'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in server))"
    )

    # when
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env=runner_env(), capture_output=True, text=True, check=True
    )

    # then
    assert output.stdout.strip() == "[]"


def test_startup_imports_no_provider_sdk() -> None:
    # when
    sdks = ("openai", "anthropic", "httpx", "boto3", "botocore", "google.genai", "mistralai")
    code = f"import sys, runners.loop.host; print(sorted(m for m in {sdks!r} if m in sys.modules))"
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env=runner_env(), capture_output=True, text=True, check=True
    )

    # then
    assert output.stdout.strip() == "[]"


def test_many_attachments_run_concurrently_in_one_process(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given
    count = 12
    for index in range(count):
        runner.open(
            f"a{index}", tmp_path / f"native-{index}", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL]
        )

    # when every attachment starts a turn with a tool call before any is answered
    prompt_ids = {
        f"a{i}": runner.start(f"a{i}", "prompt", {"text": f'call echo {{"text": "from {i}"}}'}, turn=f"t{i}")
        for i in range(count)
    }
    calls = [runner.wait_for(lambda f: f.get("method") == "tool.call") for _ in range(count)]
    for call in calls:
        runner.send(
            {
                "attachment": call["attachment"],
                "turn": call["turn"],
                "id": call["id"],
                "result": echo_tool_handler(call),
            }
        )

    # then every turn settles with its own result, in its own directory
    for attachment, prompt_id in prompt_ids.items():
        assert runner.reply_to(attachment, prompt_id)["result"] == {}
    assert sorted(c["attachment"] for c in calls) == sorted(prompt_ids)
    assert all(c["params"]["arguments"] == {"text": f"from {c['attachment'][1:]}"} for c in calls)
    for index in range(count):
        text = (tmp_path / f"native-{index}" / NATIVE_FILES[harness]).read_text()
        assert f"from {index}" in text
        assert all(f'"from {other}"' not in text for other in range(count) if other != index)
    assert len(provider.requests()) == 2 * count


def test_detach_releases_one_attachment_without_stopping_peers(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path, harness: str
) -> None:
    # given
    runner.open("a1", tmp_path / "one", model=MODEL, base_url=provider.openai_base_url)
    runner.open("a2", tmp_path / "two", model=MODEL, base_url=provider.openai_base_url)

    # when
    detached = runner.request("a1", "detach")

    # then
    assert detached == {"attachment": "a1", "id": detached["id"], "result": {}}
    assert runner.request("a1", "checkpoint")["error"]["code"] == "brain_error"
    assert runner.prompt("a2", "hi", turn="t1")[0]["result"] == {}
    opened = runner.open("a1", tmp_path / "one", model=MODEL, base_url=provider.openai_base_url)
    assert opened["result"] == {"media": OPEN_MEDIA[harness]}


def test_protocol_misuse_gets_brain_error_replies(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "one", model=MODEL, base_url=provider.openai_base_url)

    # then
    assert runner.request("a1", "dance")["error"] == {"code": "brain_error", "message": "unknown method 'dance'"}
    assert runner.request("zz", "prompt", {"text": "x"}, turn="t")["error"]["code"] == "brain_error"
    assert (
        runner.open("a1", tmp_path / "one", model=MODEL, base_url=provider.openai_base_url)["error"]["code"]
        == "brain_error"
    )
    assert (
        runner.open("a2", tmp_path / "one", model=MODEL, base_url=provider.openai_base_url)["error"]["code"]
        == "brain_error"
    )
    assert runner.request("a3", "open", {"dir": 5})["error"]["code"] == "brain_error"
    assert runner.request("a1", "prompt", {"nope": 1}, turn="t")["error"]["code"] == "brain_error"
    assert provider.requests() == []


def test_a_second_prompt_while_one_runs_is_refused(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "one", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    first = runner.start("a1", "prompt", {"text": "call echo {}"}, turn="t1")
    call = runner.wait_for(lambda f: f.get("method") == "tool.call")

    # when
    second = runner.request("a1", "prompt", {"text": "again"}, turn="t2")
    checkpoint = runner.request("a1", "checkpoint")

    # then
    assert second["error"] == {"code": "brain_error", "message": "a turn is already running on this attachment"}
    assert second["turn"] == "t2"
    assert checkpoint["error"]["code"] == "brain_error"
    runner.send({"attachment": "a1", "turn": "t1", "id": call["id"], "result": echo_tool_handler(call)})
    assert runner.reply_to("a1", first)["result"] == {}


def test_it_exits_0_on_stdin_eof_and_2_on_broken_framing(spawn_runner: Callable[..., RunnerProcess]) -> None:
    # given
    clean, broken = spawn_runner(), spawn_runner()

    # when
    clean.close()
    assert broken.process.stdin is not None
    broken.process.stdin.write(b"this is not json\n")
    broken.process.stdin.flush()

    # then
    assert clean.process.wait(timeout=10) == 0
    assert broken.process.wait(timeout=10) == 2


def test_at_most_32_tool_calls_are_outstanding_per_process(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given one generation asking for 40 parallel calls
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.openai_base_url, tools=[ECHO_TOOL])
    prompt_id = runner.start(
        "a1", "prompt", {"text": "\n".join(f'call echo {{"n": {i}}}' for i in range(40))}, turn="t1"
    )

    # when
    first_wave = [runner.wait_for(lambda f: f.get("method") == "tool.call") for _ in range(32)]
    held_back = [f for f in runner.drain(quiet_for=0.5) if f.get("method") == "tool.call"]
    runner.send(
        {"attachment": "a1", "turn": "t1", "id": first_wave[0]["id"], "result": echo_tool_handler(first_wave[0])}
    )
    next_call = runner.wait_for(lambda f: f.get("method") == "tool.call")

    # then
    assert held_back == []
    assert next_call["params"]["arguments"] == {"n": 32}
    for call in [*first_wave[1:], next_call]:
        runner.send({"attachment": "a1", "turn": "t1", "id": call["id"], "result": echo_tool_handler(call)})
    for _ in range(7):
        call = runner.wait_for(lambda f: f.get("method") == "tool.call")
        runner.send({"attachment": "a1", "turn": "t1", "id": call["id"], "result": echo_tool_handler(call)})
    assert runner.reply_to("a1", prompt_id)["result"] == {}
    assert len(conversation(provider.bodies()[1])) == 2 + 40 + 40  # prompt, text, 40 calls, 40 results
