"""Soak: a mixed workload for a long time, sampling the server's resources and turn latency.

    .venv/bin/python bench/soak.py --minutes 30 [--sample-seconds 60] [--workers 4]
    .venv/bin/python bench/soak.py --minutes 30 --url http://127.0.0.1:8080 --token TOKEN \\
        [--pid PID] [--data-dir DIR]        # an existing instance or fleet (e.g. `make cluster`)

Without `--url` it starts one instance itself, from real processes only: `runbrain` with the
`loop` harness, the scripted model provider as the model, the example tool service (`echo`), and
the filesystem archive with background sync on. Each worker, in a loop: creates a session that
may call `echo`, opens its event stream, runs turns that alternate a tool call and a plain reply
(send -> the status ending the turn on the stream), drops its stream halfway and reopens it after
the last cursor it saw, then closes the session. A watcher opens short-lived streams that replay
a recent session and go away. Every `--sample-seconds` it prints a row: turns and errors in the
period, p50/p99 turn latency, and for a local server (its pid from /proc) RSS, the harness hosts'
RSS, open files, threads and the bytes of every session's events.jsonl. At the end: start vs
end of each figure and its least-squares slope per hour, over the whole run and over its second
half (after warm-up: runners started, `limits.loaded` sessions held). Exit code 1 when any error
was counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    LOOP_RUNNER,
    TOOLS_KEY,
    BrainProcess,
    children_rss_bytes,
    machine,
    percentile,
    raise_nofile,
    rss_bytes,
    start_brain,
    start_scripted_provider,
    start_tool_service,
    stop,
)
from bench.rawhttp import Connection  # noqa: E402
from examples.tools.app import tool_bindings  # noqa: E402

MODEL = "openai/gpt-4.1-mini"
TURNS_PER_SESSION = 6  # then the session is closed and a new one created
DROP_STREAM_AFTER_TURN = 2  # the worker's stream goes away after this turn and comes back
TURN_TIMEOUT_SECONDS = 60.0  # a turn that takes longer counts as an error
WATCH_SECONDS = 1.0  # how long a watcher's stream stays open
MIB = 1024 * 1024


# -- the event stream --------------------------------------------------------------------------


class Stream:
    """One SSE connection that remembers the last cursor (the `id:` line) it read, so that a
    reopened stream continues after it, and hands out the statuses that end turns."""

    def __init__(self, host: str, port: int, token: str, session_id: str) -> None:
        self.host, self.port, self.token, self.session_id = host, port, token, session_id
        self.cursor = ""
        self.ends: dict[str, str] = {}  # input id -> the status that ended its turn
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.events = 0  # retained events read

    async def open(self) -> Stream:
        reader, self._writer = await asyncio.open_connection(self.host, self.port)
        path = f"/sessions/{self.session_id}/events" + (f"?after={self.cursor}" if self.cursor else "")
        self._writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            ).encode()
        )
        status_line = await reader.readline()
        status = int(status_line.split()[1]) if status_line else 0
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        if status != 200:
            self.close()
            raise RuntimeError(f"stream answered {status}")
        self._task = asyncio.get_running_loop().create_task(self._read(reader))
        return self

    async def _read(self, reader: asyncio.StreamReader) -> None:
        cursor = ""
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while line := await reader.readline():
                if line.startswith(b"id: "):
                    cursor = line[4:].strip().decode()
                elif line.startswith(b"data: "):
                    if cursor:
                        self.cursor, cursor = cursor, ""
                        self.events += 1
                    if b'"type":"session.status"' in line:
                        envelope = json.loads(line[6:])
                        status = envelope["data"]["status"]
                        if status in ("idle", "failed", "interrupted"):
                            self.ends[envelope.get("input_id", "")] = status
                            self._changed.set()
        self._changed.set()  # the connection is gone: waiters must not wait forever

    async def wait_end(self, input_id: str) -> str:
        while input_id not in self.ends:
            if self._task is None or self._task.done():
                raise ConnectionError("the event stream ended")
            self._changed.clear()
            await self._changed.wait()
        return self.ends.pop(input_id)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._writer is not None:
            self._writer.close()


# -- the workload ----------------------------------------------------------------------------------


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)  # seconds, since the last sample
    turns: int = 0
    errors: int = 0
    sessions_created: int = 0
    sessions_closed: int = 0
    streams_opened: int = 0
    messages: list[str] = field(default_factory=list)  # the first few errors, to explain them
    recent: list[str] = field(default_factory=list)  # sessions a watcher may replay

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.messages) < 10:
            self.messages.append(what)


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    token: str


async def _request(connection: Connection, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, raw = await connection.request(method, path, body)
    return status, (json.loads(raw) if raw else None)


async def _one_session(target: Target, connection: Connection, tally: Tally, worker: int, think: float) -> None:
    status, session = await _request(
        connection, "POST", "/sessions", {"harness": "loop", "config": {"model": MODEL, "tools": ["echo"]}}
    )
    if status != 201:
        tally.error(f"create answered {status}: {session}")
        await asyncio.sleep(1)
        return
    session_id = session["id"]
    tally.sessions_created += 1
    stream = await Stream(target.host, target.port, target.token, session_id).open()
    tally.streams_opened += 1
    try:
        for turn in range(TURNS_PER_SESSION):
            if turn % 2 == 0:
                text = f'call echo {{"text": "soak {worker}.{turn}"}}'
            else:
                text = f"plain turn {turn} of worker {worker}"
            started = time.perf_counter()
            status, event = await _request(
                connection, "POST", f"/sessions/{session_id}/events", {"type": "user.message", "text": text}
            )
            if status != 202:
                tally.error(f"send answered {status}: {event}")
                return
            try:
                ending = await asyncio.wait_for(stream.wait_end(event["id"]), TURN_TIMEOUT_SECONDS)
            except (TimeoutError, ConnectionError) as exc:
                tally.error(f"turn {event['id']} did not end on the stream: {exc!r}")
                return
            tally.latencies.append(time.perf_counter() - started)
            tally.turns += 1
            if ending != "idle":
                tally.error(f"turn {event['id']} ended {ending}")
                return
            if turn == DROP_STREAM_AFTER_TURN:  # the stream goes away; a new one continues after its cursor
                stream.close()
                await asyncio.sleep(think)
                cursor, stream = stream.cursor, Stream(target.host, target.port, target.token, session_id)
                stream.cursor = cursor
                await stream.open()
                tally.streams_opened += 1
            await asyncio.sleep(think)
    finally:
        stream.close()
    tally.recent = [*tally.recent[-31:], session_id]
    status, body = await _request(connection, "POST", f"/sessions/{session_id}/close")
    if status != 202:
        tally.error(f"close answered {status}: {body}")
    else:
        tally.sessions_closed += 1


async def _worker(target: Target, tally: Tally, worker: int, think: float, until: float) -> None:
    while time.monotonic() < until:
        connection = Connection(target.host, target.port, target.token)
        try:
            await connection.open()
            await _one_session(target, connection, tally, worker, think)
        except (OSError, ValueError, RuntimeError, asyncio.IncompleteReadError) as exc:
            tally.error(f"worker {worker}: {exc!r}")
            await asyncio.sleep(1)
        finally:
            connection.close()


async def _watcher(target: Target, tally: Tally, until: float) -> None:
    """Streams that come and go: replay a recent session for a moment, then hang up."""
    while time.monotonic() < until:
        await asyncio.sleep(WATCH_SECONDS)
        if not tally.recent:
            continue
        stream = Stream(target.host, target.port, target.token, random.choice(tally.recent))
        try:
            await stream.open()
            tally.streams_opened += 1
            await asyncio.sleep(WATCH_SECONDS)
            if stream.events == 0:
                tally.error(f"a replay of {stream.session_id} read no events")
        except (OSError, RuntimeError) as exc:
            tally.error(f"watcher: {exc!r}")
        finally:
            stream.close()


# -- samples -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    minute: float
    turns: int
    errors: int  # cumulative
    p50_ms: float
    p99_ms: float
    rss_mib: float
    hosts_rss_mib: float
    open_files: float
    threads: float
    log_mib: float


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def _event_log_bytes(data_dir: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(data_dir / "sessions") as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                total += (Path(entry.path) / "events.jsonl").stat().st_size
    return total


def _process_figures(pid: int | None, data_dir: Path | None) -> tuple[float, float, float, float, float]:
    """RSS, hosts' RSS (MiB), open files, threads, event-log MiB; NaN where not measurable."""
    nan = float("nan")
    rss = hosts = files = threads = nan
    if pid is not None:
        with contextlib.suppress(OSError):
            rss = rss_bytes(pid) / MIB
            hosts = children_rss_bytes(pid) / MIB
            files = float(sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir()))
            threads = float(_threads(pid))
    log = _event_log_bytes(data_dir) / MIB if data_dir is not None else nan
    return rss, hosts, files, threads, log


