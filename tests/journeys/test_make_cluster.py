"""`make cluster` end to end: scripts/run_cluster.py starts PostgreSQL, Redis, moto, a sync worker
per instance, three Brain instances and nginx, streams the demo conversation through nginx over
all three instances, and when it stops (after the demo, or on Ctrl-C) no process of it is left.

Leftovers are caught by running the script under a child subreaper: anything it started that
outlives it is re-parented to the subreaper instead of init, which lists what still runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.fixtures.server import ROOT

SCRIPT = ROOT / "scripts" / "run_cluster.py"
INSTANCES = ("brain-a", "brain-b", "brain-c")
RUN_SECONDS = 400.0  # a loaded 2-core machine starts ten processes and three migrations slowly
SUBREAPER = """
import ctypes, json, os, signal, subprocess, sys
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
# the script gets SIGTERM (and stops its fleet) if this process is killed
child = subprocess.Popen(sys.argv[1:], preexec_fn=lambda: ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0))
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, lambda signum, frame: child.send_signal(signum))
code = child.wait()
while True:  # reap what exited after its parent did
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            break
    except ChildProcessError:
        break
left = []
for stat in Path("/proc").glob("[0-9]*/stat"):
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid():
            left.append(stat.with_name("cmdline").read_bytes().replace(b"\\0", b" ").decode().strip())
    except (OSError, IndexError):
        pass
