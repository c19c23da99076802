"""Benchmarks for the `loop` runner: host start time, RSS per attached session, turn latency.

    .venv/bin/python bench/runner_bench.py [--attachments 100] [--turns 200]

Runs real processes: `python -m runners.loop` against the scripted provider with instant replies.
Bars (informational only): start < 500 ms, < 2 MiB per attached session.
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
START_BAR_MS = 500
SESSION_BAR_MIB = 2.0
START_SAMPLES = 7


def _env() -> dict[str, str]:
    env = {name: os.environ[name] for name in ("PATH", "TMPDIR", "LANG", "LC_ALL") if name in os.environ}
    return {**env, "NO_COLOR": "1", "PYTHONPATH": str(PROJECT_ROOT)}


class Runner:
    """A synchronous RunnerFrame client: enough for sequential benchmarks."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runners.loop"], cwd=cwd, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._ids = 0

    def send(self, frame: dict[str, Any]) -> str:
        self._ids += 1
        frame = {**frame, "id": f"b{self._ids}"}
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")
        self.process.stdin.flush()
        return frame["id"]

    def reply(self, request_id: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            frame = json.loads(self.process.stdout.readline())
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
        assert reply.get("result") == {}, reply

    def prompt(self, attachment: str, text: str) -> None:
        reply = self.reply(
            self.send({"attachment": attachment, "turn": "t", "method": "prompt", "params": {"text": text}})
        )
        assert reply.get("result") == {}, reply

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]  # always present on Linux

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _start_provider(script: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "services.scripted_provider", "--port", "0", "--script", str(script)],
        cwd=PROJECT_ROOT,
        env=_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    match = re.search(r"(http://[\d.]+:\d+)", process.stderr.readline())
    assert match, "scripted provider did not start"
    return process, match.group(1) + "/v1"


def bench_start(work: Path, base_url: str) -> list[float]:
    samples = []
    for index in range(START_SAMPLES):
        began = time.perf_counter()
        runner = Runner(work)
        runner.open("s", work / f"start-{index}", base_url)
        samples.append((time.perf_counter() - began) * 1000)
        runner.close()
    return samples


def bench_memory(work: Path, base_url: str, attachments: int) -> tuple[float, float, int]:
    """RSS growth per session, after opening and after one turn each (SDK loaded beforehand)."""
    runner = Runner(work)
    runner.open("warm", work / "mem-warm", base_url)
    runner.prompt("warm", "warm up")  # imports the SDK and opens the connection pool once
    baseline = runner.rss_bytes()
    for index in range(attachments):
        runner.open(f"m{index}", work / f"mem-{index}", base_url)
    opened = runner.rss_bytes()
    for index in range(attachments):
        runner.prompt(f"m{index}", f"hello from session {index}")
    after_turn = runner.rss_bytes()
    runner.close()
    mib = 1024 * 1024
    return (opened - baseline) / attachments / mib, (after_turn - baseline) / attachments / mib, baseline


def bench_latency(work: Path, base_url: str, turns: int) -> list[float]:
    runner = Runner(work)
    runner.open("lat", work / "latency", base_url)
    runner.prompt("lat", "warm up")
    samples = []
    for index in range(turns):
        began = time.perf_counter()
        runner.prompt("lat", f"turn {index}")
        samples.append((time.perf_counter() - began) * 1000)
    runner.close()
    return samples


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attachments", type=int, default=100)
    parser.add_argument("--turns", type=int, default=200)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        script = work / "instant.json"
        script.write_text(json.dumps({"delay_ms": 0, "chunk_words": 3}))
        provider, base_url = _start_provider(script)
        try:
            starts = bench_start(work, base_url)
            per_open, per_turn, baseline = bench_memory(work, base_url, arguments.attachments)
            latency = bench_latency(work, base_url, arguments.turns)
        finally:
            provider.terminate()
            provider.wait()
    start_median = statistics.median(starts)
    print(
        f"runner start (spawn → open reply): median {start_median:.0f} ms, max {max(starts):.0f} ms "
        f"[bar < {START_BAR_MS} ms: {'ok' if start_median < START_BAR_MS else 'MISSED'}]"
    )
    print(f"host RSS after first turn: {baseline / 1024 / 1024:.1f} MiB")
    print(
        f"RSS per attached session ({arguments.attachments}): {per_open:.3f} MiB opened, "
        f"{per_turn:.3f} MiB after one turn "
        f"[bar < {SESSION_BAR_MIB} MiB: {'ok' if per_turn < SESSION_BAR_MIB else 'MISSED'}]"
    )
    print(
        f"turn latency ({arguments.turns} turns, instant provider): median {statistics.median(latency):.1f} ms, "
        f"p95 {_p95(latency):.1f} ms"
    )


if __name__ == "__main__":
    main()
