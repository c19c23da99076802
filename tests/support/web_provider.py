"""The web provider as the tests install it in a real runbrain: `test_allow` lists the loopback
[host, port] pairs of the test's page servers, turned into an AllowList in code. The production
WebProvider has no such option (it refuses `test_allow` as unknown), and this module lives in
tests/, which the container image does not ship."""

from __future__ import annotations

from collections.abc import Mapping

from toolkits.web import AllowList, Fetcher
from tools_app.providers.base import ProviderEnvironment
from tools_app.providers.web import WebProvider

__all__ = ["LoopbackWebProvider"]


class LoopbackWebProvider(WebProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        remaining = dict(options)
        entries = remaining.pop("test_allow", [])
        assert isinstance(entries, list)
        self._allow = AllowList((str(host), int(port)) for host, port in entries)
        super().__init__(name, remaining, environment=environment)

    def build_fetcher(self) -> Fetcher:
        return Fetcher(allow=self._allow)
