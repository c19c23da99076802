"""Loading a large session: how long `GET /sessions/{id}` takes on a cold ~100 MB event log, and
what it does meanwhile to the turn latency of another session on the same server.

    .venv/bin/python bench/load_bench.py [--mib 100] [--repeat 3] [--before 3]

A session is created through the API with the instant runner and runs one turn (its message has
an idempotency key); Brain is stopped, whole turns in the server's own line format (user.message,
status running, a 2-4 KiB assistant.message, status idle) are appended to its events.jsonl up to
--mib, and Brain is started again. A second session then runs short turns back to back: first
for --before seconds (the baseline), then while the big session is loaded. Each repeat restarts
Brain, so every load is cold for the server (the file stays in the page cache).

Prints: the log's size, the load time, server RSS before and after the load, the latency of the
first page read at the end of the big log, of a resend of the first message's key, and of a turn
on the big session; the other session's turn latency (p50/p95/p99) before and during the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    INSTANT_RUNNER,
    BrainProcess,
    SessionClient,
    Turn,
    append_turns,
    create_sessions,
    cursor,
    machine,
    percentile,
    raise_nofile,
    rss_bytes,
    start_brain,
    summary,
)
from bench.rawhttp import Connection  # noqa: E402

FIRST_KEY = "big-session-first-message"
FIRST_TEXT = "the first message of a long session"


async def prepare(brain: BrainProcess) -> tuple[str, str]:
    """The big session (one turn, keyed) and the other session (one turn); both idle."""
    big, other = await create_sessions(brain, "bench", 2)
    for session_id, key in ((big, FIRST_KEY), (other, "")):
        client = await SessionClient(brain, session_id).open()
        try:
            message: dict[str, Any] = {"type": "user.message", "text": FIRST_TEXT}
            if key:
                message["key"] = key
            status, raw = await client.connection.request("POST", f"/sessions/{session_id}/events", message)
            assert status == 202, raw
            await client.stream.wait_idle(json.loads(raw)["id"])
        finally:
            client.close()
    return big, other


async def timed(connection: Connection, method: str, path: str, body: Any = None) -> tuple[float, int, bytes]:
    started = time.perf_counter()
    status, raw = await connection.request(method, path, body)
    return time.perf_counter() - started, status, raw


async def measure(brain: BrainProcess, big: str, other: str, built: dict[str, Any], before: float) -> dict[str, Any]:
    client = await SessionClient(brain, other).open()
    for _ in range(20):  # attach the other session and warm every path
        await client.turn("hi")
    turns: list[Turn] = []
    stop = asyncio.Event()

    async def drive() -> None:
        while not stop.is_set():
            turns.append(await client.turn("hi"))

    driver = asyncio.get_running_loop().create_task(drive())
    await asyncio.sleep(before)
    rss_before = rss_bytes(brain.pid)
    connection = Connection(brain.host, brain.port, brain.token)
    await connection.open()
    load_started = time.perf_counter()
    load_seconds, status, raw = await timed(connection, "GET", f"/sessions/{big}")
    load_ended = time.perf_counter()
    if status != 200 or json.loads(raw)["status"] != "idle":
        raise RuntimeError(f"loading the big session answered {status} {raw[:300]!r}")
    rss_loaded = rss_bytes(brain.pid)
    await asyncio.sleep(0.5)  # a few turns after the load
    stop.set()
    await driver

    last = built["last"]
    after = cursor(last["offsets"][0], last["ids"][0])
    page_seconds, status, raw = await timed(connection, "GET", f"/sessions/{big}/events?after={after}&limit=1000")
    page = json.loads(raw)
    if status != 200 or [event["id"] for event in page["events"]][:3] != last["ids"][1:]:
        raise RuntimeError(f"the page at the end of the big log is wrong: {status} {raw[:300]!r}")
    resend = {"type": "user.message", "text": FIRST_TEXT, "key": FIRST_KEY}
    key_seconds, status, raw = await timed(connection, "POST", f"/sessions/{big}/events", resend)
    if status != 202 or json.loads(raw)["data"].get("key") != FIRST_KEY:
        raise RuntimeError(f"the first message's key was not recognized: {status} {raw[:300]!r}")
    connection.close()
    client.close()
    baseline = [t.latency for t in turns if t.ended < load_started]
    during = [t.latency for t in turns if t.started < load_ended and t.ended > load_started]
    failed = [t for t in turns if t.status != "idle"]
    if failed:
        raise RuntimeError(f"{len(failed)} turns of the other session did not end idle")
    return {
        "load": load_seconds,
        "rss_before": rss_before,
        "rss_loaded": rss_loaded,
        "page": page_seconds,
        "key": key_seconds,
        "baseline": baseline,
        "during": during,
        "end_cursor": page["next_cursor"],
    }


async def big_turn(brain: BrainProcess, big: str, end_cursor: str) -> float:
    """One turn on the (loaded) big session: appends to the large log and checkpoints."""
    client = await SessionClient(brain, big, after=end_cursor).open()  # SSE replays only what follows
    try:
        turn = await client.turn("hi")
    finally:
        client.close()
    if turn.status != "idle":
        raise RuntimeError(f"the turn on the big session ended {turn.status}")
    return turn.latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=100, help="size of the big event log")
    parser.add_argument("--repeat", type=int, default=3, help="cold loads (one server restart each)")
    parser.add_argument("--before", type=float, default=3.0, help="seconds of baseline turns before each load")
    arguments = parser.parse_args()
    raise_nofile()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="brain-load-bench-") as tmp:
        brain = start_brain(Path(tmp), harnesses={"bench": {"command": INSTANT_RUNNER}})
        try:
            big, other = asyncio.run(prepare(brain))
        finally:
            brain.stop()
        events = brain.data_dir / "sessions" / big / "events.jsonl"
        started = time.perf_counter()
        built = append_turns(events, int(arguments.mib * (1 << 20)))
        print(
            f"big session: {built['bytes'] / (1 << 20):.1f} MiB, {built['turns'] + 1} turns, "
            f"{built['events'] + 4} events (written in {time.perf_counter() - started:.1f} s)"
        )
        results: list[dict[str, Any]] = []
        big_turns: list[float] = []
        for index in range(arguments.repeat):
            brain.start()
            try:
                results.append(asyncio.run(measure(brain, big, other, built, arguments.before)))
                big_turns.append(asyncio.run(big_turn(brain, big, results[-1]["end_cursor"])))
            finally:
                brain.stop()
            figures = results[-1]
            print(
                f"  load {index + 1}: {figures['load'] * 1000:7.0f} ms, server RSS "
                f"{figures['rss_before'] / (1 << 20):.0f} -> {figures['rss_loaded'] / (1 << 20):.0f} MiB, "
                f"other session's turns during it: {len(figures['during'])}"
            )
    loads = [r["load"] for r in results]
    baseline = [s for r in results for s in r["baseline"]]
    during = [s for r in results for s in r["during"]]
    rss_growth = [(r["rss_loaded"] - r["rss_before"]) / (1 << 20) for r in results]
    print(f"{'load time (GET /sessions/{id})':<40} {summary(loads)}")
    print(f"{'server RSS growth from the load':<40} {max(rss_growth):.0f} MiB (largest of {len(results)})")
    print(f"{'page after a cursor at the log end':<40} {summary([r['page'] for r in results])}")
    print(f"{'resend of the first message key':<40} {summary([r['key'] for r in results])}")
    print(f"{'turn on the big session after load':<40} {summary(big_turns)}")
    print(f"{'other session turns, before the load':<40} {summary(baseline)}")
    print(f"{'other session turns, during the load':<40} {summary(during)}")
    if baseline and during:
        ratio = percentile(during, 99) / percentile(baseline, 99)
        print(f"{'p99 during / before':<40} {ratio:.1f}x")


if __name__ == "__main__":
    main()
