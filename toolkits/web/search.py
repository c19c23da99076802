"""`web_search`: Brave or Tavily over plain HTTP, in their documented request shapes.

- Brave: `GET {endpoint}/res/v1/web/search?q=QUERY&count=N` with `X-Subscription-Token: KEY`
  and `Accept: application/json`; results in `web.results[]` as `{title, url, description}`.
- Tavily: `POST {endpoint}/search` with `Authorization: Bearer KEY` and the JSON body
  `{"query": QUERY, "max_results": N, "search_depth": "basic"}`; results in `results[]` as
  `{title, url, content}`.

The endpoint is the operator's (the provider's public API unless configured), never the
model's; answers are read up to 1 MiB decoded and each field is bounded. No retries.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from .body import BodyError, BoundedBody

__all__ = ["ENDPOINTS", "MAX_RESULTS", "SearchClient", "SearchFailed", "SearchResult"]

SearchProvider = Literal["brave", "tavily"]
ENDPOINTS: dict[str, str] = {"brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}
MAX_RESULTS = 10  # spec (tools/resources): up to 10 results
MAX_QUERY_CHARS = 400  # Brave refuses queries over 400 characters
MAX_ANSWER_BYTES = 1 << 20  # ten results are a few KiB; more is not an answer
MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 1000
MAX_URL_CHARS = 2048
SEARCH_SECONDS = 15.0  # the provider's whole answer
TAGS = re.compile(r"<[^>]{0,200}>")  # Brave marks matches with <strong>


class SearchFailed(Exception):
    """A search that produced no results list; the message is safe to show (never the key)."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    snippet: str
    url: str


def _field(value: object, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    return html.unescape(TAGS.sub("", value)).strip()[:limit]


def _results(items: object, snippet_key: str, count: int) -> list[SearchResult]:
    if not isinstance(items, list):
        raise SearchFailed("the search provider's answer has no results list")
    results = []
    for item in items:
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > MAX_URL_CHARS:
            continue
        title = _field(item.get("title"), MAX_TITLE_CHARS)
        results.append(SearchResult(title=title, snippet=_field(item.get(snippet_key), MAX_SNIPPET_CHARS), url=url))
        if len(results) == count:
            break
    return results


class SearchClient:
    def __init__(self, provider: str, *, key: str, endpoint: str | None = None) -> None:
        if provider not in ENDPOINTS:
            raise ValueError(f"the search provider must be brave or tavily, not {provider!r}")
        if not key:
            raise ValueError("the search provider's key is empty")
        self.provider = provider
        self._key = key
        self._endpoint = (endpoint or ENDPOINTS[provider]).rstrip("/")

    def __repr__(self) -> str:  # never the key
        return f"SearchClient(provider={self.provider!r}, endpoint={self._endpoint!r})"

    async def search(self, query: str, *, count: int = 5) -> list[SearchResult]:
        query = query.strip()
        if not query or len(query) > MAX_QUERY_CHARS:
            raise SearchFailed(f"the query must have 1 to {MAX_QUERY_CHARS} characters")
        count = max(1, min(count, MAX_RESULTS))
        try:
            async with asyncio.timeout(SEARCH_SECONDS):
                answer = await self._ask(query, count)
        except TimeoutError:
            raise SearchFailed(f"the search provider did not answer within {SEARCH_SECONDS:.0f} s") from None
        if self.provider == "brave":
            web = answer.get("web", {})
            return _results(web.get("results", []) if isinstance(web, dict) else None, "description", count)
        return _results(answer.get("results"), "content", count)

    def _request(self, client: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        if self.provider == "brave":
            headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "X-Subscription-Token": self._key}
            params = {"q": query, "count": str(count)}
            return client.build_request("GET", f"{self._endpoint}/res/v1/web/search", params=params, headers=headers)
        headers = {"Authorization": f"Bearer {self._key}", "Accept-Encoding": "gzip"}  # json= sets Content-Type
        body = {"query": query, "max_results": count, "search_depth": "basic"}
        return client.build_request("POST", f"{self._endpoint}/search", json=body, headers=headers)

    async def _ask(self, query: str, count: int) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(SEARCH_SECONDS), trust_env=False) as client:
            try:
                response = await client.send(self._request(client, query, count), stream=True)
            except httpx.HTTPError as exc:
                raise SearchFailed(f"could not reach the search provider: {type(exc).__name__}") from exc
            try:
                if response.status_code in (401, 403):
                    raise SearchFailed(f"the search provider refused the key (HTTP {response.status_code})")
                if response.status_code == 429:
                    raise SearchFailed("the search provider's rate limit was reached (HTTP 429)")
                if response.status_code != 200:
                    raise SearchFailed(f"the search provider answered HTTP {response.status_code}")
                body = BoundedBody(response.headers.get("content-encoding", ""), limit=MAX_ANSWER_BYTES)
                async for chunk in response.aiter_raw():
                    body.feed(chunk)
                    if body.full:
                        break
                if body.full:
                    raise SearchFailed("the search provider's answer is larger than 1 MiB")
                answer = json.loads(body.finish())
            except (BodyError, ValueError) as exc:
                raise SearchFailed("the search provider's answer is not valid JSON") from exc
            except httpx.HTTPError as exc:
                raise SearchFailed(f"the search provider's answer was cut off: {type(exc).__name__}") from exc
            finally:
                await response.aclose()
        if not isinstance(answer, dict):
            raise SearchFailed("the search provider's answer is not a JSON object")
        return answer
