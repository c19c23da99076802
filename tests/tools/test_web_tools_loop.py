"""web_fetch end to end: a session created through the published client with
`ManagedTool("web_fetch")` (the raw `config.tools` under 2.0.0), a real `runbrain` with the web
provider installed as a host-config tool, the `loop` harness and the scripted model calling the
tool. The provider is the tests' LoopbackWebProvider: the production class with an AllowList, in
code, of one loopback page server. A second page server, not admitted, counts connections."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history
from tests.support.web_servers import PageServer, SearchFake, started

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
TURN_SECONDS = 60.0  # the loop runner's first turn imports its SDK; a busy machine is slow


@pytest.fixture
def pages() -> Iterator[PageServer]:
    yield from started(PageServer)


@pytest.fixture
def refused_pages() -> Iterator[PageServer]:
    yield from started(PageServer)


@pytest.fixture
def search_fake() -> Iterator[SearchFake]:
    yield from started(SearchFake)


def web_server(brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, pages: PageServer) -> BrainServer:
    tool = {"name": "web_fetch", "transport": "provider", "provider": "web", "operation": "fetch", "tenants": ["acme"]}
    server = brain_factory(start=False, harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), tools=[tool])
    installed = {
        "web": {
            "class": "tests.support.web_provider.LoopbackWebProvider",
            "options": {"test_allow": [["127.0.0.1", pages.port]]},
        }
    }
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed)
    server.start()
    return server


def create_web_session(server: BrainServer, tool: str = "web_fetch") -> str:
    """The 2.3.0 client's own declaration, or its lowered wire body where the client lacks it."""
    import brain

    client = server.sdk("alice")
    if hasattr(brain, "ManagedTool"):
        session = client.create(harness="loop", model=brain.Model(MODEL), tools=[brain.ManagedTool(tool)])
    else:
        session = client.create({"harness": "loop", "config": {"model": MODEL, "tools": [tool]}})
    assert session["config"]["tools"] == [tool]
    return str(session["id"])


def turn(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    sent = server.sdk("alice").send(session_id, {"type": "user.message", "text": text, "key": str(uuid.uuid4())})
    deadline = time.monotonic() + TURN_SECONDS
    while time.monotonic() < deadline:
        events = [event for event in history(server, session_id) if event.get("input_id") == sent["id"]]
        if events and events[-1]["type"] == "session.status" and events[-1]["data"]["status"] != "running":
            return events
        time.sleep(0.05)
    raise AssertionError(f"the turn of {sent['id']} never ended")


def results_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == "tool.result"]


def test_a_turn_fetches_an_admitted_loopback_page_and_the_model_gets_its_readable_text(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, pages: PageServer
) -> None:
    # given
    server = web_server(brain_factory, scripted_provider, pages)
    session_id = create_web_session(server)
    # when
    events = turn(server, session_id, f"call web_fetch {json.dumps({'url': f'{pages.url}/page'})}")
    # then
    (result,) = results_of(events)
    assert result["outcome"] == "ok"
    text = result["result"]["content"][0]["text"]
    assert "Brain fetched this paragraph from a page served on the loopback interface." in text
    assert "SCRIPT-TEXT" not in text
    assert result["result"]["structured_content"]["truncated"] is False
    assert [request["path"] for request in pages.requests] == ["/page"]
    answer = [event["data"]["text"] for event in events if event["type"] == "assistant.message"][-1]
    assert answer.startswith("Tool web_fetch returned:") and "loopback interface" in answer
    assert events[-1]["data"]["status"] == "idle"


