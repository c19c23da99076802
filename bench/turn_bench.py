"""Turn benchmark: latency (send -> `idle` on SSE) against a floor, throughput, memory.

    python bench/turn_bench.py [--turns 300] [--parallel 64] [--seconds 10] [--idle 1000] [--loop-only]

Prints: median/p95 turn latency through Brain with an instant runner; the same for the floor
(a bare ASGI app on Daphne pushing one SSE event per POST) measured in the same run; their
ratio; the same latency with the `loop` runner on the OpenAI Responses wire against the
scripted provider, against its own floor (the very request bodies the runner sent, replayed
straight to the scripted provider with httpx over one kept-alive connection and read to the
end); turns/s with N sessions in parallel; server RSS per loaded idle session.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.rawhttp import Connection, SseReader  # noqa: E402

INSTANT_RUNNER = ["python", str(ROOT / "tests" / "support" / "instant_runner.py")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def start_brain(
    directory: Path, *, harness: list[str], active: int, token: str = "", provider_url: str = ""
) -> tuple[subprocess.Popen[bytes], str, str]:
    port, token = free_port(), token or secrets.token_hex(24)
    config = {
        "listen": f"127.0.0.1:{port}",
        "data_dir": str(directory / "data"),
        "tokens": [{"token_env": "BENCH_TOKEN", "tenant": "bench", "manage": True}],
        "harnesses": {"bench": {"command": harness, "max_shared": 64, "max_hosts": 4}},
        "providers": {
            "openai": {"api_key_env": "BENCH_PROVIDER_KEY", **({"base_url": provider_url} if provider_url else {})}
        },
        "limits": {"active": active, "loaded": 4096, "queue": 64, "subscribers": 4096},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "brain.json"
    path.write_text(json.dumps(config))
    env = {
        **os.environ,
        "BENCH_TOKEN": token,
        "BENCH_PROVIDER_KEY": "bench-key",
        "BRAIN_DATA_DIR": str(directory / "data"),
    }
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runbrain", "--config", str(path)],
        cwd=ROOT,
        env=env,
        stderr=(directory / "brain.log").open("ab"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health/live")
    except RuntimeError:
        process.terminate()
        process.wait(30)
        raise
    return process, url, token


class Stream:
    """One SSE connection; yields parsed (event type, envelope) pairs."""

    def __init__(self, client: httpx.AsyncClient, path: str, headers: dict[str, str]) -> None:
        self.client, self.path, self.headers = client, path, headers
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        async with self.client.stream("GET", self.path, headers={**self.headers, "Accept": "text/event-stream"}) as r:
            self.ready.set()
            kind, data = "", ""
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and kind:
                    self.events.put_nowait((kind, json.loads(data) if data.startswith("{") else {}))
                    kind, data = "", ""

    async def until(self, kind: str, predicate: Any) -> None:
        while True:
            got, envelope = await self.events.get()
            if got == kind and predicate(envelope):
                return

    def close(self) -> None:
        self.task.cancel()
        self.task.add_done_callback(lambda task: task.cancelled() or task.exception())


async def brain_turn_latencies(url: str, token: str, turns: int) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        session = (
            await client.post(
                "/sessions", json={"harness": "bench", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
            )
        ).json()
        stream = Stream(client, f"/sessions/{session['id']}/events", headers)
        await stream.ready.wait()
        samples = []
        for index in range(turns + 10):
            start = time.perf_counter()
            sent = (
                await client.post(f"/sessions/{session['id']}/events", json={"type": "user.message", "text": "hi"})
            ).json()
            await stream.until("session.status", _idle_of(sent["id"]))
            if index >= 10:  # the first turns start the harness host
                samples.append(time.perf_counter() - start)
        stream.close()
        return samples


def _idle_of(input_id: str) -> Any:
    return lambda e: e["data"]["status"] == "idle" and e.get("input_id") == input_id


async def floor_latencies(url: str, turns: int) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        stream = Stream(client, "/events", {})
        await stream.ready.wait()
        samples = []
        for index in range(turns + 10):
            start = time.perf_counter()
            marker = secrets.token_hex(8)
            await client.post("/send", content=json.dumps({"m": marker}))
            await stream.until("idle", lambda e, m=marker: e.get("m") == m)
            if index >= 10:
                samples.append(time.perf_counter() - start)
        stream.close()
        return samples


async def throughput(url: str, token: str, parallel: int, seconds: float) -> tuple[float, float]:
    """Turns/s with `parallel` sessions each running turns back to back; also server CPU %."""
    host, port = url.removeprefix("http://").split(":")
    body = {"harness": "bench", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    setup = Connection(host, int(port), token)
    await setup.open()
    sessions = [json.loads((await setup.request("POST", "/sessions", body))[1])["id"] for _ in range(parallel)]
    setup.close()
    connections = [Connection(host, int(port), token) for _ in sessions]
    streams = [SseReader(host, int(port), token, f"/sessions/{sid}/events") for sid in sessions]
    await asyncio.gather(*(c.open() for c in connections), *(s.open() for s in streams))
    done = 0
    message = {"type": "user.message", "text": "hi"}

    async def drive(sid: str, connection: Connection, stream: SseReader, deadline: float) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            status, raw = await connection.request("POST", f"/sessions/{sid}/events", message)
            if status != 202:
                raise RuntimeError(f"send failed: {status} {raw[:200]!r}")
            await stream.wait_idle(json.loads(raw)["id"])
            done += 1

    work = list(zip(sessions, connections, streams, strict=True))
    warmup = time.perf_counter() + 2  # starts hosts and attaches every session
    await asyncio.gather(*(drive(s, c, st, warmup) for s, c, st in work))
    done = 0
    cpu_before, started = _server_cpu(), time.perf_counter()
    await asyncio.gather(*(drive(s, c, st, started + seconds) for s, c, st in work))
    elapsed = time.perf_counter() - started
    cpu = (_server_cpu() - cpu_before) / elapsed * 100
    for connection, stream in zip(connections, streams, strict=True):
        connection.close()
        stream.close()
    return done / elapsed, cpu


_SERVER_PID = 0


def _server_cpu() -> float:
    fields = Path(f"/proc/{_SERVER_PID}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def create_sessions(url: str, token: str, count: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    body = {"harness": "bench", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        return [(await client.post("/sessions", json=body)).json()["id"] for _ in range(count)]


async def load_sessions(url: str, token: str, ids: list[str]) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        for start in range(0, len(ids), 50):
            await asyncio.gather(*(client.get(f"/sessions/{sid}") for sid in ids[start : start + 50]))


def idle_memory(directory: Path, count: int) -> float:
    """RSS per loaded idle session, on a fresh server whose sessions were created by another."""
    creator, url, token = start_brain(directory, harness=INSTANT_RUNNER, active=16)
    try:
        ids = asyncio.run(create_sessions(url, token, count + 1))
    finally:
        creator.terminate()
        creator.wait(30)
    brain, url, token = start_brain(directory, harness=INSTANT_RUNNER, active=16, token=token)
    try:
        asyncio.run(load_sessions(url, token, ids[:1]))  # warm every code path once
        time.sleep(0.5)
        before = rss_bytes(brain.pid)
        asyncio.run(load_sessions(url, token, ids[1:]))
        time.sleep(0.5)
        return (rss_bytes(brain.pid) - before) / count
    finally:
        brain.terminate()
        brain.wait(30)


def summarize(name: str, samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    median = statistics.median(samples) * 1000
    p95 = samples[int(len(samples) * 0.95) - 1] * 1000
    print(f"{name:<34} median {median:7.2f} ms   p95 {p95:7.2f} ms   (n={len(samples)})")
    return median, p95


LOOP_RUNNER = ["python", "-m", "runners.loop"]
# The scripted provider with no pauses: what remains is the runner's and Brain's own cost.
INSTANT_SCRIPT = {"echo_prefix": "You said: ", "chunk_words": 3, "delay_ms": 0, "rules": []}


def start_scripted_provider(directory: Path) -> tuple[subprocess.Popen[str], str]:
    script = directory / "instant-script.json"
    directory.mkdir(parents=True, exist_ok=True)
    script.write_text(json.dumps(INSTANT_SCRIPT))
    process = subprocess.Popen(
        [sys.executable, "-m", "services.scripted_provider", "--port", "0", "--script", str(script)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    return process, line.strip().rsplit(" ", 1)[-1] + "/v1"


def provider_requests(provider_url: str) -> list[dict[str, Any]]:
    """Every model request the scripted provider received (path, headers, body), then clear its log."""
    root = provider_url.removesuffix("/v1")
    requests: list[dict[str, Any]] = httpx.get(root + "/_requests", timeout=60).json()
    httpx.post(root + "/_reset", timeout=10)
    return requests


async def direct_provider_latencies(provider_url: str, requests: list[dict[str, Any]]) -> list[float]:
    """The loop runner's floor: each logged request sent again as is, its stream read to the end."""
    root = provider_url.removesuffix("/v1")
    samples = []
    async with httpx.AsyncClient(base_url=root, timeout=30) as client:
        for index, request in enumerate(requests):
            headers = {name: value for name, value in request["headers"].items() if name != "content-type"}
            start = time.perf_counter()
            async with client.stream("POST", request["path"], json=request["body"], headers=headers) as response:
                async for _chunk in response.aiter_raw():
                    pass
            if response.status_code != 200:
                raise RuntimeError(f"direct request failed: {response.status_code}")
            if index >= 10:  # the same turns the Brain measurement leaves out
                samples.append(time.perf_counter() - start)
    return samples


