"""Scale: 1,000 sessions with a turn in flight at once, each turn's model taking a fixed time.

    .venv/bin/python bench/scale_bench.py [--sessions 1000] [--model-seconds 1.0] [--sustain 5]

The model is the instant test runner's `sleep:SECONDS` prompt: the runner waits exactly that long
(asyncio.sleep), then answers. So a turn's *added* latency is its latency (POST -> ending status
on SSE) minus the model's fixed time: what Brain, the harness pipes and the client add.

1. Burst: every session sends one turn at the same moment, so all of them are in flight at once.
2. Sustained: every session runs turns back to back for --sustain seconds, starts staggered over
   one model time, so about --sessions turns stay in flight (it needs sessions / model-seconds
   turns/s; a server that cannot keep up shows it as added latency).

Prints: every turn's completion, added latency p50/p95/p99/max, the time to accept all sends,
the most turns in flight at once (from the client's timestamps), turns/s, server RSS (idle
sessions loaded vs. all turns in flight) and harness host RSS, and each process's CPU share.
The host config admits them: limits.active/loaded/subscribers above --sessions and the harness
at max_shared 128 sessions per host (8 hosts for 1,000). The client is the raw-socket one
(bench/rawhttp.py), two sockets per session; RLIMIT_NOFILE is raised for it and for Brain.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    INSTANT_RUNNER,
    BrainProcess,
    SessionClient,
    Turn,
    attach_one_by_one,
    children_rss_bytes,
    cpu_seconds,
    create_sessions,
    machine,
    raise_nofile,
    rss_bytes,
    start_brain,
    summary,
)

MAX_SHARED = 128
OPEN_BATCH = 100  # connections opened at once (keeps the listen backlog from overflowing)
MiB = 1 << 20


def most_in_flight(turns: list[Turn]) -> int:
    """The largest number of turns accepted and not yet ended at the same instant."""
    edges = sorted([(t.accepted, 1) for t in turns] + [(t.ended, -1) for t in turns])
    current = peak = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


class Usage:
    """CPU seconds of Brain, its harness hosts and this client between two readings."""

    def __init__(self, brain: BrainProcess) -> None:
        self.brain = brain
        self.started = self._read()
        self.at = time.perf_counter()

    def _read(self) -> dict[str, float]:
        hosts = 0.0
        for task in Path(f"/proc/{self.brain.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                try:
                    hosts += cpu_seconds(int(child))
                except OSError:
                    continue
        return {"brain": cpu_seconds(self.brain.pid), "harness hosts": hosts, "bench client": sum(os.times()[:2])}

    def shares(self) -> str:
        now, elapsed = self._read(), time.perf_counter() - self.at
        return ", ".join(f"{name} {(now[name] - self.started[name]) / elapsed * 100:.0f}%" for name in now)


def memory(brain: BrainProcess) -> str:
    return f"server {rss_bytes(brain.pid) / MiB:.0f} MiB, harness hosts {children_rss_bytes(brain.pid) / MiB:.0f} MiB"


def report(name: str, turns: list[Turn], model: float, elapsed: float, *, rated: bool = True) -> None:
    failed = [t for t in turns if t.status != "idle"]
    added = [t.latency - model for t in turns]
    accepts = [t.accepted - t.started for t in turns]
    rate = f", {len(turns) / elapsed:.0f} turns/s" if rated else f", all ended after {elapsed:.2f} s"
    print(f"{name}: {len(turns) - len(failed)}/{len(turns)} turns ended idle{rate}")
    print(f"  {'added latency':<22} {summary(added)}")
    print(f"  {'send -> 202':<22} {summary(accepts)}")
    print(f"  {'most in flight at once':<22} {most_in_flight(turns)}")
    if failed:
        print(f"  failed: {sorted({t.status for t in failed})}")


async def bench(brain: BrainProcess, sessions: int, model: float, sustain: float) -> None:
    started = time.perf_counter()
    ids = await create_sessions(brain, "bench", sessions, parallel=16)
    clients = [SessionClient(brain, session_id) for session_id in ids]
    for first in range(0, len(clients), OPEN_BATCH):
        await asyncio.gather(*(client.open() for client in clients[first : first + OPEN_BATCH]))
    await attach_one_by_one(clients)
    print(f"{sessions} sessions created, streaming and attached in {time.perf_counter() - started:.1f} s")
    await asyncio.sleep(1.0)  # let write-behind settle
    print(f"  {'RSS, all idle':<22} {memory(brain)}")
    text = f"sleep:{model:g}"

    # 1. burst: every session sends at the same moment
    usage = Usage(brain)
    peak_rss: list[str] = []

    async def sample() -> None:
        await asyncio.sleep(model / 2)
        peak_rss.append(memory(brain))

    began = time.perf_counter()
    sampler = asyncio.get_running_loop().create_task(sample())
    turns = await asyncio.gather(*(client.turn(text) for client in clients))
    await sampler
    report("burst", list(turns), model, time.perf_counter() - began, rated=False)
    print(f"  {'RSS, all in flight':<22} {peak_rss[0]}")
    print(f"  {'CPU':<22} {usage.shares()}")

    # 2. sustained: turns back to back, starts staggered over one model time
    if sustain > 0:
        sustained: list[Turn] = []
        deadline = time.perf_counter() + sustain
        usage = Usage(brain)

        async def drive(index: int, client: SessionClient) -> None:
            await asyncio.sleep(model * index / sessions)
            while time.perf_counter() < deadline:
                sustained.append(await client.turn(text))

        began = time.perf_counter()
        sampler = asyncio.get_running_loop().create_task(sample())
        await asyncio.gather(*(drive(index, client) for index, client in enumerate(clients)))
        await sampler
        report(f"sustained {sustain:g} s", sustained, model, time.perf_counter() - began)
        print(f"  {'RSS, mid-run':<22} {peak_rss[-1]}")
        print(f"  {'CPU':<22} {usage.shares()}")
    for client in clients:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--model-seconds", type=float, default=1.0, help="the model's fixed time per turn")
    parser.add_argument("--sustain", type=float, default=5.0, help="seconds of back-to-back turns (0: skip)")
    arguments = parser.parse_args()
    files = raise_nofile(max(65536, arguments.sessions * 4 + 1024))
    print(machine())
    sessions = arguments.sessions
    hosts = -(-sessions // MAX_SHARED)
    limits = {"active": sessions + 16, "loaded": sessions + 64, "subscribers": sessions + 64}
    print(
        f"limits: {limits}; harness max_shared {MAX_SHARED}, max_hosts {hosts + 1}; "
        f"open files {files}; model time {arguments.model_seconds:g} s"
    )
    with tempfile.TemporaryDirectory(prefix="brain-scale-bench-") as tmp:
        brain = start_brain(
            Path(tmp),
            harnesses={"bench": {"command": INSTANT_RUNNER, "max_shared": MAX_SHARED, "max_hosts": hosts + 1}},
            limits=limits,
        )
        try:
            asyncio.run(bench(brain, sessions, arguments.model_seconds, arguments.sustain))
        finally:
            brain.stop()


if __name__ == "__main__":
    main()
