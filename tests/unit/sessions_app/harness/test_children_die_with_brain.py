"""Harness children die with Brain: spawned through an exec wrapper that sets the death signal,
never a preexec_fn. A real stand-in for Brain is killed with SIGKILL and its child must follow."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundation.hostconfig import Harness
from foundation.telemetry import Telemetry
from sessions_app.harness.launch import death_signal_wrapper, launch_command, setpriv_wrapper
from sessions_app.harness.pool import HostPool, HostUnavailable
from tests.unit.sessions_app.harness.test_pool import Handler, open_params

ROOT = Path(__file__).resolve().parents[4]
HOST_PARENT = ROOT / "tests" / "support" / "host_parent.py"
LAUNCH = ROOT / "sessions_app" / "harness" / "launch.py"
PRODUCTION_PACKAGES = (
    "foundation",
    "brainsite",
    "sessions_app",
    "tools_app",
    "persistence_app",
    "runners",
    "services",
    "examples",
)
DEATH_SECONDS = 5.0

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from the state field on (field 3: index 0, start time: index 19)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return None


def _is_dead(pid: int, started: str | None = None) -> bool:
    """Gone, or a zombie nobody reaps yet (the child was reparented when its parent died), or
    its pid now names another process (started at another time: a busy machine reuses pids)."""
    stat = _stat(pid)
    if stat is None:
        return True
    return stat[0] in ("Z", "X") or (started is not None and stat[19] != started)


def _start_parent(tmp_path: Path, *, path: str) -> tuple[subprocess.Popen[str], int, str | None]:
    env = {"PATH": path, "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}
    parent = subprocess.Popen(
        [sys.executable, str(HOST_PARENT), str(tmp_path / "host")], env=env, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    report = json.loads(parent.stdout.readline())
    return parent, report["pid"], report["wrapper"]


@linux_only
@pytest.mark.parametrize("wrapper", ["setpriv", "python"])
def test_a_harness_child_dies_when_brain_is_killed(tmp_path: Path, wrapper: str) -> None:
    # given: a stand-in for Brain with a running harness child; without setpriv on its PATH it
    # falls back to the Python wrapper
    if wrapper == "setpriv" and setpriv_wrapper() is None:
        pytest.fail("util-linux `setpriv` is not installed: the wrapper this case checks")
    search_path = os.environ["PATH"] if wrapper == "setpriv" else str(tmp_path / "empty-bin")
    parent, child, used = _start_parent(tmp_path, path=search_path)
    started: str | None = None
    try:
        assert used is not None
        assert Path(used).name == "setpriv" if wrapper == "setpriv" else used == sys.executable
        assert not _is_dead(child)
        stat = _stat(child)
        assert stat is not None
        started = stat[19]

        # when
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)

        # then
        deadline = time.monotonic() + DEATH_SECONDS
        while not _is_dead(child, started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _is_dead(child, started)
    finally:
        parent.kill()
        parent.wait(timeout=10)
        if not _is_dead(child, started):  # never a process that took the pid since
            os.kill(child, signal.SIGKILL)


@linux_only
def test_the_wrapper_is_setpriv_when_installed_else_python(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # given
    setpriv = shutil.which("setpriv")

    # when
    installed = death_signal_wrapper()
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = death_signal_wrapper()

    # then
    if setpriv is not None:
        assert installed == [setpriv, "--pdeathsig", "KILL", "--"]
    assert missing == [sys.executable, "-I", "-S", str(LAUNCH), str(os.getpid())]


def test_the_program_is_looked_up_on_the_childs_path(tmp_path: Path) -> None:
    # given: an executable only on the child's PATH
    program = tmp_path / "bin" / "harness"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)

    # when
    command = launch_command(["harness", "--flag"], {"PATH": str(program.parent)}, wrapper=["wrap", "--"])

    # then
    assert command == ["wrap", "--", str(program), "--flag"]


def test_a_missing_or_unexecutable_program_fails_the_spawn(tmp_path: Path) -> None:
    # given
    unexecutable = tmp_path / "harness"
    unexecutable.write_text("#!/bin/sh\n")
    env = {"PATH": str(tmp_path)}

    # then
    with pytest.raises(FileNotFoundError):
        launch_command(["no-such-harness"], env)
    with pytest.raises(FileNotFoundError):
        launch_command([str(tmp_path / "absent")], env)
    with pytest.raises(PermissionError):
        launch_command([str(unexecutable)], env)


async def test_a_missing_harness_program_still_makes_the_host_unavailable(tmp_path: Path) -> None:
    # given
    config = Harness(command=[str(tmp_path / "absent-runner")], max_shared=1, max_hosts=1)
    pool = HostPool("absent", config, workroot=tmp_path / "hosts", telemetry=Telemetry())

    # when
    try:
        with pytest.raises(HostUnavailable, match="cannot start harness absent: No such file or directory"):
            await pool.attach(Handler(), open_params(tmp_path / "s"), tenant="acme")
    finally:
        await pool.close()


def test_no_production_code_spawns_with_a_preexec_fn() -> None:
    # given
    uses = []
    for package in PRODUCTION_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                named = (
                    (isinstance(node, ast.keyword) and node.arg == "preexec_fn")
                    or (isinstance(node, ast.Name) and node.id == "preexec_fn")
                    or (isinstance(node, ast.Constant) and node.value == "preexec_fn")
                )
                if named:
                    uses.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")

    # then
    assert uses == []
