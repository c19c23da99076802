"""Runtime tools: a call round trip through a client executor (SSE + HTTP replies, and
WebSocket RPC) against an HTTP tool call to the example tool service, in the same run; then
runtime calls per second across 32 executors.

    .venv/bin/python bench/executor_bench.py [--turns 200] [--executors 32] [--seconds 10]

Real processes: Brain (`runbrain`) with the instant runner (a prompt `tool:NAME {json}` makes
it call NAME once), the example tool service serving `echo`, and executors in this process
(asyncio: httpx for SSE + POST replies, websockets for RPC). The round trip is read from the
event log: `tool.result` time minus `tool.call` time, so it is Brain's view of one call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    INSTANT_RUNNER,
    MODEL,
    TOOLS_KEY,
    BrainProcess,
    SessionClient,
    machine,
    percentile,
    start_brain,
    start_tool_service,
    stop,
)
from examples.tools.app import tool_bindings  # noqa: E402

ECHO = {
    "name": "echo",
    "description": "Echo text.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}
ROUND_TRIP_BAR = 2.0


class Executor:
    """One runtime executor in this process answering `echo` at once."""

    def __init__(self, brain: BrainProcess, transport: str) -> None:
        self.brain = brain
        self.transport = transport
        self.id = ""
        self.token = ""
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.http = httpx.AsyncClient(timeout=60)

    async def start(self) -> None:
        response = await self.http.post(
            f"{self.brain.url}/executors",
            headers=self.brain.headers(),
            json={"binding": "runtime", "tools": [ECHO]},
        )
        response.raise_for_status()
        credential = response.json()
        self.id, self.token = credential["id"], credential["token"]
        runner = self._sse if self.transport == "sse" else self._rpc
        self.task = asyncio.get_running_loop().create_task(runner())
        await asyncio.wait_for(self.ready.wait(), 30)

    @staticmethod
    def _result(command: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": command["arguments"].get("text", "")}]}

    async def _sse(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        base = f"{self.brain.url}/executors/{self.id}"
        async with self.http.stream("GET", f"{base}/commands", headers=headers) as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                command = json.loads(line[5:])
                if command["type"] == "ready":
                    self.ready.set()
                elif command["type"] == "call":
                    reply = {"connection": command["connection"], "call_id": command["call_id"]}
                    await self.http.post(
                        f"{base}/responses", headers=headers, json={**reply, "result": self._result(command)}
                    )

    async def _rpc(self) -> None:
        from websockets.asyncio.client import connect

        url = f"ws://{self.brain.config['listen']}/executors/{self.id}/rpc"
        async with connect(url, subprotocols=["brain-rpc", f"brain-auth.{self.token}"]) as socket:  # type: ignore[list-item]
            async for frame in socket:
                command = json.loads(frame)
                if command["type"] == "ready":
                    self.ready.set()
                elif command["type"] == "call":
                    reply = {"connection": command["connection"], "call_id": command["call_id"]}
                    await socket.send(json.dumps({**reply, "result": self._result(command)}))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        await self.http.aclose()


def _time(event: dict[str, Any]) -> float:
    return datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


async def _session(brain: BrainProcess, *, tools: list[str], executor: Executor | None) -> str:
    config: dict[str, Any] = {"model": MODEL, "tools": tools}
    if executor is not None:
        config["bindings"] = [{"alias": "runtime", "executor": executor.id, "runtime": [ECHO]}]
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{brain.url}/sessions", headers=brain.headers(), json={"harness": "instant", "config": config}
        )
        response.raise_for_status()
        return str(response.json()["id"])


async def _round_trips(brain: BrainProcess, session_id: str) -> list[float]:
    """tool.result time - tool.call time of every call in the session's log."""
    calls: dict[str, float] = {}
    trips: list[float] = []
    after = ""
    async with httpx.AsyncClient(timeout=30, headers=brain.headers()) as http:
        while True:
            page = (
                await http.get(f"{brain.url}/sessions/{session_id}/events", params={"after": after, "limit": 1000})
            ).json()
            for event in page["events"]:
                if event["type"] == "tool.call":
                    calls[event["data"]["id"]] = _time(event)
                elif event["type"] == "tool.result" and event["data"]["call_id"] in calls:
                    trips.append(_time(event) - calls[event["data"]["call_id"]])
            if not page["events"]:
                return trips
            after = page["next_cursor"]


