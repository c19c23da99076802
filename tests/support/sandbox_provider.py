"""The sandbox provider as the tests install it in a real runbrain: `test_connection` holds the
keywords the test's cloud backend is built with, pointing it at a loopback fake (E2B: `api_url`,
`sandbox_url`, `http_version`; Daytona: `allow_http_api`, so a binding's `apiUrl` may be the
fake's plain-http loopback address). The production SandboxProvider has no such option (it
refuses `test_connection` as unknown), and this module lives in tests/, which the container image
does not ship."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from toolkits.sandbox.backend import SandboxBackend
from toolkits.sandbox.registry import build_backend
from tools_app.providers.base import ProviderEnvironment
from tools_app.providers.sandbox import SandboxProvider

__all__ = ["LoopbackSandboxProvider"]

LOOPBACK = "127.0.0.1"


class LoopbackSandboxProvider(SandboxProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        remaining = dict(options)
        connection = remaining.pop("test_connection", {})
        assert isinstance(connection, dict)
        for key in ("api_url", "sandbox_url"):  # loopback fakes only, even in tests
            if key in connection:
                assert urlsplit(str(connection[key])).hostname == LOOPBACK, connection[key]
        self._connection = connection
        super().__init__(name, remaining, environment=environment)

    def build_sandbox_backend(self) -> SandboxBackend:
        data_dir = self.environment.data_dir / "providers" / self.name
        return build_backend(self.backend_name, data_dir=data_dir, connection=self._connection)
