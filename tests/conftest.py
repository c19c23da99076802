"""Shared fixtures. Journeys start a real `runbrain` process on a loopback port."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("BRAIN_DATA_DIR", tempfile.mkdtemp(prefix="brain-pytest-"))

pytest_plugins = ["tests.fixtures.server", "tests.fixtures.provider", "tests.fixtures.tools", "tests.fixtures.services"]
