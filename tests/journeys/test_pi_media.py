"""Images on the `pi` harness against a real `runbrain` and the scripted provider: a data: image
reaches the model in each wire format pi-ai speaks for it, an https image (which pi-ai cannot
send) fails its turn before any model call and is refused at the send after that, and an image
is kept across a restart and sent again with its turn."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from brain import BrainError

from tests.fixtures.provider import PI_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, wait_for_turn_end
from tests.journeys.test_message_media import DATA_URL, HTTPS_URL, PNG_BASE64

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

# (model, provider settings beyond base_url, base URL path below the scripted provider's root)
TRANSPORTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "openai_responses_case": ("openai/gpt-4.1-mini", {}, "/v1"),
    "anthropic_messages_case": ("anthropic/claude-sonnet-4-5", {}, ""),
    "google_generative_ai_case": ("google/gemini-2.5-flash", {}, ""),
}


def _server(factory: Callable[..., BrainServer], provider: ScriptedProvider, case: str) -> BrainServer:
    model, settings, path = TRANSPORTS[case]
    name = model.split("/", 1)[0]
    server = factory(
        harnesses={"pi": PI_HARNESS},
        providers={name: {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.root + path, **settings}},
    )
    provider.reset()
    return server


def _session(server: BrainServer, case: str) -> str:
    session = server.sdk().create({"harness": "pi", "config": {"model": TRANSPORTS[case][0], "tools": []}})
    return str(session["id"])


def _images_sent(body: dict[str, Any]) -> int:
    """How many times the PNG's bytes appear in a request body, whatever the wire's part shape."""
    return json.dumps(body).count(PNG_BASE64)


@pytest.mark.parametrize("case", list(TRANSPORTS))
def test_a_data_image_reaches_the_model_on_pi(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, case: str
) -> None:
    server = _server(brain_factory, scripted_provider, case)
    session_id = _session(server, case)
    media = [{"type": "image/png", "url": DATA_URL}]
    sent = server.sdk().send(session_id, {"type": "user.message", "text": "what is this?", "media": media})
    events = wait_for_turn_end(server, session_id, sent["id"], timeout=60)
    assert events[-1]["data"]["status"] == "idle", events[-3:]
    (body,) = scripted_provider.bodies()
    assert _images_sent(body) == 1
    assert "what is this?" in json.dumps(body)


def test_an_https_image_fails_before_any_model_call_on_pi_then_is_refused_at_the_send(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    server = _server(brain_factory, scripted_provider, "openai_responses_case")
    session_id = _session(server, "openai_responses_case")
    message = {"type": "user.message", "text": "look", "media": [{"type": "image/png", "url": HTTPS_URL}]}
    sent = server.sdk().send(session_id, message)
    events = [
        e for e in wait_for_turn_end(server, session_id, sent["id"], timeout=60) if e.get("input_id") == sent["id"]
    ]
    error = next(e for e in events if e["type"] == "session.error")["data"]
    assert error["code"] == "invalid_request"
    assert "cannot fetch image URLs" in error["message"]
    assert events[-1]["data"]["status"] == "interrupted"
    assert scripted_provider.requests() == []
    client = server.sdk()
    client.resume(session_id)
    before = len(history(server, session_id))
    with pytest.raises(BrainError) as refused:
        client.send(session_id, message)
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert len(history(server, session_id)) == before


def test_an_image_is_kept_across_a_restart_and_sent_again_with_its_turn_on_pi(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    server = _server(brain_factory, scripted_provider, "anthropic_messages_case")
    session_id = _session(server, "anthropic_messages_case")
    media = [{"type": "image/png", "url": DATA_URL}]
    sent = server.sdk().send(session_id, {"type": "user.message", "text": "remember this", "media": media})
    wait_for_turn_end(server, session_id, sent["id"], timeout=60)
    server.restart()
    scripted_provider.reset()
    later = server.sdk().send(session_id, {"type": "user.message", "text": "what did I show you?"})
    wait_for_turn_end(server, session_id, later["id"], timeout=60)
    kept = next(e for e in history(server, session_id) if e["id"] == sent["id"])
    assert kept["data"]["media"] == media
    (body,) = scripted_provider.bodies()
    assert _images_sent(body) == 1
    assert "remember this" in json.dumps(body) and "what did I show you?" in json.dumps(body)
