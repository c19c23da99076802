"""Input journal benchmark: what the fleet's bookkeeping costs per send and per turn on PostgreSQL.

    python bench/journal_bench.py [--rounds 2000] [--leases 1000]

Starts a throwaway PostgreSQL (Debian's binaries, loopback, fsync off as in the tests) and
measures, in the same run and on the same connection:
- a bare `SELECT 1` round trip: the floor every statement pays;
- per send: `record_input` without a key, with a fresh key, and a resent key (the idempotent
  path, which returns the first send's input);
- per turn: `mark_started`;
- per renewal round: `renew_leases` of --leases held leases with the heartbeat, one statement;
- the same send and turn statements through their async twins on an event loop (as the session
  runtime calls them), with Django's default CONN_MAX_AGE=0 (a new connection per call) and
  with a persistent connection (CONN_MAX_AGE=None).
Prints the median and p99 of each in microseconds, and the median minus SELECT 1's.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import machine, percentile  # noqa: E402
from tests.fixtures.services import PostgresServer  # noqa: E402


def _configure(port: int, database: str) -> None:
    import django
    from django.conf import settings

    base = {"ENGINE": "django.db.backends.postgresql", "NAME": database, "USER": "postgres", "HOST": "127.0.0.1"}
    settings.configure(
        INSTALLED_APPS=["fleet_app.apps.FleetAppConfig"],
        DATABASES={
            "default": {**base, "PORT": str(port), "CONN_MAX_AGE": None},
            "per_call": {**base, "PORT": str(port), "CONN_MAX_AGE": 0},  # Django's default
        },
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()


def _timed(rounds: int, call: Callable[[int], Any]) -> list[float]:
    samples = []
    for index in range(rounds):
        began = time.perf_counter()
        call(index)
        samples.append((time.perf_counter() - began) * 1e6)
    return samples


async def _timed_async(rounds: int, call: Callable[[int], Any]) -> list[float]:
    samples = []
    for index in range(rounds):
        began = time.perf_counter()
        await call(index)
        samples.append((time.perf_counter() - began) * 1e6)
    return samples


def _line(name: str, samples: list[float], floor: float) -> str:
    median = statistics.median(samples)
    return f"{name:<58} median {median:8.0f} us  p99 {percentile(samples, 99):8.0f} us  (+{median - floor:6.0f} us)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--leases", type=int, default=1000)
    arguments = parser.parse_args()
    rounds = arguments.rounds

    directory = Path(tempfile.mkdtemp(prefix="brain-journal-bench-", dir="/tmp"))
    server = PostgresServer(directory)
    server.start()
    try:
        database = f"brain_journal_{secrets.token_hex(4)}"
        server.create_database(database)
        _configure(server.port, database)
        from django.db import connections
        from django.db.migrations.executor import MigrationExecutor

        from fleet_app import db

        MigrationExecutor(connections["default"]).migrate([("fleet_app", "0003_lease_incarnation")])
        session = secrets.token_hex(16)
        payload = {"text": "hello, a message of ordinary length " * 4, "traceparent": ""}

        def select_one(_: int) -> None:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchall()

        for _ in range(200):  # warm the connection and the server's caches
            select_one(0)
        figures: list[tuple[str, list[float]]] = []
        floor_samples = _timed(rounds, select_one)
        floor = statistics.median(floor_samples)
        figures.append(("SELECT 1 (the round trip)", floor_samples))

        seqs: list[int] = []

        def record_plain(index: int) -> None:
            recorded = db.record_input(session, input_id=f"{index:032x}", key=None, payload=payload, epoch=1)
            seqs.append(recorded.seq)

        figures.append(("send: record_input, no key", _timed(rounds, record_plain)))
        figures.append(
            (
                "send: record_input, a new key",
                _timed(
                    rounds,
                    lambda index: db.record_input(
                        session, input_id=f"{index:032x}", key=f"key-{index}", payload=payload, epoch=1
                    ),
                ),
            )
        )
        figures.append(
            (
                "send: record_input, a resent key (replayed)",
                _timed(
                    rounds,
                    lambda index: db.record_input(
                        session, input_id=f"{index:032x}", key=f"key-{index}", payload=payload, epoch=1
                    ),
                ),
            )
        )
        figures.append(("turn: mark_started", _timed(rounds, lambda index: db.mark_started(session, seqs[index]))))

        held = {secrets.token_hex(16): 1 for _ in range(arguments.leases)}
        db.join_instance("bench", url="http://127.0.0.1:1", incarnation="i" * 32, lease_seconds=10)
        for session_id in held:
            db.acquire_lease(session_id, owner="bench", incarnation="i" * 32, lease_seconds=10)
        renewals = _timed(
            max(20, rounds // 20),
            lambda _: db.renew_leases("bench", held, incarnation="i" * 32, lease_seconds=10),
        )
        figures.append((f"renewal: renew_leases of {len(held)} leases + heartbeat", renewals))

        async def twins(alias: str, label: str) -> None:
            other = secrets.token_hex(16)
            recorded: list[int] = []

            async def send(index: int) -> None:
                result = await db.arecord_input(
                    other, input_id=f"{index:032x}", key=f"k{index}", payload=payload, epoch=1, using=alias
                )
                recorded.append(result.seq)

            async def select(_: int) -> None:
                await db.aowner_of(other, using=alias)

            twin_rounds = rounds if alias == "default" else max(200, rounds // 5)
            figures.append((f"async twin, {label}: owner_of (a read)", await _timed_async(twin_rounds, select)))
            figures.append((f"async twin, {label}: record_input, a new key", await _timed_async(twin_rounds, send)))
            figures.append(
                (
                    f"async twin, {label}: mark_started",
                    await _timed_async(
                        twin_rounds, lambda index: db.amark_started(other, recorded[index], using=alias)
                    ),
                )
            )

        asyncio.run(twins("default", "persistent connection"))
        asyncio.run(twins("per_call", "CONN_MAX_AGE=0"))
        connections.close_all()

        print(machine())
        print(f"PostgreSQL {server.bin.parent.name} on loopback (fsync off), {rounds} rounds each")
        for name, samples in figures:
            print(_line(name, samples, floor))
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
