"""A real runbrain server per test module, with an operator who can log into its admin."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.admin.support import create_superuser
from tests.fixtures.server import BrainServer, make_server


@pytest.fixture(scope="module")
def admin_brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    server = make_server(tmp_path_factory.mktemp("brain"))
    server.start()
    create_superuser(server)
    yield server
    server.stop(signal.SIGKILL)
