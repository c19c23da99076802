"""Bedrock specifics: credentials from the key format, region from the endpoint, cancelling the thread."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import ECHO_TOOL, RunnerProcess, ScriptedProviderServer

from runners.loop.providers.bedrock_converse import region_from_url
from runners.media import IMAGE_TYPES

MODEL = "amazon-bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def _open_with_key(runner: RunnerProcess, directory: Path, *, base_url: str, api_key: str) -> None:
    params = {
        "session_id": "s1",
        "dir": str(directory),
        "config": {"model": MODEL, "tools": ["echo"]},
        "tools": [ECHO_TOOL],
        "provider": {"api_key": api_key, "base_url": base_url},
    }
    # the open result says which images the model takes: Bedrock fetches no URLs
    assert runner.request("a1", "open", params)["result"] == {"media": {"types": list(IMAGE_TYPES), "https": False}}


@pytest.mark.parametrize(
    ("label", "api_key", "expected_prefix"),
    [
        ("access_key_case", "AKIDEXAMPLE:secret", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
        ("session_token_case", "ASIAEXAMPLE:secret:token", "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/"),
        ("api_key_case", "ABSKQmVkcm9ja0FQSUtleQ==", "Bearer ABSKQmVkcm9ja0FQSUtleQ=="),
    ],
    ids=["access_key_case", "session_token_case", "api_key_case"],
)
def test_the_key_format_picks_sigv4_or_a_bearer_token(
    label: str,
    api_key: str,
    expected_prefix: str,
    runner: RunnerProcess,
    provider: ScriptedProviderServer,
    tmp_path: Path,
) -> None:
    # given
    _open_with_key(runner, tmp_path / "native", base_url=provider.bedrock_base_url, api_key=api_key)

    # when
    reply, _seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["result"] == {}
    (request,) = provider.requests()
    assert request["headers"]["authorization"].startswith(expected_prefix)
    assert "/us-east-1/bedrock/aws4_request" in request["headers"]["authorization"] or label == "api_key_case"
    assert request["path"] == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"


def test_the_request_carries_the_conversation_tools_and_cache_points(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    _open_with_key(runner, tmp_path / "native", base_url=provider.bedrock_base_url, api_key="k")

    # when
    runner.prompt("a1", "first", turn="t1")
    runner.prompt("a1", "second", turn="t2")

    # then
    first, second = provider.bodies()
    cache_point = {"cachePoint": {"type": "default"}}
    assert second["system"] == [
        {"text": "You are a helpful assistant. Use the available tools when needed."},
        cache_point,
    ]
    assert second["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "echo",
                    "description": ECHO_TOOL["description"],
                    "inputSchema": {"json": ECHO_TOOL["input_schema"]},
                }
            }
        ]
    }
    assert second["inferenceConfig"] == {"maxTokens": 8192}
    assert second["messages"] == [
        {"role": "user", "content": [{"text": "first"}]},
        {"role": "assistant", "content": [{"text": "You said: first"}]},
        {"role": "user", "content": [{"text": "second"}, cache_point]},
    ]
    assert first["messages"] == [{"role": "user", "content": [{"text": "first"}, cache_point]}]


@pytest.mark.parametrize(
    ("label", "url", "region"),
    [
        ("regional_case", "https://bedrock-runtime.eu-west-3.amazonaws.com", "eu-west-3"),
        ("fips_case", "https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com", "us-gov-west-1"),
        ("proxy_case", "https://llm-proxy.example.com/bedrock", "us-east-1"),
    ],
    ids=["regional_case", "fips_case", "proxy_case"],
)
def test_the_region_comes_from_the_endpoint(label: str, url: str, region: str) -> None:
    assert region_from_url(url) == region


def test_interrupting_a_stalled_bedrock_stream_cancels_it_promptly(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    _open_with_key(runner, tmp_path / "native", base_url=provider.bedrock_base_url, api_key="k")
    prompt_id = runner.start("a1", "prompt", {"text": "[stall] a long answer"}, turn="t1")
    runner.wait_for(lambda f: f.get("event") == "assistant.delta")

    # when
    started = time.monotonic()
    interrupt_id = runner.start("a1", "interrupt", None, turn="t1")

    # then
    assert runner.reply_to("a1", prompt_id, timeout=5)["result"] == {"interrupted": True}
    assert runner.reply_to("a1", interrupt_id, timeout=5)["result"] == {}
    assert time.monotonic() - started < 2
    reply, _seen = runner.prompt("a1", "still there?", turn="t2")
    assert reply["result"] == {}
    assert "[stall]" not in str(provider.bodies()[-1])
    # the stalled request was reported as interrupted; nothing else is left
    assert [(f["turn"], f["event"], f["data"]["state"]) for f in runner.drain()] == [
        ("t1", "model.request", "interrupted")
    ]
