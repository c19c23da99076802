"""`web`: `fetch` (a public page as readable text) and `search` (Brave or Tavily) from
toolkits.web. Host-config tools name them `web_fetch` and `web_search` (`transport: "provider"`,
`operation: "fetch"` / `"search"`); a session binding with alias `web` shows the model the same
names. Bindings take no parameters. `search` is served only when `search_provider` and
`search_key_env` are set; the key is read once at startup.

Options beside the common ones: `search_provider` (`brave` or `tavily`), `search_key_env`,
`search_endpoint` (the provider's API by default). There is no option that admits a refused
address: `build_fetcher` is the seam a test's subclass overrides with an AllowList in code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import field_validator, model_validator

from runners.protocol import ToolDescriptor
from toolkits.web import Fetcher, SearchClient, WebTools

from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, check_url, parse_parameterless_options, select_parameterless

__all__ = ["WebOptions", "WebProvider"]


class WebOptions(CommonOptions):
    search_provider: Literal["brave", "tavily"] | None = None
    search_key_env: str | None = None
    search_endpoint: str | None = None

    @field_validator("search_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @model_validator(mode="after")
    def _search(self) -> WebOptions:
        if (self.search_provider is None) != (self.search_key_env is None):
            raise ValueError("search_provider and search_key_env are set together (or neither)")
        if self.search_endpoint is not None and self.search_provider is None:
            raise ValueError("search_endpoint needs search_provider")
        return self


def _descriptor(value: Mapping[str, object]) -> ToolDescriptor:
    return {
        "name": str(value["name"]),
        "description": str(value["description"]),
        "input_schema": dict(value["input_schema"]),  # type: ignore[call-overload]  # a schema literal of toolkits.web
    }


class WebProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        settings = parse_parameterless_options(WebOptions, options, kind="web")
        search = None
        if settings.search_provider is not None and settings.search_key_env is not None:
            key = self.environment.secret(settings.search_key_env)
            search = SearchClient(settings.search_provider, key=key, endpoint=settings.search_endpoint)
        self.tools = WebTools(fetcher=self.build_fetcher(), search=search)
        self._served = {name: _descriptor(value) for name, value in self.tools.descriptors().items()}

    def build_fetcher(self) -> Fetcher:
        """The fetcher of every call: public addresses only."""
        return Fetcher()

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        if "search" in operations and "search" not in self._served:
            raise ValueError("operation 'search': this web provider has no search_provider configured")
        return select_parameterless(self._served, operations, parameters, kind="web")

    async def handle(self, call: ProviderCall) -> object:
        if call.operation == "fetch":
            return await self.tools.fetch(call.arguments)
        if call.operation == "search" and "search" in self._served:
            return await self.tools.search(call.arguments)
        raise ProviderError(f"unknown operation {call.operation!r}", reached=False)