print("SUBREAPER " + json.dumps({"code": code, "left": left}), flush=True)
"""
RUNTIME_TOOL = {"name": "blob", "description": "Return a large text.", "input_schema": {"type": "object"}}
TRANSCRIPT = [
    "you> Hello! What can you do?",
    "you> Tell me a fun fact about octopuses.",
    "agent> Fun fact: an octopus has three hearts and blue, copper-based blood, and about two thirds of its "
    "neurons live in its arms, so each arm can taste and react on its own.",
    "you> What was my first message?",
    'agent> Your first message in this conversation was: "Hello! What can you do?". You have sent 3 messages so far.',
    'you> call echo {"text": "hello through nginx"}',
    "  [tool.call echo {'text': 'hello through nginx'}]",
    "  [tool.result {'content': [{'type': 'text', 'text': 'hello through nginx'}]}]",
    "Tool echo returned: hello through nginx",
]


def _nginx() -> str | None:
    return shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin")


@pytest.fixture(scope="module")
def nginx() -> str:
    """nginx from Debian, installed by `make system-packages` when missing."""
    if _nginx() is None:
        result = subprocess.run(["make", "system-packages"], cwd=ROOT, capture_output=True, text=True, check=False)
        if _nginx() is None:
            pytest.fail(
                f"nginx is not installed and `make system-packages` could not install it: {result.stderr[-500:]}"
            )
    return str(_nginx())


@pytest.fixture
def directory() -> Iterator[Path]:
    """Where the cluster keeps configs and logs (not below pytest's basetemp, whose parents the
    postgres user may not be able to enter)."""
    path = Path(tempfile.mkdtemp(prefix="brain-make-cluster-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Run:
    """run_cluster.py under the subreaper, its output read line by line on a thread."""

    process: subprocess.Popen[str]
    output: Queue[str | None] = field(default_factory=Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.put(line.rstrip("\n"))
        self.output.put(None)

    def read_until(self, marker: str | None) -> list[str]:
        """Output lines up to the one starting with `marker` (None: to the end)."""
        lines: list[str] = []
        deadline = time.monotonic() + RUN_SECONDS
        while time.monotonic() < deadline:
            try:
                line = self.output.get(timeout=1)
            except Empty:
                continue
            if line is None:
                return lines
            lines.append(line)
            if marker is not None and line.startswith(marker):
                return lines
        raise AssertionError("run_cluster.py did not finish:\n" + "\n".join(lines[-60:]))  # stopped at teardown


@pytest.fixture
def start_cluster(tmp_path: Path, directory: Path) -> Iterator[Callable[..., Run]]:
    """Start run_cluster.py (nginx on a free port, state in `directory`); a run a failed test left
    going is interrupted, as Ctrl-C would, at the end."""
    subreaper = tmp_path / "subreaper.py"
    subreaper.write_text(SUBREAPER)
    runs: list[Run] = []

    def start(*arguments: str) -> Run:
        command = [sys.executable, str(subreaper), sys.executable, str(SCRIPT), "--port", "0"]
        process = subprocess.Popen(
            [*command, "--directory", str(directory), *arguments],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        runs.append(Run(process))
        return runs[-1]

    yield start
    for run in runs:
        if run.process.poll() is None:
            run.process.send_signal(signal.SIGINT)
            try:
                run.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                run.process.kill()


def _outcome(lines: list[str]) -> dict[str, Any]:
    reports = [line for line in lines if line.startswith("SUBREAPER ")]
    assert len(reports) == 1, "\n".join(lines[-60:])
    return json.loads(reports[0].removeprefix("SUBREAPER "))  # type: ignore[no-any-return]


def _access_log(directory: Path) -> list[tuple[str, int, str, str]]:
    """(request line, status, instance, Accept) of each request nginx passed on."""
    ports = {json.loads((directory / f"{name}.json").read_text())["listen"]: name for name in INSTANCES}
    entries = []
    pattern = re.compile(
        r'"(?P<request>[^"]*)" (?P<status>\d+) \d+ upstream=(?P<upstream>\S+) .* accept="(?P<accept>[^"]*)"'
    )
    for line in (directory / "logs" / "nginx-access.log").read_text().splitlines():
        match = pattern.search(line)
        assert match is not None, line
        entries.append((match["request"], int(match["status"]), ports[match["upstream"]], match["accept"]))
    return entries


def _check_demo(lines: list[str], directory: Path) -> None:
    output = "\n".join(lines)
    for expected in TRANSCRIPT:
        assert expected in lines, output
    session_id = re.search(r"^session ([0-9a-f]{32}) \(loop, openai/gpt-4.1-mini\)$", output, re.MULTILINE)
    assert session_id is not None, output
    entries = [entry for entry in _access_log(directory) if " /executors" not in entry[0]]  # the demo's
    events_path = f"/sessions/{session_id[1]}/events"
    # the conversation went through nginx: the session, four messages and one event stream
    assert [(request, status) for request, status, _, _ in entries if request.startswith("POST /sessions")] == [
        ("POST /sessions HTTP/1.1", 201),
        *[(f"POST {events_path} HTTP/1.1", 202)] * 4,
    ]
    streams = [entry for entry in entries if entry[0].startswith(f"GET {events_path}")]
    assert [(status, accept) for _, status, _, accept in streams] == [(200, "text/event-stream")]
    # round robin over the fleet: every instance served some of them
    assert {instance for _, _, instance, _ in entries} == set(INSTANCES)
    served = re.search(
        r"^nginx spread (\d+) requests over the fleet: brain-a (\d+), brain-b (\d+), brain-c (\d+)",
        output,
        re.MULTILINE,
    )
    assert served is not None and int(served[1]) == len(entries) == sum(int(count) for count in served.groups()[1:])
    # the session's checkpoint reached the archive, moto's S3 server (by a sync worker or the drain)
    latest = f'"PUT /brain-cluster/sessions/{session_id[1]}/latest HTTP/1.1" 200'
    assert latest in (directory / "logs" / "moto.log").read_text()


@pytest.mark.timeout(RUN_SECONDS + 60)
def test_make_cluster_streams_the_demo_through_nginx_over_three_instances_and_leaves_nothing_running(
    nginx: str, directory: Path, start_cluster: Callable[..., Run]
) -> None:
    # when
    run = start_cluster("--exit-after-demo")
    lines = run.read_until(None)
    run.process.wait()
    # then
    assert _outcome(lines) == {"code": 0, "left": []}, "\n".join(lines[-60:])
    _check_demo(lines, directory)
    assert lines[-2].startswith("stopped in ") and lines[-2].endswith(" s: nothing of the fleet is running")


@pytest.mark.timeout(RUN_SECONDS + 60)
def test_ctrl_c_stops_every_process_of_a_running_cluster(
    nginx: str, directory: Path, start_cluster: Callable[..., Run]
) -> None:
    # given: the fleet, running after its demo, and an executor connected through nginx
    run = start_cluster()
    lines = run.read_until("Ctrl-C stops the fleet.")
    assert lines[-1] == "Ctrl-C stops the fleet.", "\n".join(lines[-60:])
    url = re.search(r"is running behind nginx at (http://127\.0\.0\.1:\d+) ", "\n".join(lines))
    token = re.search(r"^API token: export BRAIN_API_KEY=([0-9a-f]+)$", "\n".join(lines), re.MULTILINE)
    assert url is not None and token is not None
    executor, ready = _connect_executor(url[1], token[1])
    # when
    run.process.send_signal(signal.SIGINT)
    lines += run.read_until(None)
    run.process.wait()
    # then
    assert _outcome(lines) == {"code": 0, "left": []}, "\n".join(lines[-60:])
    _check_demo(lines, directory)
    # an executor's WebSocket went through nginx (101), to the instance it registered with
    assert ready == {"type": "ready", "connection": ready["connection"]}
    entries = _access_log(directory)
    registered = [instance for request, status, instance, _ in entries if request == "POST /executors HTTP/1.1"]
    upgraded = [
        (status, instance) for request, status, instance, _ in entries if f"/executors/{executor}/rpc" in request
    ]
    assert len(registered) == 1 and upgraded == [(101, registered[0])]


def _connect_executor(url: str, token: str) -> tuple[str, dict[str, Any]]:
    """Register an executor through nginx and open its WebSocket RPC there; its first frame."""
    headers = {"Authorization": f"Bearer {token}"}
    body = {"binding": "runtime", "tools": [RUNTIME_TOOL]}
    credential = httpx.post(f"{url}/executors", json=body, headers=headers, timeout=30).json()
    rpc = url.replace("http://", "ws://") + f"/executors/{credential['id']}/rpc"
    protocols: Any = ["brain-rpc", f"brain-auth.{credential['token']}"]
    with connect(rpc, subprotocols=protocols, compression=None) as socket:
        return credential["id"], json.loads(socket.recv(timeout=30))


def test_a_taken_port_is_refused_before_anything_starts(directory: Path, listener: int) -> None:
    # when: nginx's port is in use
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--port", str(listener), "--directory", str(directory / "state")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # then: one clear line, and nothing was started (not even the state directory)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"port {listener} on 127.0.0.1 is taken (another `make cluster`?): stop what listens there or pass --port N\n"
    )
    assert list(directory.iterdir()) == []


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])
