"""`pi-messages` reads both shapes of Pi's assistant-message events.

pi-ai's published events carry the message: `done.message` (usage, `responseId`), `error.error`
(`errorMessage`), and each block so far in `partial.content` (a thinking block's signature, a tool
call's id and name). Some gateways flatten those fields onto the event. The scripted provider
speaks either (`"pi_events": "nested"` in its script), and the loop harness reads each alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ECHO_TOOL, RunnerProcess, ScriptedProviderServer, echo_tool_handler

MODEL = "radius/claude-sonnet-4-5"
USAGE = {"input": 40, "output": 9, "cache_read": 12, "cache_write": 5, "reasoning": 3}
SHAPES = ["flat", "nested"]


@pytest.fixture()
def harness() -> str:
    return "loop"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_reasoning_turn_with_a_tool_call_reads_signature_call_usage_and_response_id(
    shape: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    provider.set_script(
        {
            "pi_events": shape,
            "rules": [
                {"match": "call echo", "tool_calls": [{"name": "echo", "arguments": {"text": "r"}}], "usage": USAGE}
            ],
        }
    )
    runner.open(
        "a1",
        tmp_path / "native",
        model=MODEL,
        base_url=provider.radius_base_url,
        tools=[ECHO_TOOL],
        reasoning_effort="high",
    )

    # when
    reply, seen = runner.prompt("a1", "call echo please", turn="t1", tool_handler=echo_tool_handler)

    # then the call went to Brain with its id and name, and the follow-up carried the signature back
    assert reply["result"] == {}
    [call] = [f for f in seen if f.get("method") == "tool.call"]
    assert call["params"]["name"] == "echo"
    first, follow_up = provider.bodies()
    assistant, result = follow_up["context"]["messages"][1:3]
    assert [b["type"] for b in assistant["content"]] == ["thinking", "toolCall"]
    assert assistant["content"][0]["thinkingSignature"].startswith("sig:")
    assert assistant["content"][1]["id"].startswith("call") and assistant["content"][1]["name"] == "echo"
    assert result["toolCallId"] == assistant["content"][1]["id"]
    # and the request was metered from the done event's usage, under the gateway's response id
    [report, _follow] = [f["data"] for f in seen if f.get("event") == "model.request"]
    assert report["provider_request_id"] == provider.requests()[0]["request_id"]
    counts = {k: v for k, v in report["usage"].items() if k.endswith("_tokens")}
    assert counts == {"input_tokens": 40, "output_tokens": 12, "cache_read_tokens": 12, "cache_write_tokens": 5}


@pytest.mark.parametrize("shape", SHAPES)
def test_an_error_event_fails_the_turn_with_its_message(
    shape: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    provider.set_script({"pi_events": shape})
    runner.open("a1", tmp_path / "native", model=MODEL, base_url=provider.radius_base_url)

    # when
    reply, _seen = runner.prompt("a1", "[break] and more words here", turn="t1")

    # then
    assert reply["error"] == {"code": "provider_error", "message": "radius: scripted mid-stream failure"}
