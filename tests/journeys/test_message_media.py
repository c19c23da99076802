"""Images on user messages (client 2.3.0's `Input.media`) through the published client, a real
`runbrain`, the `loop` harness and the scripted provider speaking each wire format: what the
provider receives, what a send refuses, and what is kept across a restart and a restore."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brain import BrainError

from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, wait_for_status, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0


def _png() -> bytes:
    """A real 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0\0\0\0")) + chunk(b"IEND", b"")
    )


PNG_BASE64 = base64.b64encode(_png()).decode()
DATA_URL = "data:image/png;base64," + PNG_BASE64
HTTPS_URL = "https://images.example.com/cat.png"
INPUT_BYTES = 4096  # small, so that an oversized image is cheap to send

# (model, provider settings beyond base_url, base URL path below the scripted provider's root)
TRANSPORTS = {
    "openai_responses_case": ("openai/gpt-4.1-mini", {}, "/v1"),
    "openai_completions_case": ("openai/gpt-4.1-mini", {"api": "openai-completions"}, "/v1"),
    "anthropic_messages_case": ("anthropic/claude-sonnet-4-5", {}, ""),
    "bedrock_converse_case": ("amazon-bedrock/amazon.nova-pro-v1:0", {}, ""),
    "google_generative_ai_case": ("google/gemini-2.5-flash", {}, ""),
    "google_vertex_case": ("google-vertex/gemini-3-flash-preview", {}, ""),
}
# The part each wire's request carries for DATA_URL, exactly.
DATA_PARTS = {
    "openai_responses_case": {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
    "openai_completions_case": {"type": "image_url", "image_url": {"url": DATA_URL}},
    "anthropic_messages_case": {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64},
    },
    "bedrock_converse_case": {"image": {"format": "png", "source": {"bytes": PNG_BASE64}}},
    # google-genai names the part in camelCase and leaves the blob's field names as they are;
    # Google's JSON parser takes both spellings
    "google_generative_ai_case": {"inlineData": {"mime_type": "image/png", "data": PNG_BASE64}},
    "google_vertex_case": {"inlineData": {"mime_type": "image/png", "data": PNG_BASE64}},
}
# ... and for HTTPS_URL; None: the provider cannot fetch URLs, so the turn fails before any call.
URL_PARTS: dict[str, dict[str, Any] | None] = {
    "openai_responses_case": {"type": "input_image", "image_url": HTTPS_URL, "detail": "auto"},
    "openai_completions_case": {"type": "image_url", "image_url": {"url": HTTPS_URL}},
    "anthropic_messages_case": {"type": "image", "source": {"type": "url", "url": HTTPS_URL}},
    "bedrock_converse_case": None,
    "google_generative_ai_case": None,
    "google_vertex_case": {"fileData": {"file_uri": HTTPS_URL, "mime_type": "image/png"}},
}


def _server(factory: Callable[..., BrainServer], provider: ScriptedProvider, case: str, **extra: Any) -> BrainServer:
    model, settings, path = TRANSPORTS[case]
    name = model.split("/", 1)[0]
    return factory(
        harnesses={"loop": LOOP_HARNESS},
        providers={name: {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.root + path, **settings}},
        **extra,
    )


def _session(server: BrainServer, model: str) -> str:
    session = server.sdk().create({"harness": "loop", "config": {"model": model, "tools": []}})
    return str(session["id"])


def _user_parts(body: dict[str, Any]) -> list[Any]:
    """Every part of every user message of a recorded request body, in any wire format (without
    Anthropic's cache_control marker, which the last block carries whatever its kind)."""
    messages = body.get("messages") or body.get("contents") or body.get("input") or []
    parts: list[Any] = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content", message.get("parts"))
            parts.extend(content if isinstance(content, list) else [content])
    return [
        {k: v for k, v in part.items() if k != "cache_control"} if isinstance(part, dict) else part for part in parts
    ]


@pytest.mark.parametrize("case", list(TRANSPORTS))
def test_an_image_reaches_the_provider_in_each_wire_format(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, case: str
) -> None:
    # given
    server = _server(brain_factory, scripted_provider, case)
    session_id = _session(server, TRANSPORTS[case][0])
    # when
    sent = server.sdk().send(
        session_id, {"type": "user.message", "text": "what is this?", "media": [{"type": "image/png", "url": DATA_URL}]}
    )
    events = wait_for_turn_end(server, session_id, sent["id"])
    # then
    assert sent["data"]["media"] == [{"type": "image/png", "url": DATA_URL}]
    assert events[-1]["data"]["status"] == "idle", events[-3:]
    bodies = scripted_provider.bodies()
    assert len(bodies) == 1
    assert DATA_PARTS[case] in _user_parts(bodies[0])


