"""An OTLP receiver for the telemetry tests (the tool service comes from tests.fixtures.tools)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.telemetry.collector import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
