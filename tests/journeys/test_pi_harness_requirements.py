"""A configured `pi` harness whose runtime or script is missing: check_brain_config names the
problem and runbrain refuses to start, one line each, instead of every session failing its first turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.provider import PI_HARNESS
from tests.fixtures.server import ROOT, make_server

COMMAND_TIMEOUT_SECONDS = 90


def _config(tmp_path: Path, command: list[str]) -> tuple[Path, dict[str, str]]:
    server = make_server(tmp_path, harnesses={"pi": {**PI_HARNESS, "command": command}})
    path = tmp_path / "brain.json"
    path.write_text(json.dumps(server.config))
    return path, server.env


def _run(command: str, path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", command, "--config", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )


def _old_node(directory: Path) -> str:
    """A `node` that says it is Node 18."""
    node = directory / "node18"
    node.write_text("#!/bin/sh\necho v18.19.0\n")
    node.chmod(0o755)
    return str(node)


@pytest.mark.parametrize("command", ["check_brain_config", "runbrain"])
def test_a_pi_harness_without_node_is_refused_in_one_line_naming_it(tmp_path: Path, command: str) -> None:
    # given
    path, env = _config(tmp_path, ["node-not-installed", "runners/pi/src/main.mjs"])
    # when
    completed = _run(command, path, env)
    # then
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        "CommandError: cannot start: harness 'pi': 'node-not-installed' is not on PATH: Pi needs Node 20.6 or later"
    ]


@pytest.mark.parametrize("command", ["check_brain_config", "runbrain"])
def test_a_pi_harness_on_a_node_older_than_20_6_is_refused_in_one_line_naming_the_version(
    tmp_path: Path, command: str
) -> None:
    # given
    path, env = _config(tmp_path, [_old_node(tmp_path), "runners/pi/src/main.mjs"])
    # when
    completed = _run(command, path, env)
    # then
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        "CommandError: cannot start: harness 'pi': Node 18.19.0 is older than 20.6, which Pi needs"
    ]


def test_a_pi_harness_with_node_and_its_packages_installed_passes_the_check(tmp_path: Path) -> None:
    # given the machine's node and the packages make bootstrap installed
    path, env = _config(tmp_path, list(PI_HARNESS["command"]))  # type: ignore[call-overload]
    # when
    completed = _run("check_brain_config", path, {**env, "PATH": os.environ.get("PATH", "")})
    # then
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[0] == f"config {path} is valid"


@pytest.mark.parametrize("script", ["runners/pi/dist/main.js", "runners/pi/src/mian.mjs"])
@pytest.mark.parametrize("command", ["check_brain_config", "runbrain"])
def test_a_pi_harness_whose_script_does_not_exist_is_refused_in_one_line_naming_the_runner(
    tmp_path: Path, command: str, script: str
) -> None:
    # given the machine's node, its packages and a script that is not there
    path, env = _config(tmp_path, ["node", script])
    # when
    completed = _run(command, path, {**env, "PATH": os.environ.get("PATH", "")})
    # then
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        f"CommandError: cannot start: harness 'pi': {script} does not exist; "
        "this server's Pi runner is runners/pi/src/main.mjs"
    ]
