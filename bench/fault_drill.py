"""Mixed-fault drill: sessions with tool calls, sub-agents and background sync, while one fault
per round hits a real part of the system at a random (seeded) moment.

    python bench/fault_drill.py [--seed N] [--rounds 500] [--minutes 25] [--faults brain,disk,...]

Everything runs on loopback: a `runbrain` process, its harness hosts (the instant test runner
and the `loop` runner against the scripted model provider), the example tool service
(`python -m examples.tools`), the `subagents` provider, a redis-server with a `manage.py
syncworker` (Celery) publishing to a filesystem archive. Each round creates four sessions (plain
turns, tool-calling turns, sub-agent turns whose children call the tool, and a `loop` session
calling the tool through the model) and sends each three inputs with idempotency keys, as a
client would: a request that gets no answer is sent again with its key, a 409 "resume the
interrupted session" is followed by `POST /resume` and the send again, 429 and 5xx are retried;
a quarter of the acknowledged inputs are sent again with their key at once, and a sample once
the round has recovered (each must answer the event of the first 202). At a random moment one
fault is injected:

- brain: SIGKILL of runbrain, restarted at once on the same data dir and port;
- harness: SIGKILL of one of Brain's harness child processes (Brain starts another);
- tool: SIGKILL of the tool service, restarted on its port after a short outage;
- worker: SIGKILL of the sync worker's process group, restarted after a short outage;
- redis: SIGKILL of redis-server (no persistence: queued tasks are lost), restarted;
- archive: the archive directory is moved away and a plain file put in its place for a while
  (the drill runs as root, for whom permission bits do not stop a write), then moved back;
- disk: "disk full". The soft RLIMIT_FSIZE of Brain, the sync worker and all their descendants
  is lowered to 0 on the running processes (prlimit(2)) for a while, then raised again (also on
  children started meanwhile). Every write that would grow a file then fails with EFBIG, as a
  write needing new blocks fails with ENOSPC on a full disk: appends to event logs, native
  files, SQLite's WAL, archive blocks, log files. CPython ignores SIGXFSZ at startup, so the
  limit surfaces as an OSError rather than killing the process; a non-Python child would need
  SIGXFSZ ignored the same way.

After each round every input that got a 202 must be in its session's history exactly once as a
user.message with the acknowledged id (lost: missing; duplicated: more than once, another event
with its key, or another id answered to a resend), and every session, sub-agents included, must
settle (idle, interrupted or failed) within SETTLE_SECONDS of the fault's end. Recovery time of
a round: from the fault's end (the kill for brain and harness, the restart or restore for the
others) until every session of the round settled, and until every one was published (the
archive's sync state covers its whole local log). Exit status 1 when anything was lost,
duplicated or unsettled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    INSTANT_RUNNER,
    LOOP_RUNNER,
    MODEL,
    TOOLS_KEY,
    BrainProcess,
    free_port,
    machine,
    percentile,
    start_brain,
    start_scripted_provider,
)
from examples.tools.app import tool_bindings  # noqa: E402

__all__ = ["FAULTS", "Figures", "run_drill"]

FAULTS = ("brain", "harness", "tool", "worker", "redis", "archive", "disk")
SESSION_KINDS = ("plain", "tool", "subagent", "loop")
INPUTS_PER_SESSION = 3
IMMEDIATE_RESEND_CHANCE = 0.25  # of an acknowledged input: sent again with its key at once
LATE_RESEND_CHANCE = 0.3  # of an acknowledged input: sent again with its key after recovery
FAULT_AT_SECONDS = (0.05, 1.5)  # the fault comes this long after the round's first send
OUTAGE_SECONDS = (0.3, 1.5)  # how long a stopped service, the archive or the disk stays out
DELIVERY_SECONDS = 60.0  # one input's retries, across restarts and outages
SETTLE_SECONDS = 60.0  # the bound within which every session must settle after the fault
SYNC_SECONDS = 90.0  # the bound within which every session should be published
START_SECONDS = 60.0
TOOL_TIMEOUT_SECONDS = 10
SUBAGENT_SECONDS = 30
RESUME_FIRST = "resume the interrupted session before sending input"
RUNNER_MARKERS = ("instant_runner.py", "runners.loop")


# -- processes ------------------------------------------------------------------------------------


def _wait(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} within {seconds:.0f} s")


def _descendants(pid: int) -> list[int]:
    """pid and every process below it, from /proc/<pid>/task/*/children."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    pending.extend(int(child) for child in (task / "children").read_text().split())
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Service:
    """A loopback process on a fixed port that the drill kills and starts again."""

    name = "service"

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its children share its process group: one killpg ends it all
            )
        _wait(self._started, START_SECONDS, f"{self.name} did not start (log: {self.log_path})")

    def _started(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode} (log: {self.log_path})")
        return self.ready()

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def _answers(port: int, request: bytes, prefix: bytes) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(request)
            return sock.recv(64).startswith(prefix)
    except OSError:
        return False


class Redis(Service):
    name = "redis"

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make system-packages)")
        return [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]

    def ready(self) -> bool:
        return _answers(self.port, b"PING\r\n", b"+PONG")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


class ToolService(Service):
    name = "tools"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "examples.tools", "--port", str(self.port)]

    def ready(self) -> bool:
        return _answers(self.port, b"GET /health HTTP/1.0\r\n\r\n", b"HTTP/1.1 200")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class SyncWorker(Service):
    name = "syncworker"

    def __init__(self, directory: Path, env: dict[str, str], config_path: Path) -> None:
        super().__init__(directory, env)
        self.config_path = config_path
        self._log_start = 0

    def command(self) -> list[str]:
        return [sys.executable, "manage.py", "syncworker", "--config", str(self.config_path), "--concurrency", "1"]

    def start(self) -> None:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().start()

    def ready(self) -> bool:
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return b" ready." in log.read()


# -- the system under test ----------------------------------------------------------------------


@dataclass
class System:
    directory: Path
    brain: BrainProcess
    redis: Redis
    tools: ToolService
    worker: SyncWorker
    provider: subprocess.Popen[str]
    archive: Path

    @classmethod
    def start(cls, directory: Path) -> System:
        env = {**os.environ, "BRAIN_TOOLS_KEY": TOOLS_KEY, "BRAIN_APPROVAL_KEY": TOOLS_KEY + "-approval"}
        redis, tools = Redis(directory, env), ToolService(directory, env)
        redis.start()
        tools.start()
        provider, provider_url = start_scripted_provider(directory / "provider", {"delay_ms": 0})
        assert provider.stderr is not None
        threading.Thread(target=provider.stderr.read, daemon=True).start()  # a full pipe would stall it
        echo = {**tool_bindings(tools.url, tenant="bench", token_env="BENCH_TOOLS_KEY")[0]}
        echo["timeout_seconds"] = TOOL_TIMEOUT_SECONDS
        spawn = {
            "name": "spawn_helper",
            "transport": "provider",
            "provider": "subagents",
            "operation": "spawn_helper",
            "tenants": ["bench"],
        }
        profiles = {
            "helper": {"harness": "instant", "model": MODEL, "tools": ["echo"], "timeout_seconds": SUBAGENT_SECONDS}
        }
        providers = {
            "subagents": {
                "class": "tools_app.providers.subagents.SubagentProvider",
                "options": {"tenants": ["bench"], "max_depth": 1, "profiles": profiles},
            }
        }
        archive = directory / "archive"
        archive.mkdir(exist_ok=True)
        brain = start_brain(
            directory / "brain",
            harnesses={"instant": {"command": INSTANT_RUNNER}, "loop": {"command": LOOP_RUNNER}},
            providers={"openai": {"api_key_env": "BENCH_PROVIDER_KEY", "base_url": provider_url + "/v1"}},
            tools=[echo, spawn],
            env={
                "BENCH_TOOLS_KEY": TOOLS_KEY,
                "BRAIN_TOOL_PROVIDERS": json.dumps(providers),
                "BRAIN_CELERY_BROKER": redis.url,
            },
            start=False,
        )
        brain.config["persistence"] = {
            "provider": "filesystem",
            "directory": str(archive),
            "interval_seconds": 1,
            "retry_seconds": 1,
            "queue": 10000,
        }
        brain.start()
        worker = SyncWorker(directory, brain.env, brain.directory / "brain.json")
        worker.start()
        return cls(directory, brain, redis, tools, worker, provider, archive)

    def stop(self) -> None:
        self.lift_disk_limit()
        self.restore_archive()
        with contextlib.suppress(Exception):
            self.brain.stop()
        for service in (self.worker, self.tools, self.redis):
            with contextlib.suppress(Exception):
                service.stop()
        self.provider.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.provider.wait(10)
        if self.provider.stderr is not None:
            self.provider.stderr.close()

    # -- faults ----------------------------------------------------------------------------------

    def kill_brain(self) -> None:
        assert self.brain.process is not None
        self.brain.process.kill()  # SIGKILL
        self.brain.process.wait()
        self.brain.process = None

    def harness_children(self) -> list[int]:
        if self.brain.process is None:
            return []
        return [
            pid for pid in _descendants(self.brain.pid)[1:] if any(marker in _cmdline(pid) for marker in RUNNER_MARKERS)
        ]

    def host_processes(self) -> list[int]:
        """Brain, the sync worker and all their descendants: the processes a full disk stops."""
        pids: list[int] = []
        for process in (self.brain.process, self.worker.process):
            if process is not None:
                pids += _descendants(process.pid)
        return pids

    def set_disk_limit(self, soft: int) -> None:
        for pid in self.host_processes():
            with contextlib.suppress(OSError):  # the process may be gone meanwhile
                hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))

    def lift_disk_limit(self) -> None:
        for _ in range(3):  # a child forked from a limited parent while we walked the tree
            self.set_disk_limit(resource.RLIM_INFINITY)

    def move_archive_away(self) -> None:
        self.archive.rename(self.archive.with_name("archive.away"))
        self.archive.write_bytes(b"")  # a file where the directory was: every write under it fails

    def restore_archive(self) -> None:
        away = self.archive.with_name("archive.away")
        if away.is_dir():
            if self.archive.is_file():
                self.archive.unlink()
            away.rename(self.archive)


# -- the client side ----------------------------------------------------------------------------


@dataclass
class Input:
    session: str
    key: str
    text: str
    acks: list[str] = field(default_factory=list)  # the event id of every 202 for this key
    unanswered: int = 0
    problem: str = ""


@dataclass
class RoundSession:
    id: str
    kind: str
    inputs: list[Input] = field(default_factory=list)


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""


class Client:
    """What a client of Brain does: keyed sends retried until answered, resumes when told."""

    def __init__(self, brain: BrainProcess) -> None:
        self.brain = brain

    @contextlib.contextmanager
    def http(self) -> Iterator[httpx.Client]:
        with httpx.Client(base_url=self.brain.url, headers=self.brain.headers(), timeout=10) as client:
            yield client

    def deliver(self, client: httpx.Client, item: Input) -> None:
        body = {"type": "user.message", "text": item.text, "key": item.key}
        deadline = time.monotonic() + DELIVERY_SECONDS
        while time.monotonic() < deadline:
            try:
                response = client.post(f"/sessions/{item.session}/events", json=body)
            except httpx.TransportError:
                item.unanswered += 1
                time.sleep(0.1)
                continue
            if response.status_code == 202:
                item.acks.append(str(response.json()["id"]))
                return
            if response.status_code == 409 and _error_message(response) == RESUME_FIRST:
                self.resume(client, item.session)
                continue
            if response.status_code == 429 or response.status_code >= 500:
                time.sleep(0.1)
                continue
            item.problem = f"{response.status_code} {response.text[:300]}"
            return
        item.problem = f"no 202 within {DELIVERY_SECONDS:.0f} s"

    def resume(self, client: httpx.Client, session: str) -> None:
        with contextlib.suppress(httpx.TransportError):
            client.post(f"/sessions/{session}/resume")  # 409: running again already
        time.sleep(0.02)

    def status(self, client: httpx.Client, session: str) -> str | None:
        try:
            response = client.get(f"/sessions/{session}")
        except httpx.TransportError:
            return None
        return str(response.json()["status"]) if response.status_code == 200 else None

    def history(self, client: httpx.Client, session: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after = ""
        while True:
            response = client.get(f"/sessions/{session}/events", params={"after": after, "limit": 1000})
            response.raise_for_status()
            page = response.json()
            events.extend(page["events"])
            if not page["events"]:
                return events
            after = page["next_cursor"]

    def sync_state(self, client: httpx.Client, session: str) -> dict[str, Any] | None:
        try:
            response = client.get(f"/sessions/{session}/sync")
        except httpx.TransportError:
            return None
        return response.json() if response.status_code == 200 else None  # type: ignore[no-any-return]


def _text(kind: str, rng: random.Random, label: str) -> str:
    """An input for a session of `kind`: turns that last a moment, call the tool or spawn."""
    echo = json.dumps({"text": label})
    if kind == "plain":
        return f"sleep:0.{rng.randint(1, 4)}" if rng.random() < 0.5 else f"note {label}"
    if kind == "tool":
        return f"tool:echo {echo}"
    if kind == "subagent":
        task = f"tool:echo {echo}" if rng.random() < 0.5 else f"sleep:0.{rng.randint(1, 4)}"
        return "tool:spawn_helper " + json.dumps({"task": task})
    return f"call echo {echo}" if rng.random() < 0.5 else f"hello {label}"


class PublishWatcher:
    """Polls the sync state of finished rounds' sessions from a thread of its own, so the next
    round starts at once: a round's publish time is measured while later rounds run (and
    inject their faults)."""

    def __init__(self, client: Client, sessions_dir: Path, *, bound: float) -> None:
        self.client = client
        self.sessions_dir = sessions_dir
        self.bound = bound
        self.pending: list[tuple[RoundResult, list[str], float]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def watch(self, result: RoundResult, sessions: list[str], fault_end: float) -> None:
        with self.lock:
            self.pending.append((result, list(sessions), fault_end))

    def drain(self) -> None:
        """Wait until every watched round is published or past its bound."""
        deadline = time.monotonic() + self.bound + 10
        while self.thread.is_alive() and time.monotonic() < deadline:
            with self.lock:
                if not self.pending:
                    break
            time.sleep(0.1)
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        with self.client.http() as client:
            while not self.stopping.is_set():
                with self.lock:
                    entries = list(self.pending)
                for entry in entries:
                    result, waiting, fault_end = entry
                    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                        waiting[:] = [session for session in waiting if not self._published(client, session)]
                    done = not waiting or time.monotonic() > fault_end + self.bound
                    if done:
                        if waiting:
                            result.unpublished = list(waiting)
                        else:
                            result.published_seconds = time.monotonic() - fault_end
                        with self.lock:
                            self.pending.remove(entry)
                time.sleep(0.1)

    def _published(self, client: httpx.Client, session: str) -> bool:
        """The archive's sync state covers the session's whole local log."""
        state = self.client.sync_state(client, session)
        try:
            size = (self.sessions_dir / session / "events.jsonl").stat().st_size
        except OSError:
            return False
        return state is not None and not state["pending"] and not state.get("error") and state["history_bytes"] == size


# -- one round ----------------------------------------------------------------------------------


@dataclass
class RoundResult:
    fault: str
    acknowledged: int = 0
    resends: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    effects: Counter[str] = field(default_factory=Counter)  # what the fault visibly did
    without_outcome: list[str] = field(default_factory=list)
    settled_seconds: float | None = None
    published_seconds: float | None = None


class Drill:
    def __init__(self, system: System, seed: int, *, publish_bound: float = SYNC_SECONDS) -> None:
        self.system = system
        self.seed = seed
        self.rng = random.Random(seed)
        self.client = Client(system.brain)
        self.watcher = PublishWatcher(self.client, system.brain.data_dir / "sessions", bound=publish_bound)

    def round(self, number: int, fault: str) -> RoundResult:
        """One round; its publish is left to the watcher (`published_seconds` is filled later)."""
        rng = random.Random(self.rng.randrange(1 << 32))
        result = RoundResult(fault)
        sessions = self._create_sessions(number)
        for index, session in enumerate(sessions):
            for turn in range(INPUTS_PER_SESSION):
                label = f"r{number}s{index}i{turn}"
                session.inputs.append(Input(session.id, f"drill-{label}", _text(session.kind, rng, label)))
        senders = [
            threading.Thread(target=self._send_all, args=(session, random.Random(rng.randrange(1 << 32))))
            for session in sessions
        ]
        for sender in senders:
            sender.start()
        time.sleep(rng.uniform(*FAULT_AT_SECONDS))
        fault_end = self._inject(fault, rng, [session.id for session in sessions])
        for sender in senders:
            sender.join()
        with self.client.http() as client:
            every = self._with_children(client, sessions)
            unsettled = self._settle(client, every, fault_end + SETTLE_SECONDS)
            result.unsettled = unsettled
            if not unsettled:
                result.settled_seconds = time.monotonic() - fault_end
            result.resends = self._resend_some(client, sessions, rng)
            every = self._with_children(client, sessions)
            self._settle(client, every, time.monotonic() + SETTLE_SECONDS)
            self._verify(client, sessions, result)
            self._effects(client, every, result)
        self.watcher.watch(result, every, fault_end)
        return result

    def _create_sessions(self, number: int) -> list[RoundSession]:
        created = []
        with self.client.http() as client:
            for kind in SESSION_KINDS:
                harness = "loop" if kind == "loop" else "instant"
                tools = {"plain": [], "tool": ["echo"], "subagent": ["spawn_helper"], "loop": ["echo"]}[kind]
                body = {"harness": harness, "config": {"model": MODEL, "tools": tools}}
                deadline = time.monotonic() + DELIVERY_SECONDS
                while True:
                    response = client.post("/sessions", json=body)
                    if response.status_code == 201:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"round {number}: create failed: {response.status_code} {response.text}")
                    time.sleep(0.1)
                created.append(RoundSession(str(response.json()["id"]), kind))
        return created

    def _send_all(self, session: RoundSession, rng: random.Random) -> None:
        with self.client.http() as client:
            for item in session.inputs:
                self.client.deliver(client, item)
                if item.acks and rng.random() < IMMEDIATE_RESEND_CHANCE:
                    self.client.deliver(client, item)  # a client that missed the answer
                time.sleep(rng.uniform(0.0, 0.3))

    # -- faults -----------------------------------------------------------------------------------

    def _inject(self, fault: str, rng: random.Random, sessions: list[str]) -> float:
        """Inject `fault` and undo it; returns time.monotonic() of the fault's end."""
        system = self.system
        outage = rng.uniform(*OUTAGE_SECONDS)
        if fault == "brain":
            system.kill_brain()
            ended = time.monotonic()
            system.brain.start()
            return ended
        if fault == "harness":
            with self.client.http() as client:  # a host killed while a turn of the round runs on it
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    if any(self.client.status(client, session) == "running" for session in sessions):
                        break
                    time.sleep(0.02)
            deadline = time.monotonic() + 5
            children = system.harness_children()
            while not children and time.monotonic() < deadline:
                time.sleep(0.02)
                children = system.harness_children()
            if not children:
                raise RuntimeError("no harness child to kill")
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(children), signal.SIGKILL)
            return time.monotonic()
        if fault in ("tool", "worker", "redis"):
            service = {"tool": system.tools, "worker": system.worker, "redis": system.redis}[fault]
            service.kill()
            time.sleep(outage)
            ended = time.monotonic()
            service.start()
            return ended
        if fault == "archive":
            system.move_archive_away()
            time.sleep(outage)
            system.restore_archive()
            return time.monotonic()
        if fault == "disk":
            system.set_disk_limit(0)
            time.sleep(outage)
            system.lift_disk_limit()
            return time.monotonic()
        raise ValueError(f"unknown fault {fault}")

    # -- checks -----------------------------------------------------------------------------------

    def _with_children(self, client: httpx.Client, sessions: list[RoundSession]) -> list[str]:
        """The round's sessions and the sub-agent sessions they spawned (from the database)."""
        ids = [session.id for session in sessions]
        database = self.system.brain.data_dir / "metadata.sqlite"
        marks = ",".join("?" * len(ids))
        for _ in range(20):
            try:
                with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)) as db:
                    rows = db.execute(
                        f"SELECT id FROM sessions_app_session WHERE parent_session IN ({marks})",  # noqa: S608
                        ids,
                    ).fetchall()
                return ids + sorted(str(row[0]) for row in rows)
            except sqlite3.OperationalError:
                time.sleep(0.1)
        raise RuntimeError("the metadata database stayed locked")

    def _settle(self, client: httpx.Client, sessions: list[str], deadline: float) -> list[str]:
        """Wait until none is running; returns those still running at the deadline."""
        waiting = list(sessions)
        while waiting and time.monotonic() < deadline:
            waiting = [session for session in waiting if self.client.status(client, session) in (None, "running")]
            if waiting:
                time.sleep(0.05)
        return waiting

    def _resend_some(self, client: httpx.Client, sessions: list[RoundSession], rng: random.Random) -> int:
        resent = 0
        for session in sessions:
            for item in session.inputs:
                if item.acks and rng.random() < LATE_RESEND_CHANCE:
                    self.client.deliver(client, item)
                    resent += 1
        return resent

    def _verify(self, client: httpx.Client, sessions: list[RoundSession], result: RoundResult) -> None:
        for session in sessions:
            events = self.client.history(client, session.id)
            messages = [event for event in events if event["type"] == "user.message"]
            by_id = Counter(event["id"] for event in messages)
            by_key = Counter(event["data"].get("key") for event in messages)
            for item in session.inputs:
                if item.problem:
                    result.problems.append(f"{item.key}: {item.problem}")
                if not item.acks:
                    continue
                result.acknowledged += 1
                acked = item.acks[0]
                if by_id[acked] == 0:
                    result.lost.append(f"{session.id} {item.key} {acked}")
                elif by_id[acked] > 1 or by_key[item.key] > 1 or len(set(item.acks)) > 1:
                    result.duplicated.append(f"{session.id} {item.key} acks {item.acks} in log {by_key[item.key]}x")
            ended = {
                event.get("input_id")
                for event in events
                if event["type"] in ("assistant.message", "session.error")
                or (event["type"] == "session.status" and event["data"]["status"] in ("interrupted", "failed"))
            }
            result.without_outcome += [
                f"{session.id} {item.key} {item.acks[0]}"
                for item in session.inputs
                if item.acks and item.acks[0] not in ended
            ]

    def _effects(self, client: httpx.Client, sessions: list[str], result: RoundResult) -> None:
        """Count what the fault did to the round's sessions: errors, failed tool calls, restarts."""
        for session in sessions:
            for event in self.client.history(client, session):
                if event["type"] == "session.error":
                    result.effects[f"session.error {event['data'].get('code')}"] += 1
                elif event["type"] == "tool.result" and event["data"].get("outcome") != "ok":
                    result.effects[f"tool {event['data'].get('outcome')}"] += 1
                elif event["type"] == "session.status" and event["data"]["status"] in ("interrupted", "failed"):
                    result.effects[event["data"]["status"]] += 1


# -- the drill ----------------------------------------------------------------------------------


@dataclass
class Figures:
    seed: int
    publish_bound: float = SYNC_SECONDS
    rounds: int = 0
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    resends: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    without_outcome: list[str] = field(default_factory=list)
    effects: dict[str, Counter[str]] = field(default_factory=dict)
    settled: dict[str, list[float]] = field(default_factory=dict)
    published: dict[str, list[float]] = field(default_factory=dict)

    def add(self, result: RoundResult) -> None:
        self.rounds += 1
        self.faults[result.fault] += 1
        self.acknowledged += result.acknowledged
        self.resends += result.resends
        self.lost += result.lost
        self.duplicated += result.duplicated
        self.unsettled += result.unsettled
        self.unpublished += result.unpublished
        self.problems += result.problems
        self.without_outcome += result.without_outcome
        self.effects.setdefault(result.fault, Counter()).update(result.effects)
        if result.settled_seconds is not None:
            self.settled.setdefault(result.fault, []).append(result.settled_seconds)
        if result.published_seconds is not None:
            self.published.setdefault(result.fault, []).append(result.published_seconds)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.unsettled)

    def report(self) -> str:
        lines = [
            f"fault drill, seed {self.seed}: {self.rounds} rounds in {self.seconds / 60:.1f} min",
            "faults injected: " + ", ".join(f"{kind} {self.faults[kind]}" for kind in FAULTS if self.faults[kind]),
            f"inputs acknowledged: {self.acknowledged} (plus {self.resends} late resends with their key)",
            f"lost: {len(self.lost)}  duplicated: {len(self.duplicated)}  "
            f"sessions that never settled: {len(self.unsettled)}",
            f"sessions not published within {self.publish_bound:.0f} s: {len(self.unpublished)}; "
            f"inputs refused for good: {len(self.problems)}; "
            f"acknowledged inputs whose turn left no outcome: {len(self.without_outcome)}",
            "recovery from the fault's end, median / p99 (n): settled | published",
        ]
        for kind in FAULTS:
            if not self.faults[kind]:
                continue
            lines.append(f"  {kind:<8} {_spread(self.settled.get(kind, []))} | {_spread(self.published.get(kind, []))}")
        lines.append("what the faults did to the rounds' sessions (events seen):")
        for kind in FAULTS:
            if self.faults[kind]:
                seen = ", ".join(f"{name} {count}" for name, count in sorted(self.effects[kind].items()))
                lines.append(f"  {kind:<8} {seen or 'nothing visible'}")
        for label, items in (
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("unsettled", self.unsettled),
            ("unpublished", self.unpublished),
            ("refused", self.problems),
            ("no outcome", self.without_outcome),
        ):
            for item in items[:10]:
                lines.append(f"{label}: {item}")
        return "\n".join(lines)


def _spread(samples: list[float]) -> str:
    if not samples:
        return "      -"
    return f"{statistics.median(samples):5.2f} / {percentile(samples, 99):5.2f} s ({len(samples)})"


def _schedule(rng: random.Random, kinds: tuple[str, ...]) -> Iterator[str]:
    """Faults in shuffled blocks holding each kind once, so every kind gets its share."""
    while True:
        block = list(kinds)
        rng.shuffle(block)
        yield from block


def run_drill(
    *,
    seed: int,
    rounds: int,
    minutes: float,
    faults: tuple[str, ...] = FAULTS,
    directory: Path | None = None,
    publish_bound: float = SYNC_SECONDS,
    progress: Callable[[str], None] | None = None,
) -> Figures:
    """Run rounds until `rounds` are done or `minutes` have passed; returns the figures.
    `publish_bound`: how long after a round's fault its sessions may take to be published."""
    owned = directory is None
    base = Path(tempfile.mkdtemp(prefix="brain-drill-")) if directory is None else directory
    figures = Figures(seed, publish_bound=publish_bound)
    started = time.monotonic()
    system = System.start(base)
    try:
        drill = Drill(system, seed, publish_bound=publish_bound)
        schedule = _schedule(random.Random(seed ^ 0x5EED), faults)
        results = []
        for number in range(rounds):
            if number and time.monotonic() - started > minutes * 60:
                break
            fault = next(schedule)
            result = drill.round(number, fault)
            results.append(result)
            if progress is not None:
                settled = "-" if result.settled_seconds is None else f"{result.settled_seconds:.2f}"
                progress(
                    f"round {number}: {fault:<8} acked {result.acknowledged:2d} lost {len(result.lost)} "
                    f"dup {len(result.duplicated)} unsettled {len(result.unsettled)} settled {settled} s "
                    f"({time.monotonic() - started:.0f} s)"
                )
        drill.watcher.drain()
        for result in results:
            figures.add(result)
    finally:
        figures.seconds = time.monotonic() - started
        system.stop()
        if owned and figures.clean:
            shutil.rmtree(base, ignore_errors=True)
        elif progress is not None:
            progress(f"logs and data kept in {base}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="replays a drill's choices (default: random)")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--minutes", type=float, default=25.0, help="no new round starts after this")
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated kinds to inject")
    parser.add_argument("--directory", type=Path, default=None, help="keep processes' data and logs here")
    parser.add_argument("--quiet", action="store_true", help="no line per round")
    arguments = parser.parse_args()
    kinds = tuple(kind for kind in arguments.faults.split(",") if kind)
    unknown = set(kinds) - set(FAULTS)
    if unknown or not kinds:
        parser.error(f"--faults takes kinds among {', '.join(FAULTS)}")
    seed = arguments.seed if arguments.seed is not None else secrets.randbelow(1 << 32)
    print(machine())
    print(f"seed {seed} (--seed {seed} replays the drill's choices)", flush=True)
    if arguments.directory is not None:
        arguments.directory.mkdir(parents=True, exist_ok=True)
    figures = run_drill(
        seed=seed,
        rounds=arguments.rounds,
        minutes=arguments.minutes,
        faults=kinds,
        directory=arguments.directory,
        progress=None if arguments.quiet else lambda line: print(line, flush=True),
    )
    print(figures.report())
    sys.exit(0 if figures.clean else 1)


if __name__ == "__main__":
    main()
