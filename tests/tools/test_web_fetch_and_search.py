"""web_fetch's limits and web_search's request shapes, against loopback servers: readable text
from HTML, the 2 MiB upstream cap (a gzip bomb stops there), the 128 KiB output cap with its
flag, non-text refused; Brave and Tavily fakes that answer only their documented shapes."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Iterator

import pytest

from tests.support.web_servers import PageServer, SearchFake, started
from toolkits.web import AllowList, Fetcher, SearchClient, WebTools
from toolkits.web.fetch import MAX_OUTPUT_BYTES


@pytest.fixture
def pages() -> Iterator[PageServer]:
    yield from started(PageServer)


@pytest.fixture
def search_fake() -> Iterator[SearchFake]:
    yield from started(SearchFake)


def tools_for(pages: PageServer) -> WebTools:
    return WebTools(fetcher=Fetcher(allow=AllowList([("127.0.0.1", pages.port)])))


async def test_an_html_page_becomes_its_readable_text_without_scripts(pages: PageServer) -> None:
    # when
    result = await tools_for(pages).fetch({"url": f"{pages.url}/page"})
    # then
    text = result["content"][0]["text"]
    assert "is_error" not in result
    assert "Brain fetched this paragraph from a page served on the loopback interface." in text
    assert "SCRIPT-TEXT" not in text and "<p>" not in text
    assert result["structured_content"] == {
        "url": f"{pages.url}/page",
        "final_url": f"{pages.url}/page",
        "status": 200,
        "content_type": "text/html",
        "title": result["structured_content"]["title"],
        "truncated": False,
    }


async def test_a_gzip_bomb_stops_at_the_upstream_cap(pages: PageServer) -> None:
    # given
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started_at = time.monotonic()
    # when
    page = await tools_for(pages).fetcher.fetch(f"{pages.url}/bomb")
    # then: 2 MiB of zeros decoded (control characters, dropped from the text), flagged
    print(
        f"gzip bomb: {time.monotonic() - started_at:.2f} s, max RSS grew {before} -> "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} KiB"
    )
    assert page.truncated is True
    assert page.text == ""


async def test_a_body_past_two_mebibytes_is_cut_and_the_text_past_128_kib_is_flagged(pages: PageServer) -> None:
    # when
    result = await tools_for(pages).fetch({"url": f"{pages.url}/big"})
    page = await tools_for(pages).fetcher.fetch(f"{pages.url}/big")
    # then
    assert page.truncated is True
    assert len(page.text.encode()) == MAX_OUTPUT_BYTES
    assert result["structured_content"]["truncated"] is True
    assert result["content"][0]["text"].endswith("KiB)]")


async def test_long_html_text_is_truncated_at_128_kib_with_the_flag(pages: PageServer) -> None:
    # when
    page = await tools_for(pages).fetcher.fetch(f"{pages.url}/long")
    # then
    assert page.truncated is True
    assert len(page.text.encode()) <= MAX_OUTPUT_BYTES
    assert page.text.startswith("Paragraph 0 of a long page")


async def test_a_non_text_page_and_an_error_status_are_error_results(pages: PageServer) -> None:
    # when
    image = await tools_for(pages).fetch({"url": f"{pages.url}/image"})
    missing = await tools_for(pages).fetch({"url": f"{pages.url}/missing"})
    refused = await tools_for(pages).fetch({"url": "http://169.254.169.254/latest/meta-data/"})
    # then
    assert image == {
        "content": [{"type": "text", "text": "the fetch failed: the page is image/png, not text or HTML"}],
        "is_error": True,
    }
    assert missing["is_error"] is True and "answered HTTP 404" in missing["content"][0]["text"]
    assert refused["is_error"] is True
    assert refused["content"][0]["text"].startswith("refused: 169.254.169.254 is the cloud metadata address")


@pytest.mark.parametrize("provider", ["brave", "tavily"])
async def test_search_sends_the_documented_request_and_returns_titles_snippets_and_urls(
    provider: str, search_fake: SearchFake
) -> None:
    # given
    tools = WebTools(search=SearchClient(provider, key=search_fake.key, endpoint=search_fake.url))
    # when
    result = await tools.search({"query": "loopback pages", "count": 3})
    # then
    assert "is_error" not in result, result
    assert result["structured_content"] == {
        "results": [
            {"title": f"Result {n}", "snippet": f"Snippet {n} & more", "url": f"https://example.org/{n}"}
            for n in range(3)
        ]
    }
    (request,) = search_fake.requests
    if provider == "brave":
        assert request["method"] == "GET"
        assert request["path"] == "/res/v1/web/search?q=loopback+pages&count=3"
        assert request["headers"]["X-Subscription-Token"] == search_fake.key
    else:
        assert (request["method"], request["path"]) == ("POST", "/search")
        assert request["headers"]["Authorization"] == f"Bearer {search_fake.key}"
        assert json.loads(request["body"]) == {"query": "loopback pages", "max_results": 3, "search_depth": "basic"}


@pytest.mark.parametrize("provider", ["brave", "tavily"])
async def test_search_returns_at_most_ten_results_and_a_refused_key_is_an_error_result(
    provider: str, search_fake: SearchFake
) -> None:
    # given
    good = WebTools(search=SearchClient(provider, key=search_fake.key, endpoint=search_fake.url))
    bad = WebTools(search=SearchClient(provider, key="wrong-key-0123456789abcdef", endpoint=search_fake.url))
    # when
    many = await good.search({"query": "everything", "count": 10})
    refused = await bad.search({"query": "everything"})
    # then
    assert len(many["structured_content"]["results"]) == 10
    assert refused == {
        "content": [{"type": "text", "text": "the search failed: the search provider refused the key (HTTP 401)"}],
        "is_error": True,
    }
    assert "wrong-key" not in repr(bad.search_client)
