"""An OTLP receiver and a loopback tool service for the telemetry tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.telemetry.collector import OtlpReceiver
from tests.tools.servers import LoopbackServer, ToolZoo


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def zoo_server() -> Iterator[tuple[ToolZoo, LoopbackServer]]:
    zoo = ToolZoo()
    server = LoopbackServer(zoo).start()
    yield zoo, server
    server.stop()


@pytest.fixture
def zoo(zoo_server: tuple[ToolZoo, LoopbackServer]) -> ToolZoo:
    zoo_server[0].received.clear()
    return zoo_server[0]
