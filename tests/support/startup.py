"""A host config that must not start: `runbrain` and `check_brain_config` run on it as an
operator runs them, each to its exit."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fixtures.server import ROOT, BrainServer

__all__ = ["COMMAND_SECONDS", "serve_and_check"]

COMMAND_SECONDS = 60  # a refused start exits within a few seconds; a hang shows as a timeout


def serve_and_check(server: BrainServer) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Write the server's config, run `runbrain` and then `check_brain_config` on it with its
    environment; both results (stderr holds what each said)."""
    server.config_path.write_text(json.dumps(server.config))
    served, checked = (
        subprocess.run(
            [sys.executable, "manage.py", command, "--config", str(server.config_path)],
            cwd=ROOT,
            env=server.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
            check=False,
        )
        for command in ("runbrain", "check_brain_config")
    )
    return served, checked
