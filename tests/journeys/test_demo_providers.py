"""`make run` needs no key for any model family its config names: each provider of
examples/local.json (pointed at the scripted provider, which speaks each wire format) runs a turn
on both agent-loop harnesses through a real runbrain and the published client."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.demo_keys import DEMO_PROVIDER_KEYS
from tests.fixtures.provider import LOOP_HARNESS, PI_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, wait_for_turn_end

pytestmark = pytest.mark.client

ROOT = Path(__file__).resolve().parents[2]
DEMO_CONFIG = json.loads((ROOT / "examples" / "local.json").read_text())
DEMO_PROVIDER_ROOT = "http://127.0.0.1:8091"
CATALOG = json.loads((ROOT / "runners" / "loop" / "models.json").read_text())["models"]
# A model of each demo provider: the first the catalog lists, so a new provider needs no edit here.
DEMO_MODELS = {
    name: next(model for model in sorted(CATALOG) if model.startswith(name + "/")) for name in DEMO_CONFIG["providers"]
}
TURN_SECONDS = 60.0


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    yield scripted
    scripted.stop()


def _demo_providers(scripted: ScriptedProvider) -> dict[str, Any]:
    """The demo config's providers, at this test's scripted provider instead of port 8091."""
    providers = {}
    for name, provider in DEMO_CONFIG["providers"].items():
        assert provider["base_url"].startswith(DEMO_PROVIDER_ROOT), provider
        providers[name] = {**provider, "base_url": scripted.root + provider["base_url"][len(DEMO_PROVIDER_ROOT) :]}
    return providers


@pytest.mark.parametrize("harness", ["loop", "pi"])
@pytest.mark.parametrize("provider_name", sorted(DEMO_MODELS))
def test_each_provider_of_the_demo_config_runs_a_turn_without_a_real_key(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, provider_name: str, harness: str
) -> None:
    # given: a server with the demo's providers and the variables `make run` sets for them
    server = brain_factory(
        start=False, harnesses={"loop": LOOP_HARNESS, "pi": PI_HARNESS}, providers=_demo_providers(provider)
    )
    server.env.update(DEMO_PROVIDER_KEYS)
    server.start()
    model = DEMO_MODELS[provider_name]
    # when: a session on one of that provider's models takes a message
    client = server.sdk()
    session = client.create({"harness": harness, "config": {"model": model, "tools": []}})
    sent = client.send(session["id"], {"type": "user.message", "text": "Hello! What can you do?"})
    events = wait_for_turn_end(server, session["id"], sent["id"], timeout=TURN_SECONDS)
    # then: the turn ended idle with the scripted model's answer
    assert [e["data"]["status"] for e in events if e["type"] == "session.status"] == ["running", "idle"], [
        e["data"] for e in events if e["type"] == "session.error"
    ]
    (reply,) = [e["data"]["text"] for e in events if e["type"] == "assistant.message"]
    assert "scripted demo model" in reply
