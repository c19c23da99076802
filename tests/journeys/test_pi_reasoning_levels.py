"""Reasoning levels on the `pi` harness end to end: a real `runbrain`, the scripted provider as the
model, driven through the published client.

A session that sets no reasoning effort runs "off", or, on a model Pi cannot turn reasoning off
for (GPT-5 on OpenAI's Responses API, Gemini 3), that model's lowest level, as Pi itself does;
an explicit level stays strict. "max" asks Pi for its highest level, xhigh, where the model has it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.provider import PI_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, make_server, wait_for_turn_end

pytestmark = pytest.mark.client

TURN_SECONDS = 60.0  # the first turn starts the runner; a busy machine is slow


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def pi_brain(tmp_path_factory: pytest.TempPathFactory, provider: ScriptedProvider) -> Iterator[BrainServer]:
    key = {"api_key_env": "TEST_OPENAI_KEY"}
    providers = {
        "openai": {**key, "base_url": provider.openai_base_url},
        "google": {**key, "base_url": provider.google_base_url},
    }
    server = make_server(tmp_path_factory.mktemp("brain"), harnesses={"pi": PI_HARNESS}, providers=providers)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def scripted(provider: ScriptedProvider) -> ScriptedProvider:
    provider.reset()
    return provider


def _run_turn(server: BrainServer, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Create a pi session with `config`, send one message; the events of its turn."""
    client = server.sdk()
    session = client.create({"harness": "pi", "config": {"tools": [], **config}})
    sent = client.send(session["id"], {"type": "user.message", "text": "hello"})
    events = wait_for_turn_end(server, session["id"], sent["id"], timeout=TURN_SECONDS)
    return [event for event in events if event.get("input_id") == sent["id"]]


def _ended_idle(events: list[dict[str, Any]]) -> bool:
    return events[-1]["type"] == "session.status" and events[-1]["data"]["status"] == "idle"


def test_gpt_5_without_a_reasoning_effort_runs_at_its_lowest_level_and_ends_idle(
    pi_brain: BrainServer, scripted: ScriptedProvider
) -> None:
    # when
    events = _run_turn(pi_brain, {"model": "openai/gpt-5"})
    # then
    assert _ended_idle(events), events
    assert [body["reasoning"]["effort"] for body in scripted.bodies()] == ["minimal"]


def test_gemini_3_without_a_reasoning_effort_runs_at_its_lowest_level_and_ends_idle(
    pi_brain: BrainServer, scripted: ScriptedProvider
) -> None:
    # when
    events = _run_turn(pi_brain, {"model": "google/gemini-3-pro-preview"})
    # then
    assert _ended_idle(events), events
    [body] = scripted.bodies()
    assert body["generationConfig"]["thinkingConfig"]["thinkingLevel"] == "LOW"


def test_an_explicit_off_on_gpt_5_still_fails_the_turn_naming_the_levels_it_accepts(
    pi_brain: BrainServer, scripted: ScriptedProvider
) -> None:
    # when
    events = _run_turn(pi_brain, {"model": "openai/gpt-5", "reasoning_effort": "off"})
    # then
    [error] = [event for event in events if event["type"] == "session.error"]
    assert "accepts minimal, low, medium, high; got 'off'" in error["data"]["message"]
    assert scripted.bodies() == []


def test_max_requests_xhigh_from_a_model_that_offers_it(pi_brain: BrainServer, scripted: ScriptedProvider) -> None:
    # when
    events = _run_turn(pi_brain, {"model": "openai/gpt-5.5", "reasoning_effort": "max"})
    # then
    assert _ended_idle(events), events
    assert [body["reasoning"]["effort"] for body in scripted.bodies()] == ["xhigh"]


def test_max_on_a_model_without_xhigh_fails_the_turn_rather_than_downgrading(
    pi_brain: BrainServer, scripted: ScriptedProvider
) -> None:
    # when
    events = _run_turn(pi_brain, {"model": "openai/gpt-5", "reasoning_effort": "max"})
    # then
    [error] = [event for event in events if event["type"] == "session.error"]
    assert error["data"]["message"].startswith("requested reasoning effort is unsupported by the model")
    assert "got 'max'" in error["data"]["message"]
    assert scripted.bodies() == []
