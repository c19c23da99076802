"""Model-request accounting end to end: the real `loop` harness in a real `runbrain`, against the
scripted provider speaking each wire format, read back through the published client.

Each model request becomes one retained `model.request` event (2.3.0 `ModelRequest` shape) in the
turn that made it, with the provider's usage mapped as its wire defines it, failed and interrupted
requests included; the events replay in history and over SSE and survive a restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.provider import AGENT_HARNESSES, CODEX_TEST_KEY, ScriptedProvider
from tests.fixtures.server import BrainServer, make_server, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

# The scripted reply's usage, in parts that never overlap; each wire adds them up its own way.
USAGE = {"input": 40, "output": 9, "cache_read": 12, "cache_write": 5, "reasoning": 3}
SCRIPT = {
    "rules": [
        {"match": "count me", "reply": "Counted.", "usage": USAGE},
        {"match": "hang on", "reply": "Thinking it over", "stall": True, "usage": USAGE},
    ]
}
OPENAI_STYLE = {"input_tokens": 57, "output_tokens": 12, "cache_read_tokens": 12, "reasoning_tokens": 3}
ANTHROPIC_STYLE = {"input_tokens": 40, "output_tokens": 12, "cache_read_tokens": 12, "cache_write_tokens": 5}
GEMINI_STYLE = {"input_tokens": 57, "output_tokens": 9, "cache_read_tokens": 12, "reasoning_tokens": 3}
# model, provider, provider's model id, semantics, input_cache, output_reasoning, unmeasured, counts
WIRES = [
    pytest.param(
        "openai/gpt-4.1-mini",
        ("openai", "gpt-4.1-mini", "openai-responses", "included", "included", ["cache_write_tokens"], OPENAI_STYLE),
        id="openai_responses_case",
    ),
    pytest.param(
        "deepseek/deepseek-flash",
        ("deepseek", "deepseek-flash", "openai-completions", "included", "included", ["cache_write_tokens"])
        + (OPENAI_STYLE,),
        id="openai_completions_case",
    ),
    pytest.param(
        "anthropic/claude-sonnet-4-5",
        ("anthropic", "claude-sonnet-4-5", "anthropic-messages", "separate", "included", ["reasoning_tokens"])
        + (ANTHROPIC_STYLE,),
        id="anthropic_messages_case",
    ),
    pytest.param(
        "amazon-bedrock/amazon.nova-pro-v1:0",
        ("amazon-bedrock", "amazon.nova-pro-v1:0", "bedrock-converse", "separate", "included", ["reasoning_tokens"])
        + (ANTHROPIC_STYLE,),
        id="bedrock_converse_case",
    ),
    pytest.param(
        "google/gemini-2.5-flash",
        ("google", "gemini-2.5-flash", "google-genai", "included", "separate", ["cache_write_tokens"], GEMINI_STYLE),
        id="google_genai_case",
    ),
    pytest.param(
        "google-vertex/gemini-3-flash-preview",
        ("google-vertex", "gemini-3-flash-preview", "google-genai", "included", "separate", ["cache_write_tokens"])
        + (GEMINI_STYLE,),
        id="google_vertex_case",
    ),
    pytest.param(
        "mistral/mistral-small-latest",
        ("mistral", "mistral-small-latest", "mistral-conversations", "unreported", "included")
        + (["cache_read_tokens", "cache_write_tokens", "reasoning_tokens"], {"input_tokens": 57, "output_tokens": 12}),
        id="mistral_conversations_case",
    ),
    pytest.param(
        "radius/claude-sonnet-4-5",
        ("radius", "claude-sonnet-4-5", "pi-messages", "separate", "included", ["reasoning_tokens"], ANTHROPIC_STYLE),
        id="pi_messages_case",
    ),
    pytest.param(
        "openai-codex/gpt-5.5",
        ("openai-codex", "gpt-5.5", "openai-responses", "included", "included", ["cache_write_tokens"], OPENAI_STYLE),
        id="openai_codex_responses_case",
    ),
]
# pi-ai's usage on the same replies: input without cached tokens, cache reads and writes apart
# (0 where the wire reports none), reasoning inside output and never counted apart.
PI_OPENAI_STYLE = {"input_tokens": 45, "output_tokens": 12, "cache_read_tokens": 12, "cache_write_tokens": 0}
PI_ANTHROPIC_STYLE = {"input_tokens": 40, "output_tokens": 12, "cache_read_tokens": 12, "cache_write_tokens": 5}
PI_MISTRAL_STYLE = {"input_tokens": 57, "output_tokens": 12, "cache_read_tokens": 0, "cache_write_tokens": 0}
# The wires of Pi's model registry the scripted provider speaks, with what the pi harness reports.
PI_WIRES = [
    pytest.param(
        model, (provider, model_id, f"pi-ai.{api}", "separate", "unreported", ["reasoning_tokens"], counts), id=case
    )
    for model, provider, model_id, api, counts, case in [
        ("openai/gpt-4.1-mini", "openai", "gpt-4.1-mini", "openai-responses", PI_OPENAI_STYLE, "openai_responses_case"),
        (
            "anthropic/claude-sonnet-4-5",
            "anthropic",
            "claude-sonnet-4-5",
            "anthropic-messages",
            PI_ANTHROPIC_STYLE,
            "anthropic_messages_case",
        ),
        (
            "google/gemini-2.5-flash",
            "google",
            "gemini-2.5-flash",
            "google-generative-ai",
            PI_OPENAI_STYLE,
            "google_genai_case",
        ),
        (
            "mistral/mistral-small-latest",
            "mistral",
            "mistral-small-latest",
            "mistral-conversations",
            PI_MISTRAL_STYLE,
            "mistral_conversations_case",
        ),
        (
            "openai-codex/gpt-5.5",
            "openai-codex",
            "gpt-5.5",
            "openai-codex-responses",
            PI_OPENAI_STYLE,
            "openai_codex_responses_case",
        ),
        (
            "radius/claude-sonnet-4-5",
            "radius",
            "claude-sonnet-4-5",
            "pi-messages",
            PI_ANTHROPIC_STYLE,
            "pi_messages_case",
        ),
    ]
]
# pi-ai's Codex client makes up to 4 attempts of its own (the scripted refusal reads as retryable);
# its Gemini and Mistral clients make one, and so does the runner's own Pi messages client.
PI_FAILED_ATTEMPTS = {"openai-codex": "4/4", "google": "1/1", "mistral": "1/1", "radius": "1/1"}
HARNESS_WIRES = [
    pytest.param(harness, *case.values, id=f"{harness}-{case.id}")
    for harness, cases in (("loop", WIRES), ("pi", PI_WIRES))
    for case in cases
]
HEX32 = re.compile(r"^[0-9a-f]{32}$")
TURN_SECONDS = 60.0  # a wire's first turn imports its SDK in the runner; a busy machine is slow


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def loop_brain(tmp_path_factory: pytest.TempPathFactory, provider: ScriptedProvider) -> Iterator[BrainServer]:
    key = {"api_key_env": "TEST_OPENAI_KEY"}
    providers = {
        "openai": {**key, "base_url": provider.openai_base_url},
        "deepseek": {**key, "base_url": provider.openai_base_url},
        "anthropic": {**key, "base_url": provider.anthropic_base_url},
        "amazon-bedrock": {**key, "base_url": provider.bedrock_base_url},
        "google": {**key, "base_url": provider.google_base_url},
        "google-vertex": {**key, "base_url": provider.google_base_url},
        "mistral": {**key, "base_url": provider.mistral_base_url},
        "radius": {**key, "base_url": provider.radius_base_url},
        "openai-codex": {"api_key_env": "TEST_CODEX_TOKEN", "base_url": provider.codex_base_url},
    }
    server = make_server(tmp_path_factory.mktemp("brain"), harnesses=AGENT_HARNESSES, providers=providers)
    server.env["TEST_CODEX_TOKEN"] = CODEX_TEST_KEY  # a ChatGPT access token, as Codex signs in
    server.start()
    yield server
    server.stop()


@pytest.fixture
def scripted(provider: ScriptedProvider) -> ScriptedProvider:
    provider.reset()
    provider.set_script(SCRIPT)
    return provider


def _create(server: BrainServer, model: str, harness: str = "loop") -> str:
    session = server.sdk().create({"harness": harness, "config": {"model": model, "tools": []}})
    return str(session["id"])


def _turn(server: BrainServer, session_id: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """Send `text` through the client; the input id and its turn's events from the client's history."""
    client = server.sdk()
    sent = client.send(session_id, {"type": "user.message", "text": text})
    wait_for_turn_end(server, session_id, sent["id"], timeout=TURN_SECONDS)
    return sent["id"], [e for e in _history(server, session_id) if e.get("input_id") == sent["id"]]


def _history(server: BrainServer, session_id: str) -> list[dict[str, Any]]:
    return list(server.sdk().history(session_id, limit=1000)["events"])


def _record(
    input_id: str,
    expected: tuple[Any, ...],
    *,
    state: str,
    attempts: str,
    provider_request_id: str | None,
    harness: str = "loop",
) -> dict[str, Any]:
    provider, model, semantics, input_cache, output_reasoning, unmeasured, _counts = expected
    record: dict[str, Any] = {
        "purpose": "turn",
        "boundary": input_id,
        "unmeasured": unmeasured,
        "state": state,
        "harness": harness,
        "provider": provider,
        "model": model,
        "attempts": attempts,
        "usage": {
            "availability": "unavailable",
            "semantics": semantics,
            "input_cache": input_cache,
            "output_reasoning": output_reasoning,
        },
    }
    if provider_request_id is not None:
        record["provider_request_id"] = provider_request_id
    return record


def _without_request_id(data: dict[str, Any]) -> dict[str, Any]:
    assert HEX32.match(data["request_id"]), data
    return {key: value for key, value in data.items() if key != "request_id"}


@pytest.mark.parametrize(("harness", "model", "expected"), HARNESS_WIRES)
def test_each_wire_reports_its_completed_and_failed_requests_as_retained_model_request_events(
    loop_brain: BrainServer, scripted: ScriptedProvider, harness: str, model: str, expected: tuple[Any, ...]
) -> None:
    # given
    session_id = _create(loop_brain, model, harness)
    gemini = expected[2] in ("google-genai", "pi-ai.google-generative-ai")
    # when: a request the provider answers with usage, then one it refuses
    counted, events = _turn(loop_brain, session_id, "count me")
    refused, failed_events = _turn(loop_brain, session_id, "[fail 400]")
    # then: one model.request each, between the running status and the turn's outcome
    assert [e["type"] for e in events] == ["session.status", "model.request", "assistant.message", "session.status"]
    assert [e["type"] for e in failed_events] == ["session.status", "model.request", "session.error", "session.status"]
    assert failed_events[-1]["data"] == {"status": "interrupted"}
    failed_attempts = PI_FAILED_ATTEMPTS.get(expected[0], "1/3") if harness == "pi" else "1/3"
    requests = scripted.requests()
    assert len(requests) == 1 + int(failed_attempts[0])
    # the provider's own id: its request-id header, or Gemini's responseId (none on an error; pi-ai
    # keeps no responseId)
    completed_id = None if gemini and harness == "pi" else requests[0]["request_id"]
    completed = _record(
        counted,
        expected,
        state="completed",
        attempts=f"1/{failed_attempts[-1]}",
        provider_request_id=completed_id,
        harness=harness,
    )
    completed["usage"] = {**completed["usage"], "availability": "reported", **expected[6]}
    assert _without_request_id(events[1]["data"]) == completed
    failed_id = None if gemini else requests[-1]["request_id"]
    failure = _record(
        refused, expected, state="failed", attempts=failed_attempts, provider_request_id=failed_id, harness=harness
    )
    assert _without_request_id(failed_events[1]["data"]) == failure
    assert events[1]["data"]["request_id"] != failed_events[1]["data"]["request_id"]
    # and: retained events with cursors, in the turn of their input
    for event in (events[1], failed_events[1]):
        assert event["cursor"] and HEX32.match(event["id"])
    # and: the client's SSE replay carries the same events, cursors included
    replayed = []
    for event in loop_brain.sdk().observe(session_id):
        if event["type"] == "model.request":
            replayed.append(event)
        if event["type"] == "session.status" and event.get("input_id") == refused:
            if event["data"]["status"] == "interrupted":
                break
    assert replayed == [events[1], failed_events[1]]


def test_a_request_the_provider_keeps_failing_is_reported_once_with_every_attempt(
    loop_brain: BrainServer, scripted: ScriptedProvider
) -> None:
    # given
    session_id = _create(loop_brain, "anthropic/claude-sonnet-4-5")
    # when: the provider answers 500 to the first attempt and to both of the SDK's retries
    input_id, events = _turn(loop_brain, session_id, "[fail 500]")
    # then
    (record,) = [e["data"] for e in events if e["type"] == "model.request"]
    requests = scripted.requests()
    assert len(requests) == 3
    assert record["attempts"] == "3/3"
    assert record["provider_request_id"] == requests[-1]["request_id"]  # the last attempt's
    assert (record["state"], record["usage"]["availability"], record["boundary"]) == ("failed", "unavailable", input_id)


@pytest.mark.parametrize("harness", sorted(AGENT_HARNESSES))
def test_an_interrupted_request_reports_the_usage_the_provider_had_sent(
    loop_brain: BrainServer, scripted: ScriptedProvider, harness: str
) -> None:
    # given: an Anthropic stream that stalls after its first delta (message_start carried the input counts)
    session_id = _create(loop_brain, "anthropic/claude-sonnet-4-5", harness)
    client = loop_brain.sdk()
    sent = client.send(session_id, {"type": "user.message", "text": "hang on"})
    for event in client.observe(session_id):  # the first delta comes after message_start's usage
        if event["type"] == "assistant.delta":
            break
    # when
    client.interrupt(session_id)
    wait_for_turn_end(loop_brain, session_id, sent["id"], timeout=TURN_SECONDS)
    # then
    events = [e for e in _history(loop_brain, session_id) if e.get("input_id") == sent["id"]]
    (record,) = [e["data"] for e in events if e["type"] == "model.request"]
    if harness == "pi":  # pi-ai's own semantics; the same counts as loop
        assert _without_request_id(record) == {
            "purpose": "turn",
            "boundary": sent["id"],
            "unmeasured": ["reasoning_tokens"],
            "state": "interrupted",
            "harness": "pi",
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "provider_request_id": scripted.requests()[0]["request_id"],
            "attempts": "1/3",
            "usage": {
                "availability": "partial",
                "semantics": "pi-ai.anthropic-messages",
                "input_tokens": 40,
                "cache_read_tokens": 12,
                "cache_write_tokens": 5,
                "input_cache": "separate",
                "output_reasoning": "unreported",
            },
        }
        assert events[-1]["data"] == {"status": "interrupted"}
        return
    assert _without_request_id(record) == {
        "purpose": "turn",
        "boundary": sent["id"],
        "unmeasured": ["reasoning_tokens"],
        "state": "interrupted",
        "harness": "loop",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "provider_request_id": scripted.requests()[0]["request_id"],
        "attempts": "1/3",
        "usage": {
            "availability": "partial",
            "semantics": "anthropic-messages",
            "input_tokens": 40,
            "cache_read_tokens": 12,
            "cache_write_tokens": 5,
            "input_cache": "separate",
            "output_reasoning": "included",
        },
    }
    assert events[-1]["data"] == {"status": "interrupted"}


def test_model_request_events_are_retained_across_a_restart(
    tmp_path_factory: pytest.TempPathFactory, scripted: ScriptedProvider
) -> None:
    # given
    server = make_server(tmp_path_factory.mktemp("restart"), harnesses=AGENT_HARNESSES, providers=scripted.providers())
    server.start()
    try:
        session_id = _create(server, "openai/gpt-4.1-mini")
        _turn(server, session_id, "count me")
        before = _history(server, session_id)
        # when
        server.restart()
        # then
        after = _history(server, session_id)
        assert after == before
        assert [e["type"] for e in after].count("model.request") == 1
    finally:
        server.stop()