@pytest.mark.parametrize("case", list(TRANSPORTS))
def test_an_https_image_is_passed_as_a_url_or_refused_before_any_model_call(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, case: str
) -> None:
    # given
    server = _server(brain_factory, scripted_provider, case)
    session_id = _session(server, TRANSPORTS[case][0])
    message = {"type": "user.message", "text": "look", "media": [{"type": "image/png", "url": HTTPS_URL}]}
    # when
    sent = server.sdk().send(session_id, message)
    events = [e for e in wait_for_turn_end(server, session_id, sent["id"]) if e.get("input_id") == sent["id"]]
    # then
    expected = URL_PARTS[case]
    if expected is not None:
        assert events[-1]["data"]["status"] == "idle"
        assert expected in _user_parts(scripted_provider.bodies()[0])
        return
    model = TRANSPORTS[case][0]
    error = next(e for e in events if e["type"] == "session.error")["data"]
    assert error == {
        "code": "invalid_request",
        "message": f"media[0]: model {model!r} cannot fetch image URLs; send the image as a data: URL",
    }
    assert events[-1]["data"]["status"] == "interrupted"
    assert scripted_provider.requests() == []
    # and: now that Brain knows, the next such send is refused at once, with nothing recorded
    server.sdk().resume(session_id)
    before = len(history(server, session_id))
    with pytest.raises(BrainError) as refused:
        server.sdk().send(session_id, message)
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert len(history(server, session_id)) == before


_BIG = "data:image/png;base64," + base64.b64encode(_png() + b"\0" * INPUT_BYTES).decode()
_NOT_DATA_OR_HTTPS = "media[0]: the URL must be a data: URL or an https:// URL with a host"
_TYPES = "image/png, image/jpeg, image/gif, image/webp"


def _png_item(url: str, kind: str = "image/png") -> dict[str, str]:
    return {"type": kind, "url": url}


REFUSALS = [
    pytest.param([_png_item("http://images.example.com/a.png")], _NOT_DATA_OR_HTTPS, id="plain_http_case"),
    pytest.param([_png_item("file:///etc/passwd")], _NOT_DATA_OR_HTTPS, id="file_scheme_case"),
    pytest.param(
        [_png_item("https://user:pw@example.com/a.png")],
        "media[0]: the URL must not carry credentials",
        id="credentials_in_url_case",
    ),
    pytest.param(
        [_png_item("data:image/png;base64,***")], "media[0]: the data: URL is not valid base64", id="bad_base64_case"
    ),
    pytest.param(
        [_png_item("data:image/png;base64," + base64.b64encode(b"<svg/>").decode())],
        "media[0]: the data: URL's bytes are not an image of type image/png",
        id="bytes_not_png_case",
    ),
    pytest.param(
        [_png_item("data:image/svg+xml;base64,PHN2Zy8+", "image/svg+xml")],
        f"media[0]: type must be one of {_TYPES} (got 'image/svg+xml')",
        id="svg_case",
    ),
    pytest.param(
        [_png_item(DATA_URL, "image/jpeg")],
        "media[0]: the data: URL declares 'image/png', not 'image/jpeg'",
        id="type_mismatch_case",
    ),
    pytest.param(
        [_png_item(HTTPS_URL, "image")],
        'media[0]: type "image" needs a data: URL; give an https URL its full type, such as image/png',
        id="generic_type_with_url_case",
    ),
    pytest.param(
        [_png_item("https://example.com/" + "a" * 2048)],
        "media[0]: an https URL may have at most 2048 characters",
        id="long_url_case",
    ),
    pytest.param([_png_item(DATA_URL)] * 9, "media allows at most 8 items", id="too_many_case"),
    pytest.param(
        [_png_item(DATA_URL), {"type": "image/png"}], "media.1.url: Field required", id="second_item_without_url_case"
    ),
    pytest.param([_png_item(_BIG)], "text and media urls together exceed input_bytes", id="oversize_case"),
    pytest.param([], "media must not be empty when given", id="empty_list_case"),
]


@pytest.mark.parametrize(("media", "message"), REFUSALS)
def test_a_send_with_a_bad_image_is_refused_naming_the_item(
    module_media_brain: BrainServer, media: list[dict[str, str]], message: str
) -> None:
    # given
    session_id = _session(module_media_brain, "openai/gpt-4.1-mini")
    # when
    with pytest.raises(BrainError) as refused:
        module_media_brain.sdk().send(session_id, {"type": "user.message", "text": "see", "media": media})
    # then
    assert (refused.value.status, refused.value.code, str(refused.value)) == (400, "invalid_request", message)
    assert history(module_media_brain, session_id) == []


@pytest.fixture(scope="module")
def module_media_brain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.fixtures.server import make_server

    server = make_server(
        tmp_path_factory.mktemp("media"),
        harnesses={"loop": LOOP_HARNESS},
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": "http://127.0.0.1:9/v1"}},
        limits={"input_bytes": INPUT_BYTES},
    )
    server.start()
    yield server
    server.stop()


