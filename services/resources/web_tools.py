"""The web family of the resources service: `web_fetch` always, `web_search` when
`SEARCH_PROVIDER` (brave or tavily) and `SEARCH_API_KEY` are set (`SEARCH_ENDPOINT` replaces the
provider's API URL). One implementation with Brain's WebProvider: toolkits.web."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkits.web import Fetcher, SearchClient, WebTools

from .registry import Call, ServiceTool

__all__ = ["tools"]


def _search(environ: Mapping[str, str]) -> SearchClient | None:
    provider, key = environ.get("SEARCH_PROVIDER", ""), environ.get("SEARCH_API_KEY", "")
    if not provider and not key:
        return None
    if not provider or not key:
        raise ValueError("SEARCH_PROVIDER and SEARCH_API_KEY are set together (or neither)")
    endpoint = environ.get("SEARCH_ENDPOINT") or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ValueError("SEARCH_ENDPOINT must be an http or https URL")
    try:
        return SearchClient(provider, key=key, endpoint=endpoint)
    except ValueError as exc:
        raise ValueError(f"SEARCH_PROVIDER: {exc}") from None


def tools(environ: Mapping[str, str], *, fetcher: Fetcher | None = None) -> list[ServiceTool]:
    """`fetcher`: a test's Fetcher with an AllowList (in code); public addresses only otherwise."""
    web = WebTools(fetcher=fetcher or Fetcher(), search=_search(environ))

    async def fetch(call: Call) -> dict[str, Any]:
        return await web.fetch(call.arguments)

    async def search(call: Call) -> dict[str, Any]:
        return await web.search(call.arguments)

    handlers = {"fetch": fetch, "search": search}
    return [
        ServiceTool(
            name=f"web_{operation}",
            description=descriptor["description"],
            input_schema=descriptor["input_schema"],
            handler=handlers[operation],
        )
        for operation, descriptor in web.descriptors().items()
    ]
