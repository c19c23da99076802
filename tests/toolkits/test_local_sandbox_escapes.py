"""The local sandbox holds: every escape attempt runs for real in bubblewrap and fails, and the
host shows it (a listener that saw no connection, files that did not change, /proc without the
sandbox's processes)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from pathlib import Path

import pytest

from tests.toolkits.support import NONE, local_backend, processes_with, run
from toolkits.sandbox.backend import SandboxFailure
from toolkits.sandbox.local import LocalBackend

FORK_COUNTER = """python3 -c '
import os, time
n = 0
try:
    for _ in range(10000):
        if os.fork() == 0:
            time.sleep(5); os._exit(0)
        n += 1
except OSError as exc:
    print("fork refused after", n, exc.errno)
print("forked", n)
'"""


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return local_backend(tmp_path / "data")


async def test_a_sandbox_runs_python_and_keeps_its_files_between_commands(backend: LocalBackend) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    # when
    first = await run(backend, sandbox, "python3 -c 'print(6*7)' > answer.txt; echo written")
    second = await run(backend, sandbox, "cat /work/answer.txt; exit 3")
    # then
    assert (first.exit_code, first.stdout) == (0, "written\n")
    assert (second.exit_code, second.stdout, second.truncated, second.timed_out) == (3, "42\n", False, False)


async def test_a_connection_to_a_host_loopback_listener_is_refused_and_the_listener_sees_nothing(
    backend: LocalBackend,
) -> None:
    # given
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(1.0)
    port = listener.getsockname()[1]
    sandbox = await backend.create(NONE, NONE)
    # when
    result = await run(
        backend, sandbox, f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5)'"
    )
    # then
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    assert result.exit_code == 1
    assert "ConnectionRefusedError" in result.stderr
    external = await run(
        backend, sandbox, "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=5)'"
    )
    assert external.exit_code == 1 and "Network is unreachable" in external.stderr


async def test_a_sandbox_cannot_reach_another_sandboxs_files(backend: LocalBackend) -> None:
    # given
    owner, intruder = await backend.create(NONE, NONE), await backend.create(NONE, NONE)
    await run(backend, owner, "echo the-owners-secret > secret.txt")
    owner_dir = backend.root / owner / "work"
    # when
    attempts = await run(
        backend,
        intruder,
        f"cat {owner_dir}/secret.txt; cat ../{owner}/work/secret.txt; ls {backend.root}; "
        "grep -rs the-owners-secret /work /tmp /etc /dev; echo done",
    )
    # then
    assert "the-owners-secret" not in attempts.stdout
    assert attempts.stdout.endswith("done\n")
    assert (owner_dir / "secret.txt").read_text() == "the-owners-secret\n"


async def test_host_files_can_be_neither_read_nor_written(backend: LocalBackend, tmp_path: Path) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    passwd = Path("/etc/passwd").read_bytes()
    # when
    result = await run(
        backend,
        sandbox,
        f"ls /root; cat /etc/shadow; ls {tmp_path}; ls {backend.root}; echo owned >> /etc/passwd; "
        "touch /usr/bin/sandbox-was-here; mkdir /sandbox-was-here; ls /; echo done",
    )
    # then
    assert result.stdout.split("done")[0].split() == [
        "bin",
        "dev",
        "etc",
        "lib",
        "lib64",
        "proc",
        "sbin",
        "tmp",
        "usr",
        "work",
    ]
    for refusal in ("ls: cannot access '/root'", "cat: /etc/shadow: No such file", f"ls: cannot access '{tmp_path}'"):
        assert refusal in result.stderr
    assert "Read-only file system" in result.stderr
    assert Path("/etc/passwd").read_bytes() == passwd
    assert not Path("/usr/bin/sandbox-was-here").exists() and not Path("/sandbox-was-here").exists()


async def test_a_fork_bomb_stops_at_the_process_limit_and_the_sandbox_answers_after(backend: LocalBackend) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    # when
    counted = await run(backend, sandbox, FORK_COUNTER)
    bomb = await run(backend, sandbox, "b() { b | b & }; b; sleep 2; echo survived", deadline=8)
    after = await run(backend, sandbox, "echo still here")
    # then
    assert "fork refused after" in counted.stdout
    forked = int(counted.stdout.split("forked ")[1])
    print(f"forks before the limit: {forked} (limit {backend.limits.processes} processes)")
    assert 0 < forked < backend.limits.processes
    assert bomb.exit_code is None or bomb.exit_code == 0
    assert (after.exit_code, after.stdout) == (0, "still here\n")
    assert processes_with("survived") == []


async def test_runaway_output_is_cut_at_64_kib_and_the_command_killed(backend: LocalBackend) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    # when
    result = await run(backend, sandbox, "yes runaway-output-marker; sleep 400123")
    # then
    assert (result.truncated, result.timed_out, result.exit_code) == (True, False, None)
    assert len(result.stdout.encode()) + len(result.stderr.encode()) == 64 * 1024
    assert processes_with("runaway-output-marker") == [] and processes_with("400123") == []


async def test_a_process_left_behind_by_a_command_is_gone_when_the_command_ends(backend: LocalBackend) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    # when
    result = await run(backend, sandbox, "nohup sleep 987654 > /dev/null 2>&1 & setsid sleep 987655 & echo started")
    # then
    assert (result.exit_code, result.stdout) == (0, "started\n")
    assert processes_with("987654") == [] and processes_with("987655") == []


async def test_a_command_past_its_deadline_is_killed_with_its_process_group(backend: LocalBackend) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    # when
    started = time.monotonic()
    result = await run(backend, sandbox, "sleep 876540 & echo begun; sleep 876541", deadline=2)
    took = time.monotonic() - started
    # then
    print(f"a command with a 2 s deadline returned after {took:.2f} s")
    assert (result.timed_out, result.exit_code, result.stdout) == (True, None, "begun\n")
    assert processes_with("87654") == []


async def test_terminate_kills_a_running_command_and_removes_the_sandboxs_directory(backend: LocalBackend) -> None:
    # given
    sandbox = await backend.create(NONE, NONE)
    running = asyncio.ensure_future(run(backend, sandbox, "sleep 765432"))
    for _ in range(200):
        if processes_with("765432"):
            break
        await asyncio.sleep(0.05)
    assert processes_with("765432"), "the command never started"
    # when
    await backend.terminate(sandbox, settings=NONE, credential=NONE)
    result = await running
    # then
    assert result.exit_code is None or result.exit_code != 0
    assert processes_with("765432") == []
    assert not (backend.root / sandbox).exists()
    assert await backend.inspect(sandbox, settings=NONE, credential=NONE) == {"state": "terminated"}
    with pytest.raises(SandboxFailure) as gone:
        await run(backend, sandbox, "echo hello")
    assert gone.value.reached is False


async def test_an_expired_sandbox_is_removed_with_its_processes(tmp_path: Path) -> None:
    # given
    backend = local_backend(tmp_path / "data", lifetime_seconds=3)
    sandbox = await backend.create(NONE, NONE)
    running = asyncio.ensure_future(run(backend, sandbox, "echo x > kept.txt; sleep 654321"))
    # when
    for _ in range(200):
        if not (backend.root / sandbox).exists():
            break
        await asyncio.sleep(0.05)
    result = await running
    # then
    assert not (backend.root / sandbox).exists()
    assert result.exit_code is None or result.exit_code != 0
    assert processes_with("654321") == []
    with pytest.raises(SandboxFailure):
        await run(backend, sandbox, "echo hello")
    with contextlib.suppress(Exception):
        await backend.aclose()
