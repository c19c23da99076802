"""Persistence benchmark: bytes uploaded per checkpoint, flush and restore of a large session,
and turn latency while background sync runs.

    python bench/persistence_bench.py [--mb 100] [--checkpoints 30] [--sessions 32] [--seconds 10] [--no-s3]

Prints:
- per checkpoint, the archive's growth against the session's local growth (events.jsonl plus
  native files), flushing after every turn of ~24 KiB; the bar is new bytes + 64 KiB;
- the time to publish a session of --mb MB (its first upload, by the restarted server's
  startup scan, read from the server's log) and of `POST /restore` of that checkpoint on a
  second server with an empty data dir, on the filesystem archive and on S3 (a moto server on
  loopback);
- median/p95 turn latency and turns/s of --sessions sessions turning in parallel, without
  persistence and with an in-process filesystem archive syncing every second, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    INSTANT_RUNNER,
    MODEL,
    BrainProcess,
    SessionClient,
    append_turns,
    create_sessions,
    free_port,
    machine,
    percentile,
    start_brain,
    stop,
)

HARNESSES = {"instant": {"command": INSTANT_RUNNER}}
NEW_SESSION = {"harness": "instant", "config": {"model": MODEL, "tools": []}}


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def session_bytes(brain: BrainProcess, session_id: str) -> int:
    directory = brain.data_dir / "sessions" / session_id
    return (directory / "events.jsonl").stat().st_size + tree_bytes(directory / "native")


def filesystem_archive(directory: Path) -> dict[str, Any]:
    return {"provider": "filesystem", "directory": str(directory), "interval_seconds": 1, "queue": 10000}


def with_persistence(brain: BrainProcess, persistence: dict[str, Any], env: dict[str, str] | None = None) -> None:
    brain.config["persistence"] = persistence
    brain.env.update(env or {})


def bytes_per_checkpoint(directory: Path, checkpoints: int) -> None:
    archive = directory / "archive"
    brain = start_brain(directory / "brain", harnesses=HARNESSES, start=False)
    with_persistence(brain, filesystem_archive(archive))
    brain.start()
    try:
        with brain.client() as client:
            session_id = client.post(
                "/sessions", json={"harness": "instant", "config": {"model": MODEL, "tools": []}}
            ).json()["id"]
            overheads: list[int] = []
            for index in range(checkpoints):
                local_before, archive_before = session_bytes(brain, session_id), tree_bytes(archive)
                text = f"turn {index} " + secrets.token_hex(6 * 1024)  # ~12 KiB in, echoed back
                accepted = client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": text})
                wait_settled(client, session_id, accepted.json()["id"])
                flushed = client.post(f"/sessions/{session_id}/flush")
                flushed.raise_for_status()
                local_new = session_bytes(brain, session_id) - local_before
                uploaded = tree_bytes(archive) - archive_before
                overheads.append(uploaded - local_new)
        total_local, total_archive = session_bytes(brain, session_id), tree_bytes(archive)
    finally:
        brain.stop()
    print(f"bytes per checkpoint ({checkpoints} checkpoints, flush after each ~24 KiB turn):")
    print(
        f"  upload beyond the new bytes: median {statistics.median(overheads) / 1024:.1f} KiB, "
        f"max {max(overheads) / 1024:.1f} KiB (bar: 64 KiB)"
    )
    print(f"  archive {total_archive / 1024:.0f} KiB for a {total_local / 1024:.0f} KiB session")


def wait_settled(client: Any, session_id: str, input_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    after = ""
    while time.monotonic() < deadline:
        page = client.get(f"/sessions/{session_id}/events", params={"after": after, "limit": 1000}).json()
        for event in page["events"]:
            if event.get("input_id") == input_id and event["type"] == "session.status":
                if event["data"]["status"] != "running":
                    return
        after = page["next_cursor"] or after
        time.sleep(0.01)
    raise RuntimeError("turn did not settle")


def flush_and_restore(
    directory: Path, megabytes: int, persistence: dict[str, Any], env: dict[str, str]
) -> tuple[float, float]:
    """Seconds of the first publish of a session of `megabytes` MB and of its restore elsewhere."""
    old = start_brain(directory / "old", harnesses=HARNESSES, start=False)
    with_persistence(old, persistence, env)
    old.start()
    try:
        with old.client() as client:
            session_id = client.post(
                "/sessions", json={"harness": "instant", "config": {"model": MODEL, "tools": []}}
            ).json()["id"]
            accepted = client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": "hi"})
            wait_settled(client, session_id, accepted.json()["id"])
            client.post(f"/sessions/{session_id}/flush").raise_for_status()
        old.stop()
        append_turns(old.data_dir / "sessions" / session_id / "events.jsonl", megabytes << 20)
        # the checkpoint journal still names the first turn: the log beyond it is history only.
        # The restarted server's startup scan finds the session unsynced and publishes it at
        # once, in the background; that publish is the upload timed here (from its log line).
        old.start()
        size = (old.data_dir / "sessions" / session_id / "events.jsonl").stat().st_size
        with old.client(timeout=300) as client:
            deadline = time.monotonic() + 300
            while client.get(f"/sessions/{session_id}/sync").json()["history_bytes"] < size:
                if time.monotonic() > deadline:
                    raise RuntimeError("the session was not published after the restart")
                time.sleep(0.05)
            flushed = client.post(f"/sessions/{session_id}/flush")
            flushed.raise_for_status()
            checkpoint = flushed.json()["checkpoint"]
        flush_seconds = max(
            float(entry["seconds"])
            for entry in map(json.loads, (old.directory / "brain.log").read_text().splitlines())
            if entry.get("msg") == "session published" and int(entry.get("bytes", 0)) > size // 2
        )
    finally:
        old.stop()
    new = start_brain(directory / "new", harnesses=HARNESSES, start=False)
    new.token = old.token
    with_persistence(new, persistence, {**env, "BENCH_TOKEN": old.token})
    new.start()
    try:
        with new.client(timeout=300) as client:
            began = time.perf_counter()
            restored = client.post(f"/sessions/{session_id}/restore", json={"checkpoint": checkpoint})
            restore_seconds = time.perf_counter() - began
            restored.raise_for_status()
            size = (new.data_dir / "sessions" / session_id / "events.jsonl").stat().st_size
            assert size >= megabytes << 20, size
    finally:
        new.stop()
    return flush_seconds, restore_seconds


def start_moto(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    binary = Path(sys.executable).with_name("moto_server")
    with (directory / "moto.log").open("ab") as log:
        process = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.put(f"{endpoint}/bench-archive", timeout=1)
            return process, endpoint
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("moto_server did not start")


async def turn_latencies(brain: BrainProcess, sessions: int, seconds: float) -> tuple[list[float], float]:
    ids = await create_sessions(brain, "instant", sessions)
    clients = [await SessionClient(brain, session_id).open() for session_id in ids]
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def drive(client: SessionClient) -> None:
        while time.perf_counter() < deadline:
            turn = await client.turn("hello")
            latencies.append(turn.latency)

    began = time.perf_counter()
    await asyncio.gather(*(drive(client) for client in clients))
    elapsed = time.perf_counter() - began
    for client in clients:
        client.close()
    return latencies, len(latencies) / elapsed


def latency_under_sync(directory: Path, sessions: int, seconds: float) -> None:
    results = {}
    for name, persistence in (("no persistence", None), ("filesystem sync", filesystem_archive(directory / "archive"))):
        brain = start_brain(directory / name.replace(" ", "-"), harnesses=HARNESSES, start=False)
        if persistence is not None:
            with_persistence(brain, persistence)
        brain.start()
        try:
            results[name] = asyncio.run(turn_latencies(brain, sessions, seconds))
        finally:
            brain.stop()
    print(f"turn latency, {sessions} sessions turning in parallel for {seconds:.0f} s:")
    base_median = statistics.median(results["no persistence"][0])
    for name, (latencies, rate) in results.items():
        median = statistics.median(latencies)
        print(
            f"  {name:16} median {median * 1000:6.2f} ms  p95 {percentile(latencies, 95) * 1000:6.2f} ms  "
            f"{rate:7.0f} turns/s  (median x{median / base_median:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--checkpoints", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--no-s3", action="store_true")
    arguments = parser.parse_args()
    print(f"persistence bench on {machine()}")
    directory = Path(tempfile.mkdtemp(prefix="brain-persistence-bench-"))
    try:
        bytes_per_checkpoint(directory / "growth", arguments.checkpoints)
        fs = flush_and_restore(directory / "fs", arguments.mb, filesystem_archive(directory / "fs-archive"), env={})
        print(
            f"{arguments.mb} MB session, filesystem archive: publish {fs[0]:.2f} s, "
            f"restore {fs[1]:.2f} s (bar: 5 s each)"
        )
        if not arguments.no_s3:
            (directory / "s3").mkdir()
            moto, endpoint = start_moto(directory / "s3")
            try:
                s3 = {
                    "provider": "s3",
                    "bucket": "bench-archive",
                    "endpoint": endpoint,
                    "region": "us-east-1",
                    "access_key_env": "BENCH_S3_KEY",
                    "secret_key_env": "BENCH_S3_SECRET",
                    "interval_seconds": 1,
                    "queue": 10000,
                }
                env = {"BENCH_S3_KEY": "testing", "BENCH_S3_SECRET": "testing"}
                s3_times = flush_and_restore(directory / "s3", arguments.mb, s3, env)
                print(
                    f"{arguments.mb} MB session, S3 (moto on loopback): publish {s3_times[0]:.2f} s, "
                    f"restore {s3_times[1]:.2f} s"
                )
            finally:
                stop(moto)
        latency_under_sync(directory / "latency", arguments.sessions, arguments.seconds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
