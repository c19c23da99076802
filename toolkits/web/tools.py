"""The web tools as a model sees them, one implementation for Brain's `WebProvider` and the
`services.resources` tool service: descriptors and the results of `fetch` and `search`, in the
tools protocol's result shape ({content, structured_content?, is_error?}). A refused URL, a
failed fetch or search is an error result (is_error; nothing was changed anywhere)."""

from __future__ import annotations

from typing import Any

from .addresses import MAX_URL_CHARS, UrlRefused
from .fetch import MAX_OUTPUT_BYTES, Fetcher, FetchFailed, Page
from .search import MAX_QUERY_CHARS, MAX_RESULTS, SearchClient, SearchFailed

__all__ = ["FETCH_DESCRIPTOR", "SEARCH_DESCRIPTOR", "WebTools", "error_result"]

FETCH_DESCRIPTOR: dict[str, Any] = {
    "name": "fetch",
    "description": "Fetch a public web page (http or https) and return its readable text. Pages over "
    f"{MAX_OUTPUT_BYTES // 1024} KiB of text are cut, with truncated: true.",
    "input_schema": {
        "type": "object",
        "properties": {"url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_CHARS}},
        "required": ["url"],
        "additionalProperties": False,
    },
}
SEARCH_DESCRIPTOR: dict[str, Any] = {
    "name": "search",
    "description": f"Search the web. Returns up to {MAX_RESULTS} results, each with a title, a snippet and its URL.",
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
            "count": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}
TRUNCATION_NOTE = (
    f"\n\n[truncated: the page is longer than what was read (2 MiB) or returned ({MAX_OUTPUT_BYTES // 1024} KiB)]"
)


def error_result(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "is_error": True}


def _page_result(page: Page) -> dict[str, Any]:
    metadata = {
        "url": page.url,
        "final_url": page.final_url,
        "status": page.status,
        "content_type": page.content_type,
        "title": page.title,
        "truncated": page.truncated,
    }
    if page.status >= 400:
        return error_result(f"{page.final_url} answered HTTP {page.status}: {page.text[:500]}")
    heading = f"# {page.title}\n\n" if page.title else ""
    text = heading + (page.text or "(the page has no text)") + (TRUNCATION_NOTE if page.truncated else "")
    return {"content": [{"type": "text", "text": text}], "structured_content": metadata}


class WebTools:
    """`fetch` always; `search` when a search client is configured."""

    def __init__(self, *, fetcher: Fetcher | None = None, search: SearchClient | None = None) -> None:
        self.fetcher = fetcher or Fetcher()
        self.search_client = search

    def descriptors(self) -> dict[str, dict[str, Any]]:
        served = {"fetch": FETCH_DESCRIPTOR}
        if self.search_client is not None:
            served["search"] = SEARCH_DESCRIPTOR
        return served

    async def fetch(self, arguments: dict[str, Any]) -> dict[str, Any]:
        url = arguments.get("url")
        if not isinstance(url, str):
            return error_result("url must be a string")
        try:
            page = await self.fetcher.fetch(url)
        except UrlRefused as exc:
            return error_result(f"refused: {exc}")
        except FetchFailed as exc:
            return error_result(f"the fetch failed: {exc}")
        return _page_result(page)

    async def search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.search_client is None:
            return error_result("web search is not configured")
        query, count = arguments.get("query"), arguments.get("count", 5)
        if not isinstance(query, str) or isinstance(count, bool) or not isinstance(count, int):
            return error_result("query must be a string and count an integer")
        try:
            results = await self.search_client.search(query, count=count)
        except SearchFailed as exc:
            return error_result(f"the search failed: {exc}")
        listed = [{"title": result.title, "snippet": result.snippet, "url": result.url} for result in results]
        lines = [f"{n}. {item['title']}\n   {item['url']}\n   {item['snippet']}" for n, item in enumerate(listed, 1)]
        text = "\n".join(lines) if lines else f"No results for {query!r}."
        return {"content": [{"type": "text", "text": text}], "structured_content": {"results": listed}}