async def round_trip(brain: BrainProcess, kind: str, turns: int) -> tuple[list[float], list[float]]:
    executor = None
    if kind != "http":
        executor = Executor(brain, kind)
        await executor.start()
    try:
        session_id = await _session(brain, tools=["echo"] if kind == "http" else [], executor=executor)
        client = await SessionClient(brain, session_id).open()
        name = "echo" if kind == "http" else "runtime_echo"
        latencies = []
        for index in range(turns):
            turn = await client.turn(f'tool:{name} {{"text": "call {index}"}}')
            if turn.status != "idle":
                raise RuntimeError(f"{kind} turn ended {turn.status}")
            latencies.append(turn.latency)
        client.close()
        return await _round_trips(brain, session_id), latencies
    finally:
        if executor is not None:
            await executor.close()


CALLS_PER_TURN = 16


async def throughput(brain: BrainProcess, kind: str, executors: int, seconds: float) -> float:
    """Runtime calls per second: each session's turns make CALLS_PER_TURN concurrent calls."""
    pool = [Executor(brain, kind) for _ in range(executors)]
    await asyncio.gather(*(executor.start() for executor in pool))
    sessions = [await _session(brain, tools=[], executor=executor) for executor in pool]
    clients = [await SessionClient(brain, session_id).open() for session_id in sessions]
    done = 0
    deadline = time.perf_counter() + seconds

    async def drive(client: SessionClient) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            turn = await client.turn(f'tools:{CALLS_PER_TURN} runtime_echo {{"text": "x"}}')
            if turn.status != "idle":
                raise RuntimeError(f"turn ended {turn.status}")
            done += CALLS_PER_TURN

    began = time.perf_counter()
    await asyncio.gather(*(drive(client) for client in clients))
    elapsed = time.perf_counter() - began
    for client in clients:
        client.close()
    await asyncio.gather(*(executor.close() for executor in pool))
    return done / elapsed


async def main_async(arguments: argparse.Namespace) -> None:
    directory = Path(tempfile.mkdtemp(prefix="brain-executor-bench-"))
    service, service_url = start_tool_service()
    try:
        echo = {**tool_bindings(service_url, tenant="bench")[0], "token_env": "BENCH_TOOLS_KEY"}
        brain = start_brain(
            directory,
            harnesses={"instant": {"command": INSTANT_RUNNER}},
            tools=[echo],
            limits={"active": 64, "loaded": 4096},
            env={"BENCH_TOOLS_KEY": TOOLS_KEY},
        )
        try:
            medians = {}
            print(f"tool call round trip (tool.call → tool.result in the log), {arguments.turns} turns each:")
            for kind in ("http", "sse", "rpc"):
                trips, latencies = await round_trip(brain, kind, arguments.turns)
                medians[kind] = statistics.median(trips)
                p95 = percentile(trips, 95) * 1000
                print(
                    f"  {kind:4}  call median {medians[kind] * 1000:6.2f} ms  p95 {p95:6.2f} ms"
                    f"   turn median {statistics.median(latencies) * 1000:6.2f} ms"
                )
            for kind in ("sse", "rpc"):
                ratio = medians[kind] / medians["http"]
                print(f"  {kind} / http: x{ratio:.2f} (bar: x{ROUND_TRIP_BAR:.1f})")
            for kind in ("sse", "rpc"):
                rate = await throughput(brain, kind, arguments.executors, arguments.seconds)
                print(
                    f"runtime calls/s over {kind}, {arguments.executors} executors, "
                    f"{CALLS_PER_TURN} calls per turn: {rate:.0f} (bar: 1,000)"
                )
        finally:
            brain.stop()
    finally:
        stop(service)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--executors", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10)
    arguments = parser.parse_args()
    print(f"executor bench on {machine()}")
    asyncio.run(main_async(arguments))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
