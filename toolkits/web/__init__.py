"""The web tools: `fetch` (one public page as readable text, SSRF-checked at every hop) and
`search` (Brave or Tavily). Served by `tools_app.providers.web.WebProvider` and by the
`services.resources` tool service; imports nothing of the server."""

from __future__ import annotations

from .fetch import AllowList, Fetcher, FetchFailed, Page
from .search import SearchClient, SearchFailed, SearchResult
from .tools import FETCH_DESCRIPTOR, SEARCH_DESCRIPTOR, WebTools

__all__ = [
    "FETCH_DESCRIPTOR",
    "SEARCH_DESCRIPTOR",
    "AllowList",
    "FetchFailed",
    "Fetcher",
    "Page",
    "SearchClient",
    "SearchFailed",
    "SearchResult",
    "WebTools",
]
