"""Shared pieces of the scale benchmarks: real processes (runbrain, the scripted provider, the
example tool service), process figures from /proc, percentiles, and a writer of large event logs.

Everything here drives Brain from outside (a `runbrain --config FILE` process over HTTP + SSE);
nothing imports server code, so the benchmarks survive refactors of the server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.rawhttp import Connection, SseReader

ROOT = Path(__file__).resolve().parents[1]
INSTANT_RUNNER = ["python", str(ROOT / "tests" / "support" / "instant_runner.py")]
LOOP_RUNNER = ["python", "-m", "runners.loop"]
MODEL = "openai/gpt-4.1-mini"
TOOLS_KEY = "bench-tools-key-0123456789abcdef"

__all__ = [
    "INSTANT_RUNNER",
    "LOOP_RUNNER",
    "MODEL",
    "ROOT",
    "TOOLS_KEY",
    "BrainProcess",
    "SessionClient",
    "Turn",
    "create_sessions",
    "append_turns",
    "attach_one_by_one",
    "children_rss_bytes",
    "cursor",
    "cpu_seconds",
    "free_port",
    "machine",
    "percentile",
    "raise_nofile",
    "rss_bytes",
    "start_brain",
    "start_scripted_provider",
    "start_tool_service",
    "stop",
    "summary",
]


# -- the machine and processes ----------------------------------------------------------------


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"machine: {os.cpu_count()} cores ({model}), Python {sys.version.split()[0]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_nofile(wanted: int = 65536) -> int:
    """Raise this process's open-file limit (children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def children_rss_bytes(pid: int) -> int:
    """Summed RSS of a process's direct children (the harness hosts of a Brain process)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                total += rss_bytes(int(child))
            except OSError:
                continue
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- figures ------------------------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted samples."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def summary(samples: list[float], *, scale: float = 1000.0, unit: str = "ms") -> str:
    """`p50 … p95 … p99 … max …` of samples in seconds, printed in `unit`."""
    if not samples:
        return "no samples"
    parts = [f"p{q} {percentile(samples, q) * scale:7.1f}" for q in (50, 95, 99)]
    return f"{'  '.join(parts)}  max {max(samples) * scale:7.1f} {unit} (n={len(samples)})"


# -- processes ----------------------------------------------------------------------------------


def _wait_http(url: str, process: subprocess.Popen[Any], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


@dataclass
class BrainProcess:
    """One `manage.py runbrain --config FILE` process on a loopback port."""

    directory: Path
    config: dict[str, Any]
    env: dict[str, str]
    token: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.config["listen"].rpartition(":")[2])

    @property
    def url(self) -> str:
        return f"http://{self.config['listen']}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def data_dir(self) -> Path:
        return Path(self.config["data_dir"])

    def start(self) -> BrainProcess:
        path = self.directory / "brain.json"
        path.write_text(json.dumps(self.config))
        with (self.directory / "brain.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "runbrain", "--config", str(path)],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        _wait_http(self.url + "/health/ready", self.process, f"runbrain (log: {self.directory / 'brain.log'})")
        return self

    def stop(self, timeout: float = 30) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=timeout)


def start_brain(
    directory: Path,
    *,
    harnesses: dict[str, Any],
    limits: dict[str, Any] | None = None,
    providers: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
    start: bool = True,
) -> BrainProcess:
    """A Brain with one manage token for tenant `bench`; started unless `start` is False."""
    directory.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(24)
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{free_port()}",
        "data_dir": str(directory / "data"),
        "tokens": [{"token_env": "BENCH_TOKEN", "tenant": "bench", "manage": True}],
        "harnesses": harnesses,
        "providers": providers or {"openai": {"api_key_env": "BENCH_PROVIDER_KEY"}},
        "tools": tools or [],
    }
    if limits:
        config["limits"] = limits
    environment = {
        **os.environ,
        "BENCH_TOKEN": token,
        "BENCH_PROVIDER_KEY": "bench-provider-key",
        "BRAIN_DATA_DIR": str(directory / "data"),
        **(env or {}),
    }
    brain = BrainProcess(directory=directory, config=config, env=environment, token=token)
    return brain.start() if start else brain


def start_scripted_provider(directory: Path, script: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    """`python -m services.scripted_provider --port 0 --script FILE`; returns it and its root URL."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "script.json"
    path.write_text(json.dumps(script))
    process = subprocess.Popen(
        [sys.executable, "-m", "services.scripted_provider", "--port", "0", "--script", str(path)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    if "http://" not in line:
        process.kill()
        raise RuntimeError(f"scripted provider did not start: {line!r}")
    return process, line.strip().rsplit(" ", 1)[-1]


def start_tool_service() -> tuple[subprocess.Popen[bytes], str]:
    """The example tool service (echo, …) on a free port; returns it and its base URL."""
    port = free_port()
    env = {**os.environ, "BRAIN_TOOLS_KEY": TOOLS_KEY, "BRAIN_APPROVAL_KEY": TOOLS_KEY + "-approval"}
    process = subprocess.Popen(
        [sys.executable, "-m", "examples.tools", "--port", str(port)], cwd=ROOT, env=env, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    _wait_http(url + "/health", process, "the example tool service")
    return process, url


def stop(process: subprocess.Popen[Any] | None, timeout: float = 10) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# -- sessions over raw HTTP ----------------------------------------------------------------------


async def create_sessions(
    brain: BrainProcess, harness: str, count: int, *, tools: list[str] | None = None, parallel: int = 8
) -> list[str]:
    """Create `count` sessions over `parallel` keep-alive connections; returns their ids."""
    body = {"harness": harness, "config": {"model": MODEL, "tools": tools or []}}
    ids: list[str] = []
    remaining = iter(range(count))

    async def worker() -> None:
        connection = Connection(brain.host, brain.port, brain.token)
        await connection.open()
        try:
            for _ in remaining:
                status, raw = await connection.request("POST", "/sessions", body)
                if status != 201:
                    raise RuntimeError(f"create failed: {status} {raw[:300]!r}")
                ids.append(json.loads(raw)["id"])
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(min(parallel, count))))
    return ids


@dataclass
class Turn:
    session: str
    started: float  # perf_counter before the POST
    accepted: float  # perf_counter when the 202 arrived
    ended: float  # perf_counter when the ending status arrived on SSE
    status: str
    input_id: str = ""

    @property
    def latency(self) -> float:
        return self.ended - self.started


class SessionClient:
    """One session driven over raw HTTP: a keep-alive connection for POSTs and one SSE stream."""

    def __init__(self, brain: BrainProcess, session_id: str, *, after: str = "") -> None:
        """`after`: the stream starts after that cursor (without it, SSE replays the whole log)."""
        self.session_id = session_id
        self.connection = Connection(brain.host, brain.port, brain.token)
        path = f"/sessions/{session_id}/events" + (f"?after={after}" if after else "")
        self.stream = SseReader(brain.host, brain.port, brain.token, path)

    async def open(self) -> SessionClient:
        await asyncio.gather(self.connection.open(), self.stream.open())
        return self

    async def turn(self, text: str) -> Turn:
        """Send one user.message and wait for the status that ends its turn."""
        started = time.perf_counter()
        message = {"type": "user.message", "text": text}
        status, raw = await self.connection.request("POST", f"/sessions/{self.session_id}/events", message)
        accepted = time.perf_counter()
        if status != 202:
            raise RuntimeError(f"send failed: {status} {raw[:300]!r}")
        input_id = json.loads(raw)["id"]
        ending = await self.stream.wait_end(input_id)
        return Turn(self.session_id, started, accepted, time.perf_counter(), ending, input_id)

    async def errors(self, input_id: str = "") -> list[dict[str, Any]]:
        """The session.error events of this session (of one input when given), to explain a failure."""
        found: list[dict[str, Any]] = []
        after = ""
        while True:
            path = f"/sessions/{self.session_id}/events?limit=1000" + (f"&after={after}" if after else "")
            status, raw = await self.connection.request("GET", path)
            page = json.loads(raw)
            if status != 200 or not page["events"]:
                return found
            found += [
                event
                for event in page["events"]
                if event["type"] == "session.error" and (not input_id or event.get("input_id") == input_id)
            ]
            after = page["next_cursor"]

    def close(self) -> None:
        self.connection.close()
        self.stream.close()


async def attach_one_by_one(clients: list[SessionClient], text: str = "hi") -> list[Turn]:
    """One turn per session, one session at a time, so each attaches to a host with room.

    Attaching many sessions at once can outrun the host pool: callers that find every host
    full and max_hosts reached (counting hosts still starting) wait for capacity, and a host
    that finishes starting does not wake them, so they fail after the pool's capacity wait.
    """
    turns = []
    for client in clients:
        turn = await client.turn(text)
        if turn.status != "idle":
            errors = [error["data"] for error in await client.errors(turn.input_id)]
            raise RuntimeError(f"the first turn of {client.session_id} ended {turn.status}: {errors}")
        turns.append(turn)
    return turns


# -- large event logs ---------------------------------------------------------------------------

_WORDS = (
    "the session server keeps every retained event in an append only log and checkpoints each turn "
    "so a restart finds the same history tools are called with the identity of the session while "
    "the harness streams deltas that subscribers see live and a later reader pages by cursor"
).split()


def _text(rng: Any, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = _WORDS[rng.randrange(len(_WORDS))]
        words.append(word)
        length += len(word) + 1
    paragraphs = [" ".join(words[i : i + 60]).capitalize() + "." for i in range(0, len(words), 60)]
    return "\n\n".join(paragraphs)


def _line(event_id: str, kind: str, stamp: datetime, data: dict[str, Any], input_id: str = "") -> bytes:
    envelope: dict[str, Any] = {"id": event_id, "type": kind, "time": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    if input_id:
        envelope["input_id"] = input_id
    envelope["data"] = data
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def cursor(offset: int, event_id: str) -> str:
    """A retained event's cursor: base64url of {"o":offset,"i":id} (the spec's cursor examples)."""
    raw = json.dumps({"o": offset, "i": event_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _last_time(events_path: Path) -> datetime | None:
    """The `time` of a log's last line, or None for an empty log."""
    with events_path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, end - (1 << 20)))
        lines = handle.read().splitlines()
    if not lines or not lines[-1].strip():
        return None
    stamp = json.loads(lines[-1])["time"]
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def append_turns(events_path: Path, target_bytes: int, *, first_key: str = "", seed: int = 7) -> dict[str, Any]:
    """Append whole turns to a stopped session's events.jsonl until it holds ~target_bytes.

    Each turn is what the server writes for a one-reply turn, in its order and format: the
    user.message (delivery queue), session.status running with its input_id, one
    assistant.message of 2-4 KiB (with usage and stop_reason), session.status idle. The first
    appended message carries idempotency key `first_key` when given. Returns counts and, for the
    first and last appended turns, their event ids and byte offsets (as cursors encode them).
    """
    import random

    rng = random.Random(seed)
    size = events_path.stat().st_size
    stamp = _last_time(events_path) or datetime.now(UTC)
    turns = 0
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    with events_path.open("ab") as handle:
        while size < target_bytes:
            input_id = secrets.token_hex(16)
            question = _text(rng, rng.randrange(40, 200))
            message: dict[str, Any] = {"type": "user.message", "text": question, "delivery": "queue"}
            if turns == 0 and first_key:
                message["key"] = first_key
            answer = _text(rng, rng.randrange(2048, 4096))
            step = timedelta(microseconds=rng.randrange(200, 900))  # times stay ordered, close to now
            usage = {"input": len(question), "output": len(answer)}
            reply = {"text": answer, "usage": usage, "stop_reason": "stop"}
            ids = [input_id] + [secrets.token_hex(16) for _ in range(3)]
            lines = [
                _line(ids[0], "user.message", stamp, message),
                _line(ids[1], "session.status", stamp, {"status": "running"}, input_id),
                _line(ids[2], "assistant.message", stamp + step, reply, input_id),
                _line(ids[3], "session.status", stamp + step, {"status": "idle"}, input_id),
            ]
            offsets = [size + sum(len(line) for line in lines[:index]) for index in range(4)]
            chunk = b"".join(lines)
            handle.write(chunk)
            size += len(chunk)
            turn = {"input_id": input_id, "ids": ids, "offsets": offsets, "message": message, "answer": answer}
            if turns == 0:
                first = turn
            last = turn
            turns += 1
            stamp += 2 * step
    return {"turns": turns, "events": turns * 4, "bytes": size, "first": first, "last": last}