def _cell(value: float, width: int, digits: int = 1) -> str:
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:>{width}.{digits}f}"


HEADER = (
    f"{'min':>6} {'turns':>6} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'RSS MiB':>8} "
    f"{'hosts MiB':>9} {'files':>6} {'threads':>7} {'log MiB':>8}"
)


def _row(sample: Sample) -> str:
    return (
        f"{sample.minute:>6.1f} {sample.turns:>6d} {sample.errors:>6d} {_cell(sample.p50_ms, 8)} "
        f"{_cell(sample.p99_ms, 8)} {_cell(sample.rss_mib, 8)} {_cell(sample.hosts_rss_mib, 9)} "
        f"{_cell(sample.open_files, 6, 0)} {_cell(sample.threads, 7, 0)} {_cell(sample.log_mib, 8, 2)}"
    )


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (minute, value) points, per hour; NaN with fewer than two."""
    points = [(x, y) for x, y in points if not math.isnan(y)]
    if len(points) < 2:
        return float("nan")
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return float("nan")
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread * 60


def summary_lines(samples: list[Sample]) -> list[str]:
    figures = [
        ("RSS MiB", "rss_mib"),
        ("hosts RSS MiB", "hosts_rss_mib"),
        ("open files", "open_files"),
        ("threads", "threads"),
        ("event-log MiB", "log_mib"),
        ("p50 turn ms", "p50_ms"),
        ("p99 turn ms", "p99_ms"),
    ]
    lines = [f"{'figure':<16} {'start':>10} {'end':>10} {'slope/hour':>12} {'2nd half':>12}"]
    for label, name in figures:
        values = [(sample.minute, float(getattr(sample, name))) for sample in samples]
        start, end = values[0][1], values[-1][1]
        overall, settled = slope_per_hour(values), slope_per_hour(values[len(values) // 2 :])
        lines.append(f"{label:<16} {_cell(start, 10)} {_cell(end, 10)} {_cell(overall, 12, 2)} {_cell(settled, 12, 2)}")
    return lines


async def soak(
    target: Target,
    *,
    minutes: float,
    sample_seconds: float,
    workers: int,
    think: float,
    pid: int | None,
    data_dir: Path | None,
) -> tuple[list[Sample], Tally]:
    tally = Tally()
    started = time.monotonic()
    until = started + minutes * 60
    tasks = [asyncio.create_task(_worker(target, tally, index, think, until)) for index in range(workers)]
    tasks.append(asyncio.create_task(_watcher(target, tally, until)))
    samples: list[Sample] = []
    print(HEADER, flush=True)
    next_sample = started + sample_seconds
    while True:
        now = time.monotonic()
        await asyncio.sleep(max(0.0, min(next_sample, until) - now))
        latencies, tally.latencies = tally.latencies, []
        turns = len(latencies)
        figures = await asyncio.to_thread(_process_figures, pid, data_dir)
        sample = Sample(
            (time.monotonic() - started) / 60,
            turns,
            tally.errors,
            percentile(latencies, 50) * 1000 if latencies else float("nan"),
            percentile(latencies, 99) * 1000 if latencies else float("nan"),
            *figures,
        )
        samples.append(sample)
        print(_row(sample), flush=True)
        if time.monotonic() >= until - 0.5:
            break
        next_sample += sample_seconds
    await asyncio.gather(*tasks)
    return samples, tally


def _local_instance(directory: Path) -> tuple[BrainProcess, list[Any]]:
    """runbrain + scripted provider + example tool service, sync on (the filesystem archive)."""
    provider, provider_url = start_scripted_provider(directory / "provider", {"chunk_words": 8})
    tools, tools_url = start_tool_service()
    brain = start_brain(
        directory / "brain",
        harnesses={"loop": {"command": LOOP_RUNNER}},
        providers={"openai": {"api_key_env": "BENCH_PROVIDER_KEY", "base_url": provider_url + "/v1"}},
        tools=tool_bindings(tools_url, tenant="bench"),
        env={"BRAIN_TOOLS_KEY": TOOLS_KEY},
        start=False,
    )
    brain.config["persistence"] = {
        "provider": "filesystem",
        "directory": str(directory / "archive"),
        "interval_seconds": 5,
        "queue": 1024,
    }
    try:
        brain.start()
    except RuntimeError:
        for process in (provider, tools):
            stop(process)
        log = (brain.directory / "brain.log").read_text(errors="replace").splitlines()
        print("\n".join(["runbrain did not come up; the end of its log:", *log[-20:]]), file=sys.stderr)
        raise
    return brain, [provider, tools]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=4, help="concurrent sessions in turns")
    parser.add_argument("--think-ms", type=float, default=250.0, help="pause between a worker's turns")
    parser.add_argument("--url", help="an existing instance or fleet (default: start one)")
    parser.add_argument("--token", help="a manage token of that instance or fleet")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid, for its /proc figures")
    parser.add_argument("--data-dir", type=Path, help="with --url: its data_dir, for event-log bytes")
    arguments = parser.parse_args()
    if arguments.url and not arguments.token:
        parser.error("--url needs --token")
    raise_nofile()
    print(machine(), f"memory {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.1f} GiB", flush=True)
    processes: list[Any] = []
    brain: BrainProcess | None = None
    with tempfile.TemporaryDirectory(prefix="brain-soak-") as scratch:
        try:
            if arguments.url:
                parts = urlsplit(arguments.url)
                target = Target(parts.hostname or "127.0.0.1", parts.port or 80, arguments.token)
                pid, data_dir = arguments.pid, arguments.data_dir
                print(f"target: {arguments.url}", flush=True)
            else:
                brain, processes = _local_instance(Path(scratch))
                target = Target(brain.host, brain.port, brain.token)
                pid, data_dir = brain.pid, brain.data_dir
                print(
                    f"target: one local instance, pid {pid} (loop harness, scripted provider, echo, sync on)",
                    flush=True,
                )
            print(
                f"workload: {arguments.workers} workers, {TURNS_PER_SESSION} turns per session "
                f"(tool call every other turn), think {arguments.think_ms:.0f} ms, "
                f"{arguments.minutes:g} min, a sample every {arguments.sample_seconds:g} s",
                flush=True,
            )
            samples, tally = asyncio.run(
                soak(
                    target,
                    minutes=arguments.minutes,
                    sample_seconds=arguments.sample_seconds,
                    workers=arguments.workers,
                    think=arguments.think_ms / 1000,
                    pid=pid,
                    data_dir=data_dir,
                )
            )
        finally:
            if brain is not None:
                brain.stop()
            for process in processes:
                stop(process)
    print()
    print(
        f"turns {sum(sample.turns for sample in samples)}, errors {tally.errors}, "
        f"sessions created {tally.sessions_created}, closed {tally.sessions_closed}, "
        f"streams opened {tally.streams_opened}"
    )
    for line in summary_lines(samples):
        print(line)
    for message in tally.messages:
        print(f"error: {message}")
    return 1 if tally.errors else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a terminated soak still stops its processes
    sys.exit(main())
