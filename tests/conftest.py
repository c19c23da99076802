"""Shared fixtures. Journeys start a real `runbrain` process on a loopback port."""

from __future__ import annotations

import os
import tempfile
from importlib import metadata
from pathlib import Path

import pytest

os.environ.setdefault("BRAIN_DATA_DIR", tempfile.mkdtemp(prefix="brain-pytest-"))

pytest_plugins = ["tests.fixtures.server", "tests.fixtures.provider", "tests.fixtures.tools", "tests.fixtures.services"]

# `make test` runs the client suite a second time with 2.0.0 first on PYTHONPATH and this set to
# "2.0.0": a run that would silently test the venv's client instead stops at once.
CLIENT_VERSION_ENV = "BRAIN_TEST_CLIENT"


def published_client() -> tuple[str, Path]:
    """The version of the `brain` package this process imports, and where it comes from."""
    import brain

    distribution = metadata.distribution("aex-brain")
    package = Path(brain.__file__).resolve().parent
    if package.parent != Path(str(distribution.locate_file(""))).resolve():
        raise pytest.UsageError(f"`brain` ({package}) is not the aex-brain {distribution.version} metadata describes")
    return distribution.version, package


def pytest_configure(config: pytest.Config) -> None:
    wanted = os.environ.get(CLIENT_VERSION_ENV)
    version, package = published_client()
    if wanted and version != wanted:
        message = f"{CLIENT_VERSION_ENV}={wanted} but the published client imported is {version} ({package})"
        raise pytest.UsageError(message)


def pytest_report_header(config: pytest.Config) -> str:
    version, package = published_client()
    return f"published client: aex-brain {version} ({package})"
