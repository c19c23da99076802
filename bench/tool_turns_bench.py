"""Tool-calling turns: turns/s and turn latency with N sessions where every turn makes one `echo`
tool call, against the same turns without the tool call, measured in the same run.

    .venv/bin/python bench/tool_turns_bench.py [--sessions 16] [--seconds 10] [--rounds 2]

Real processes only: Brain (`runbrain`) with the `loop` harness (`python -m runners.loop`), the
scripted model provider with no pauses as the model, and the example tool service serving `echo`
over HTTP through the tool registry. A tool turn sends `call echo {"text": ...}`: the model asks
for the call, Brain calls the service, the model reports the result (two model requests per
turn). A plain turn sends text the model answers at once (one model request).

Each round runs both kinds, each on fresh sessions (the loop runner resends the whole
conversation every turn, so sessions are not reused across measurements), plain first. Prints
turns/s, p50/p95/p99 latency (send -> ending status on SSE) and each process's CPU share while
measuring (100% = one core).
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
    LOOP_RUNNER,
    TOOLS_KEY,
    BrainProcess,
    SessionClient,
    Turn,
    attach_one_by_one,
    children_rss_bytes,
    cpu_seconds,
    create_sessions,
    machine,
    percentile,
    raise_nofile,
    start_brain,
    start_scripted_provider,
    start_tool_service,
    stop,
    summary,
)
from examples.tools.app import tool_bindings  # noqa: E402

# The scripted provider with no pauses: what remains is the runner's, the tool's and Brain's cost.
INSTANT_SCRIPT = {"echo_prefix": "You said: ", "chunk_words": 3, "delay_ms": 0, "rules": []}
TOOL_TEXT = 'call echo {"text": "hello from the benchmark"}'
PLAIN_TEXT = "hello from the benchmark"


def _child_pids(pid: int) -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


class CpuMeter:
    """CPU seconds used by Brain, its harness hosts, the provider, the tool service and this client."""

    def __init__(self, processes: dict[str, int]) -> None:
        self.processes = processes

    def read(self) -> dict[str, float]:
        figures = {}
        for name, pid in self.processes.items():
            try:
                figures[name] = cpu_seconds(pid)
            except OSError:
                figures[name] = 0.0
        figures["bench client"] = sum(os.times()[:2])
        hosts = 0.0
        for child in _child_pids(self.processes["brain"]):
            try:
                hosts += cpu_seconds(child)
            except OSError:
                continue
        figures["harness hosts"] = hosts
        return figures


async def run_phase(
    brain: BrainProcess, meter: CpuMeter, *, text: str, sessions: int, seconds: float, tools: list[str]
) -> tuple[list[Turn], dict[str, float], float]:
    """`sessions` fresh sessions run `text` turns back to back for `seconds` after a warm-up.

    Returns the measured turns, each process's CPU share (%) over the measured window, and its
    length (the last turns end a little after `seconds`).
    """
    ids = await create_sessions(brain, "loop", sessions, tools=tools)
    clients = [await SessionClient(brain, session_id).open() for session_id in ids]
    turns: list[Turn] = []

    async def drive(client: SessionClient, until: float, keep: bool) -> None:
        while time.perf_counter() < until:
            turn = await asyncio.wait_for(client.turn(text), 60)
            if turn.status != "idle":
                errors = [error["data"] for error in await client.errors(turn.input_id)]
                raise RuntimeError(f"a turn ended {turn.status}: {errors}")
            if keep:
                turns.append(turn)

    try:
        await attach_one_by_one(clients, text)
        warmup = time.perf_counter() + 1.0
        await asyncio.gather(*(drive(client, warmup, False) for client in clients))
        before, started = meter.read(), time.perf_counter()
        await asyncio.gather(*(drive(client, started + seconds, True) for client in clients))
        after, elapsed = meter.read(), time.perf_counter() - started
    finally:
        for client in clients:
            client.close()
    return turns, {name: (after[name] - before.get(name, 0.0)) / elapsed * 100 for name in after}, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="plain + tool measurements, alternated")
    parser.add_argument("--max-shared", type=int, default=8, help="loop harness: sessions per host")
    arguments = parser.parse_args()
    raise_nofile()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="brain-tool-turns-") as tmp:
        directory = Path(tmp)
        provider, provider_root = start_scripted_provider(directory / "provider", INSTANT_SCRIPT)
        service, service_url = start_tool_service()
        brain: BrainProcess | None = None
        try:
            echo = {**tool_bindings(service_url, tenant="bench")[0], "token_env": "BENCH_TOOLS_KEY"}
            sessions = arguments.sessions
            hosts = -(-sessions // arguments.max_shared) + 1
            brain = start_brain(
                directory / "brain",
                harnesses={"loop": {"command": LOOP_RUNNER, "max_shared": arguments.max_shared, "max_hosts": hosts}},
                limits={"active": max(16, sessions), "loaded": max(1024, sessions * 2 * arguments.rounds + 16)},
                providers={"openai": {"api_key_env": "BENCH_PROVIDER_KEY", "base_url": provider_root + "/v1"}},
                tools=[echo],
                env={"BENCH_TOOLS_KEY": TOOLS_KEY},
            )
            meter = CpuMeter({"brain": brain.pid, "provider": provider.pid, "tool service": service.pid})
            results: dict[str, list[Turn]] = {"plain": [], "tool": []}
            cpu: dict[str, list[dict[str, float]]] = {"plain": [], "tool": []}
            windows = {"plain": 0.0, "tool": 0.0}
            for _ in range(arguments.rounds):
                for kind, text in (("plain", PLAIN_TEXT), ("tool", TOOL_TEXT)):
                    turns, shares, elapsed = asyncio.run(
                        run_phase(brain, meter, text=text, sessions=sessions, seconds=arguments.seconds, tools=["echo"])
                    )
                    results[kind] += turns
                    cpu[kind].append(shares)
                    windows[kind] += elapsed
            hosts_rss = children_rss_bytes(brain.pid)
        finally:
            if brain is not None:
                brain.stop()
            stop(provider)
            stop(service)
    print(
        f"{sessions} sessions, loop harness (max_shared {arguments.max_shared}), scripted provider, "
        f"{arguments.rounds} x {arguments.seconds:g} s per kind"
    )
    rates: dict[str, float] = {}
    for kind, label in (("plain", "turns without a tool call"), ("tool", "turns with one echo call")):
        turns = results[kind]
        rates[kind] = len(turns) / windows[kind]
        latencies = [turn.latency for turn in turns]
        print(f"{label:<28} {rates[kind]:7.1f} turns/s   latency {summary(latencies)}")
        rounds = cpu[kind]
        usage = ", ".join(f"{name} {sum(r[name] for r in rounds) / len(rounds):.0f}%" for name in rounds[0])
        print(f"{'':<28} CPU: {usage}")
    if rates["plain"] and rates["tool"]:
        tool = [t.latency for t in results["tool"]]
        plain = [t.latency for t in results["plain"]]
        print(
            f"{'tool / plain':<28} throughput {rates['tool'] / rates['plain']:.2f}x, "
            f"median latency {percentile(tool, 50) / percentile(plain, 50):.2f}x"
        )
    print(f"{'harness hosts RSS at the end':<28} {hosts_rss / (1 << 20):.0f} MiB")


if __name__ == "__main__":
    main()