def test_the_generic_image_type_takes_the_type_its_data_url_declares(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given
    server = _server(brain_factory, scripted_provider, "anthropic_messages_case")
    session_id = _session(server, "anthropic/claude-sonnet-4-5")
    # when
    sent = server.sdk().send(
        session_id, {"type": "user.message", "text": "hi", "media": [{"type": "image", "url": DATA_URL}]}
    )
    # then
    assert sent["data"]["media"] == [{"type": "image/png", "url": DATA_URL}]
    assert wait_for_turn_end(server, session_id, sent["id"])[-1]["data"]["status"] == "idle"


def test_a_text_only_model_fails_an_image_before_any_model_call_then_refuses_it_at_the_send(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given: a model the catalog marks text-only
    server = brain_factory(
        harnesses={"loop": LOOP_HARNESS},
        providers={"deepseek": {"api_key_env": "TEST_OPENAI_KEY", "base_url": scripted_provider.root + "/v1"}},
    )
    session_id = _session(server, "deepseek/deepseek-v4-pro")
    image = {"type": "user.message", "text": "see", "media": [{"type": "image/png", "url": DATA_URL}]}
    # when
    sent = server.sdk().send(session_id, image)
    events = [e for e in wait_for_turn_end(server, session_id, sent["id"]) if e.get("input_id") == sent["id"]]
    # then
    reason = "model 'deepseek/deepseek-v4-pro' does not take images"
    assert [(e["type"], e["data"]) for e in events[-2:]] == [
        ("session.error", {"code": "invalid_request", "message": reason}),
        ("session.status", {"status": "interrupted"}),
    ]
    assert scripted_provider.requests() == []
    # and: after a resume the next image is refused at the send, and text still works
    client = server.sdk()
    client.resume(session_id)
    with pytest.raises(BrainError) as refused:
        client.send(session_id, image)
    assert (refused.value.status, refused.value.code, str(refused.value)) == (400, "invalid_request", reason)
    text = client.send(session_id, {"type": "user.message", "text": "plain words"})
    assert wait_for_turn_end(server, session_id, text["id"])[-1]["data"]["status"] == "idle"
    assert len(scripted_provider.requests()) == 1


def test_an_image_is_kept_across_a_restart_and_a_restore_and_replayed_to_the_harness(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    # given: a turn with an image on a server with an archive
    archive = {"persistence": {"provider": "filesystem", "directory": str(tmp_path / "archive"), "interval_seconds": 1}}
    old = _server(brain_factory, scripted_provider, "openai_responses_case", **archive)
    session_id = _session(old, "openai/gpt-4.1-mini")
    media = [{"type": "image/png", "url": DATA_URL}]
    sent = old.sdk().send(session_id, {"type": "user.message", "text": "remember this", "media": media})
    wait_for_turn_end(old, session_id, sent["id"])
    # when: a restart, then a flush and a restore on a second server
    old.restart()
    kept = next(e for e in history(old, session_id) if e["id"] == sent["id"])
    checkpoint = old.sdk().flush(session_id)["checkpoint"]
    old.stop()
    new = _server(brain_factory, scripted_provider, "openai_responses_case", **archive)
    client = new.sdk()
    client.restore(session_id, checkpoint)
    client.resume(session_id)
    wait_for_status(new, session_id, "idle")
    restored = next(e for e in history(new, session_id) if e["id"] == sent["id"])
    later = client.send(session_id, {"type": "user.message", "text": "what did I show you?"})
    wait_for_turn_end(new, session_id, later["id"])
    # then: the event log keeps the image, and the harness sends it again with the earlier turn
    assert kept["data"]["media"] == media and restored["data"]["media"] == media
    last = scripted_provider.bodies()[-1]
    assert _user_parts(last).count(DATA_PARTS["openai_responses_case"]) == 1


def test_the_admin_transcript_shows_a_thumbnail_for_a_data_image_and_a_link_for_an_https_one(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given
    server = _server(brain_factory, scripted_provider, "openai_responses_case")
    create_superuser(server)
    session_id = _session(server, "openai/gpt-4.1-mini")
    media = [{"type": "image/png", "url": DATA_URL}, {"type": "image/png", "url": HTTPS_URL}]
    sent = server.sdk().send(session_id, {"type": "user.message", "text": "two images", "media": media})
    wait_for_turn_end(server, session_id, sent["id"])
    # when
    with AdminClient(server) as admin:
        page = admin.login().page(f"/admin/sessions_app/session/{session_id}/change/")
    # then
    assert page.count('<img class="entry-thumbnail"') == 1
    assert f'src="{DATA_URL}"' in page and 'width="160" height="160"' in page
    assert f'<a class="entry-image-link" href="{HTTPS_URL}" rel="noopener noreferrer nofollow"' in page
    assert f'src="{HTTPS_URL}"' not in page