def test_a_turn_fetching_a_refused_address_gets_an_error_result_and_no_connection_is_made(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    pages: PageServer,
    refused_pages: PageServer,
) -> None:
    # given
    server = web_server(brain_factory, scripted_provider, pages)
    session_id = create_web_session(server)
    # when: a loopback server that is not admitted, a decimal form of loopback, the metadata address
    urls = [f"{refused_pages.url}/page", f"http://2130706433:{pages.port}/page", "http://169.254.169.254/latest/"]
    outcomes = [results_of(turn(server, session_id, f"call web_fetch {json.dumps({'url': url})}")) for url in urls]
    # then
    texts = []
    for (result,) in outcomes:
        assert (result["outcome"], result["result"]["is_error"]) == ("error", True)
        texts.append(result["result"]["content"][0]["text"])
    assert texts[0] == f"refused: only port 80 is fetched for http URLs, not {refused_pages.port}"
    assert texts[1].startswith("refused: the host '2130706433' is a number that is not a dotted-decimal IPv4")
    assert texts[2].startswith("refused: 169.254.169.254 is the cloud metadata address")
    assert (refused_pages.accepts, pages.accepts) == (0, 0)


def search_server(
    brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, search_fake: SearchFake
) -> BrainServer:
    """The production WebProvider with Brave search at the loopback fake (`search_endpoint`)."""
    tool = {
        "name": "web_search",
        "transport": "provider",
        "provider": "web",
        "operation": "search",
        "tenants": ["acme"],
    }
    server = brain_factory(start=False, harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), tools=[tool])
    options = {"search_provider": "brave", "search_key_env": "BRAVE_TEST_KEY", "search_endpoint": search_fake.url}
    installed = {"web": {"class": "tools_app.providers.web.WebProvider", "options": options}}
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed)
    server.env["BRAVE_TEST_KEY"] = search_fake.key
    server.start()
    return server


def test_a_turn_searches_the_web_through_brave_and_the_model_gets_the_results(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, search_fake: SearchFake
) -> None:
    # given
    server = search_server(brain_factory, scripted_provider, search_fake)
    session_id = create_web_session(server, "web_search")
    # when
    events = turn(server, session_id, f"call web_search {json.dumps({'query': 'brain loopback', 'count': 2})}")
    # then: the fake answered only a request in Brave's documented shape with the key
    (request,) = search_fake.requests
    assert request["method"] == "GET"
    assert request["path"] == "/res/v1/web/search?q=brain+loopback&count=2"
    assert request["headers"]["X-Subscription-Token"] == search_fake.key
    assert request["headers"]["Accept"] == "application/json"
    assert "Authorization" not in request["headers"]
    (result,) = results_of(events)
    assert result["outcome"] == "ok"
    assert result["result"]["structured_content"]["results"] == [
        {"title": "Result 0", "snippet": "Snippet 0 & more", "url": "https://example.org/0"},
        {"title": "Result 1", "snippet": "Snippet 1 & more", "url": "https://example.org/1"},
    ]
    text = result["result"]["content"][0]["text"]
    assert "1. Result 0\n   https://example.org/0" in text and "2. Result 1\n   https://example.org/1" in text
    assert search_fake.key not in json.dumps(events)  # the key never reaches the session's log
    answer = [event["data"]["text"] for event in events if event["type"] == "assistant.message"][-1]
    assert answer.startswith("Tool web_search returned:") and "https://example.org/0" in answer
    assert events[-1]["data"]["status"] == "idle"


def test_the_production_provider_refuses_a_test_allow_list_option_at_startup(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given: the production class with the tests' option
    tool = {"name": "web_fetch", "transport": "provider", "provider": "web", "operation": "fetch", "tenants": ["acme"]}
    server = brain_factory(start=False, harnesses={"loop": LOOP_HARNESS}, providers=scripted_provider.providers())
    server.config["tools"] = [tool]
    installed = {
        "web": {"class": "tools_app.providers.web.WebProvider", "options": {"test_allow": [["127.0.0.1", 80]]}}
    }
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed)
    # when
    with pytest.raises(RuntimeError, match="runbrain did not start") as refused:
        server.start()
    # then
    assert "BRAIN_TOOL_PROVIDERS.web.options: test_allow: unknown option" in str(refused.value)
