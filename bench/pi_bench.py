"""Pi against loop on the same scripted turns: host start, RSS per attached session, turn latency.

    .venv/bin/python bench/pi_bench.py [--attachments 50] [--turns 100]

Runs real processes: `python -m runners.loop` and `node runners/pi/src/main.mjs`, each against the
scripted provider with instant replies (OpenAI Responses, `openai/gpt-4.1-mini`), driven over
the runner protocol on stdio one request at a time. Prints each figure and the pi/loop ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HARNESSES = {
    "loop": [sys.executable, "-m", "runners.loop"],
    "pi": ["node", str(PROJECT_ROOT / "runners" / "pi" / "src" / "main.mjs")],
}
START_SAMPLES = 7  # host starts per harness (spawn until the first open is answered)
MIB = 1024 * 1024


def _env() -> dict[str, str]:
    env = {name: os.environ[name] for name in ("PATH", "TMPDIR", "LANG", "LC_ALL") if name in os.environ}
    return {**env, "NO_COLOR": "1", "PYTHONPATH": str(PROJECT_ROOT)}


class Runner:
    """A synchronous RunnerFrame client: enough for sequential benchmarks."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(command, cwd=cwd, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._ids = 0

    def send(self, frame: dict[str, Any]) -> str:
        self._ids += 1
        frame = {**frame, "id": f"b{self._ids}"}
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")
        self.process.stdin.flush()
        return str(frame["id"])

    def reply(self, request_id: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            frame: dict[str, Any] = json.loads(self.process.stdout.readline())
            if frame.get("id") == request_id and "method" not in frame:
                return frame

    def open(self, attachment: str, directory: Path, base_url: str) -> None:
        params = {
            "session_id": attachment,
            "dir": str(directory),
            "config": {"model": "openai/gpt-4.1-mini", "tools": []},
            "tools": [],
            "provider": {"api_key": "bench", "base_url": base_url},
        }
        reply = self.reply(self.send({"attachment": attachment, "method": "open", "params": params}))
        assert "result" in reply, reply

    def prompt(self, attachment: str, text: str) -> None:
        frame = {"attachment": attachment, "turn": "t", "method": "prompt", "params": {"text": text}}
        reply = self.reply(self.send(frame))
        assert reply.get("result") == {}, reply

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match is not None
        return int(match.group(1)) * 1024

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def start_provider(script: Path) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "services.scripted_provider", "--port", "0", "--script", str(script)]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=_env(), stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    match = re.search(r"(http://[\d.]+:\d+)", process.stderr.readline())
    assert match, "scripted provider did not start"
    return process, match.group(1) + "/v1"


def bench_start(command: list[str], work: Path, base_url: str) -> list[float]:
    samples = []
    for index in range(START_SAMPLES):
        began = time.perf_counter()
        runner = Runner(command, work)
        runner.open("s", work / f"start-{index}", base_url)
        samples.append((time.perf_counter() - began) * 1000)
        runner.close()
    return samples


def bench_memory(command: list[str], work: Path, base_url: str, attachments: int) -> tuple[float, float]:
    """RSS growth per session (MiB) after attaching and after one turn each, past a warm-up turn."""
    runner = Runner(command, work)
    runner.open("warm", work / "mem-warm", base_url)
    runner.prompt("warm", "warm up")
    baseline = runner.rss_bytes()
    for index in range(attachments):
        runner.open(f"m{index}", work / f"mem-{index}", base_url)
    opened = runner.rss_bytes()
    for index in range(attachments):
        runner.prompt(f"m{index}", f"hello from session {index}")
    after_turn = runner.rss_bytes()
    runner.close()
    return (opened - baseline) / attachments / MIB, (after_turn - baseline) / attachments / MIB


def bench_latency(command: list[str], work: Path, base_url: str, turns: int) -> list[float]:
    runner = Runner(command, work)
    runner.open("lat", work / "latency", base_url)
    runner.prompt("lat", "warm up")
    samples = []
    for index in range(turns):
        began = time.perf_counter()
        runner.prompt("lat", f"turn {index}")
        samples.append((time.perf_counter() - began) * 1000)
    runner.close()
    return samples


def _p90(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attachments", type=int, default=50)
    parser.add_argument("--turns", type=int, default=100)
    arguments = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        script = work / "instant.json"
        script.write_text(json.dumps({"delay_ms": 0, "chunk_words": 3}))
        provider, base_url = start_provider(script)
        try:
            for name, command in HARNESSES.items():
                directory = work / name
                directory.mkdir()
                starts = bench_start(command, directory, base_url)
                per_open, per_turn = bench_memory(command, directory, base_url, arguments.attachments)
                latency = bench_latency(command, directory, base_url, arguments.turns)
                figures[name] = {
                    "start median ms": statistics.median(starts),
                    "MiB per session opened": per_open,
                    "MiB per session after a turn": per_turn,
                    "turn median ms": statistics.median(latency),
                    "turn p90 ms": _p90(latency),
                }
        finally:
            provider.terminate()
            provider.wait()
    print(f"{arguments.attachments} attached sessions, {arguments.turns} text turns, instant scripted provider")
    print(f"{'figure':32} {'loop':>10} {'pi':>10} {'pi/loop':>8}")
    for key in figures["loop"]:
        loop, pi = figures["loop"][key], figures["pi"][key]
        ratio = f"{pi / loop:.2f}" if loop > 0 else "-"
        print(f"{key:32} {loop:10.3f} {pi:10.3f} {ratio:>8}")


if __name__ == "__main__":
    main()
