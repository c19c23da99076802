"""Failure separation on the `pi` harness where it cannot match the loop harness word for word.

test_loop_failures.py runs what both harnesses do alike (a tool error goes back to the model, a
tool call answered with an error frame, an unreachable provider, an unsupported reasoning effort,
a native state write failure). Here: provider refusals and broken streams on each wire pi-ai
speaks to the scripted provider, and the models Pi's registry cannot run.

pi-ai's clients retry as their SDKs do (OpenAI and Anthropic twice, as set; Codex up to three
times on its own; Gemini, Vertex AI and Mistral never), so a refusal is asserted to end within
a bound and to be reported as one failed request with every attempt made, not with the loop
harness's exact count.

Bedrock runs with the session's key (runners/pi/src/bedrock.mjs), tested with its refusals here.
Pi's registry has no models of the loop catalog's OpenAI-compatible `deepseek/` or Radius
`radius/` providers, so those wires are not covered on Pi.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import RunnerProcess, ScriptedProviderServer

# Most HTTP attempts any pi-ai client makes for one request (Codex's: four).
MAX_ATTEMPTS = 5
# (model, scripted provider base URL attribute): each wire of Pi's registry the scripted provider speaks.
WIRES = {
    "openai_responses_case": ("openai/gpt-4.1-mini", "openai_base_url"),
    "anthropic_messages_case": ("anthropic/claude-sonnet-4-5", "anthropic_base_url"),
    "google_generative_ai_case": ("google/gemini-2.5-flash", "google_base_url"),
    "google_vertex_case": ("google-vertex/gemini-2.5-flash", "google_base_url"),
    "mistral_conversations_case": ("mistral/mistral-small-latest", "mistral_base_url"),
    "openai_codex_responses_case": ("openai-codex/gpt-5.5", "codex_base_url"),
    "bedrock_converse_case": ("amazon-bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock_base_url"),
}


@pytest.fixture()
def harness() -> str:
    """Every runner in this module is Pi's."""
    return "pi"


@pytest.mark.parametrize("status", [500, 429])
@pytest.mark.parametrize("case", list(WIRES))
def test_a_provider_refusal_fails_the_turn_on_pi_with_provider_error_naming_the_status_after_bounded_attempts(
    case: str, status: int, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    model, base = WIRES[case]
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base))

    # when
    reply, seen = runner.prompt("a1", f"please [fail {status}]", turn="t1")

    # then: the provider and the status it answered are named first
    assert reply["error"]["code"] == "provider_error"
    assert reply["error"]["message"].startswith(f"{model.split('/')[0]} HTTP {status}: ")
    made = len(provider.requests())
    assert 1 <= made <= MAX_ATTEMPTS
    # and: one failed request, reported with every attempt its client would make, and no usage
    assert [
        (f["event"], f["data"]["state"], f["data"]["attempts"], f["data"]["usage"]["availability"]) for f in seen
    ] == [("model.request", "failed", f"{made}/{made}", "unavailable")]


@pytest.mark.parametrize("case", list(WIRES))
def test_a_broken_stream_fails_the_turn_on_pi_with_provider_error_and_leaves_no_trace(
    case: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    model, base = WIRES[case]
    runner.open("a1", tmp_path / "native", model=model, base_url=getattr(provider, base))
    runner.prompt("a1", "before", turn="t1")
    size = runner.checkpoint("a1")[0]["size"]

    # when
    reply, seen = runner.prompt("a1", "[break] and more words here", turn="t2")
    after, _seen = runner.prompt("a1", "after", turn="t3")

    # then the failed turn is not part of the next request
    assert reply["error"]["code"] == "provider_error"
    assert reply["error"]["message"].startswith(f"{model.split('/')[0]}: ")
    events = [f["event"] for f in seen]
    assert events[-1] == "model.request"
    assert set(events[:-1]) == {"assistant.delta"}
    # Anthropic's message_start reported the input counts before the stream broke
    availability = "partial" if case == "anthropic_messages_case" else "unavailable"
    assert (seen[-1]["data"]["state"], seen[-1]["data"]["usage"]["availability"]) == ("failed", availability)
    assert after["result"] == {}
    assert "[break]" not in str(provider.bodies()[-1])
    assert runner.checkpoint("a1")[0]["size"] > size


def test_a_model_outside_pis_registry_fails_the_turn_with_brain_error(
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
        "message": "model 'openai/not-a-model' is neither in Pi's model registry nor in Brain's catalog",
    }
    assert seen == []
    assert provider.requests() == []
    assert runner.checkpoint("a1") == [{"path": "session.jsonl", "size": 0, "append_only": True}]


def test_a_provider_without_a_default_endpoint_needs_a_base_url_on_pi(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given Pi's Azure OpenAI models, which have no endpoint until the host config names one
    runner.request(
        "a1",
        "open",
        {
            "session_id": "s",
            "dir": str(tmp_path / "n"),
            "config": {"model": "azure-openai-responses/gpt-4.1", "tools": []},
            "tools": [],
            "provider": {"api_key": "k"},
        },
    )

    # when
    reply, seen = runner.prompt("a1", "hi", turn="t1")

    # then
    assert reply["error"] == {
        "code": "brain_error",
        "message": "provider 'azure-openai-responses' has no default endpoint; set base_url in the host config",
    }
    assert seen == []
    assert provider.requests() == []


def test_bedrock_on_pi_sends_each_sessions_own_key_and_leaves_none_behind(
    runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given: two sessions on one Pi host, each with its own Bedrock key
    model, base = WIRES["bedrock_converse_case"]
    for attachment, key in (("a1", "bedrock-key-one"), ("a2", "bedrock-key-two")):
        runner.open(attachment, tmp_path / attachment, model=model, base_url=getattr(provider, base), api_key=key)

    # when: each runs a turn, one after the other and again
    replies = [runner.prompt(attachment, "hi", turn=f"t{n}")[0] for n, attachment in enumerate(["a1", "a2", "a1"])]

    # then: each request carried its session's key as a bearer token
    assert [reply.get("result") for reply in replies] == [{}, {}, {}]
    assert [request["headers"].get("authorization") for request in provider.requests()] == [
        "Bearer bedrock-key-one",
        "Bearer bedrock-key-two",
        "Bearer bedrock-key-one",
    ]