def _print_throughput(name: str, rate: float, parallel: int, cpu: float) -> None:
    print(f"{name:<34} {rate:7.1f} turns/s, {parallel} parallel sessions (server CPU {cpu:.0f}%)")


def measure_instant_runner(directory: Path, arguments: argparse.Namespace) -> float:
    """The bare ASGI floor and Brain with the instant runner; returns Brain's median (ms)."""
    global _SERVER_PID
    floor_port = free_port()
    floor = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--access-log", "/dev/null", "-b", "127.0.0.1", "-p", str(floor_port)]
        + ["bench.floor_app:app"],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        brain, url, token = start_brain(directory, harness=INSTANT_RUNNER, active=max(16, arguments.parallel))
    except RuntimeError:
        floor.terminate()
        floor.wait(10)
        raise
    try:
        wait_http(f"http://127.0.0.1:{floor_port}/ping")
        floor_samples = asyncio.run(floor_latencies(f"http://127.0.0.1:{floor_port}", arguments.turns))
        floor_median, _ = summarize("floor (bare ASGI POST -> SSE)", floor_samples)
        instant_median, _ = summarize(
            "brain turn, instant runner", asyncio.run(brain_turn_latencies(url, token, arguments.turns))
        )
        print(f"{'ratio instant runner / floor':<34} {instant_median / floor_median:.2f}x")
        _SERVER_PID = brain.pid
        rate, cpu = asyncio.run(throughput(url, token, arguments.parallel, arguments.seconds))
        _print_throughput("throughput, instant runner", rate, arguments.parallel, cpu)
        return instant_median
    finally:
        brain.terminate()
        floor.terminate()
        brain.wait(30)
        floor.wait(10)


