"""Drain drill: a graceful SIGTERM of one instance of three under load, round after round.

    python bench/drain_drill.py [--rounds 20] [--sessions 9] [--clients 6] [--streams 3] [--drain 2] [--keep]

Starts a throwaway PostgreSQL and three real `runbrain` instances in one fleet (lease_seconds 3,
a shared filesystem archive, the test harness that answers at once) behind the test balancer
(tests/support/balancer.py: `/health/ready` every 0.3 s, new connections to ready instances only,
a connection retried elsewhere only when refused). Clients read sessions, send inputs and read
event pages through it, and a few SSE streams stay open (tests/support/drain_load.py). Each round
SIGTERMs the next instance in turn while the load runs, waits for it to exit, restarts it and
waits until the balancer sees it ready. Figures: requests, answered 2xx, 503/429 answers a retry
resolved, sends resumed after a stop interrupted their session's turn, requests cut (must be 0),
unresolved ones (must be 0), and the drain's duration (SIGTERM to exit).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import machine, percentile  # noqa: E402
from tests.fixtures.server import BrainServer, make_server  # noqa: E402
from tests.fixtures.services import PostgresServer  # noqa: E402
from tests.support.balancer import CHECK_SECONDS, Balancer  # noqa: E402
from tests.support.drain_load import Load  # noqa: E402

LEASE_SECONDS = 3
INSTANCES = ("brain-a", "brain-b", "brain-c")
LOAD_SECONDS = 2.0  # of load before each signal, and after the restarted instance is ready
EXIT_SECONDS = 30.0  # a drain past this is killed and reported
READY_SECONDS = 90.0  # a restart on a busy machine


def _fleet(postgres: PostgresServer, directory: Path, drain_seconds: float) -> list[BrainServer]:
    database = postgres.create_database(f"brain_drain_drill_{secrets.token_hex(4)}")
    archive = directory / "archive"
    archive.mkdir(parents=True)
    secret = secrets.token_hex(32)
    servers: list[BrainServer] = []
    for name in INSTANCES:
        server = make_server(directory / name, persistence={"provider": "filesystem", "directory": str(archive)})
        server.directory.mkdir(parents=True)
        server.config["cluster"] = {
            "instance": name,
            "url": server.url,
            "lease_seconds": LEASE_SECONDS,
            "shared_directory": True,
        }
        if servers:  # one fleet, one set of tokens
            server.tokens = servers[0].tokens
            server.env = {**servers[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        else:
            server.env |= {
                "BRAIN_DATABASE_URL": database,
                "BRAIN_FLEET_SECRET": secret,
                "BRAIN_DRAIN_SECONDS": str(drain_seconds),
            }
        servers.append(server)
    return servers


def _sessions(url: str, token: str, count: int) -> list[str]:
    body = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    created = []
    for _ in range(count):
        response = httpx.post(f"{url}/sessions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=15)
        response.raise_for_status()
        created.append(response.json()["id"])
    return created


def _wait_ready(balancer: Balancer, server: BrainServer) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while not balancer.ready.get(server.config["listen"]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.config['cluster']['instance']} never became ready again")
        time.sleep(CHECK_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=9)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--drain", type=float, default=2.0, help="BRAIN_DRAIN_SECONDS of the instances")
    parser.add_argument("--keep", action="store_true", help="keep the directory (instances' logs) and print it")
    arguments = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="brain-drain-drill-", dir="/tmp"))
    print(f"directory {directory}", flush=True)
    postgres = PostgresServer(directory)
    postgres.start()
    servers: list[BrainServer] = []
    balancer: Balancer | None = None
    drains: list[float] = []
    codes: list[int] = []
    try:
        servers = _fleet(postgres, directory / "fleet", arguments.drain)
        for server in servers:
            server.start()
        balancer = Balancer([server.config["listen"] for server in servers])
        balancer.start()
        sessions = _sessions(balancer.url, servers[0].token(), arguments.sessions)
        load = Load(balancer.url, servers[0].token(), sessions, clients=arguments.clients, streams=arguments.streams)
        load.start()
        for round_number in range(arguments.rounds):
            victim = servers[round_number % len(servers)]
            time.sleep(LOAD_SECONDS)
            began = time.monotonic()
            codes.append(victim.stop(signal.SIGTERM, timeout=EXIT_SECONDS))
            drains.append(time.monotonic() - began)
            victim.start()
            _wait_ready(balancer, victim)
            print(
                f"round {round_number + 1}: {victim.config['cluster']['instance']} drained in {drains[-1]:.2f} s "
                f"(exit {codes[-1]}); {len(load.tally.cut)} cut so far",
                flush=True,
            )
        time.sleep(LOAD_SECONDS)
        tally = load.stop()
    finally:
        if balancer is not None:
            balancer.stop()
        for server in servers:
            server.stop(signal.SIGKILL)
        postgres.stop()
        if not arguments.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print(
        f"{machine()}; three instances, lease_seconds {LEASE_SECONDS}, BRAIN_DRAIN_SECONDS {arguments.drain:g}, "
        f"balancer health check every {CHECK_SECONDS} s; {arguments.clients} clients, {arguments.streams} streams, "
        f"{arguments.sessions} sessions"
    )
    print(f"rounds {len(drains)}: {tally.report()}")
    print(
        f"drain (SIGTERM to exit): median {statistics.median(drains):.2f} s, p90 {percentile(drains, 90):.2f} s, "
        f"worst {max(drains):.2f} s; exit codes {sorted(set(codes))}"
    )
    print(f"balancer: {balancer.counts if balancer is not None else None}")
    for line in tally.cut[:10] + tally.unresolved[:10]:
        print(f"  {line}")
    if tally.cut or tally.unresolved or set(codes) != {0}:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