def measure_loop_runner(directory: Path, arguments: argparse.Namespace, instant_median: float | None) -> None:
    """Brain with the loop runner on the Responses wire, and the same requests sent directly."""
    global _SERVER_PID
    provider, provider_url = start_scripted_provider(directory / "provider")
    try:
        brain, url, token = start_brain(
            directory / "loop", harness=LOOP_RUNNER, active=max(16, arguments.parallel), provider_url=provider_url
        )
    except RuntimeError:
        provider.terminate()
        provider.wait(10)
        raise
    try:
        loop_median, _ = summarize(
            "brain turn, loop runner + scripted", asyncio.run(brain_turn_latencies(url, token, arguments.turns))
        )
        if instant_median is not None:
            print(f"{'ratio loop runner / instant runner':<34} {loop_median / instant_median:.2f}x")
        requests = provider_requests(provider_url)
        if len(requests) != arguments.turns + 10 or {r["wire"] for r in requests} != {"openai-responses"}:
            raise RuntimeError(f"expected {arguments.turns + 10} Responses requests, got {len(requests)}")
        direct_median, _ = summarize(
            "floor: same requests, direct", asyncio.run(direct_provider_latencies(provider_url, requests))
        )
        print(f"{'ratio loop runner / direct':<34} {loop_median / direct_median:.2f}x")
        if not arguments.loop_only:
            _SERVER_PID = brain.pid
            rate, cpu = asyncio.run(throughput(url, token, arguments.parallel, arguments.seconds))
            _print_throughput("throughput, loop runner", rate, arguments.parallel, cpu)
    finally:
        brain.terminate()
        provider.terminate()
        brain.wait(30)
        provider.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--loop-only", action="store_true", help="only the loop runner's latency and its direct floor")
    arguments = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="brain-bench-") as tmp:
        directory = Path(tmp)
        instant_median = None if arguments.loop_only else measure_instant_runner(directory / "instant", arguments)
        measure_loop_runner(directory, arguments, instant_median)
        if not arguments.loop_only:
            per_session = idle_memory(directory / "memory", arguments.idle)
            print(f"{'memory':<34} {per_session / 1024:7.1f} KiB RSS per loaded idle session (n={arguments.idle})")


if __name__ == "__main__":
    main()
