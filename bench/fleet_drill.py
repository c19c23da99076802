"""Fleet crash drill: kill -9 of a random instance among three, round after round, under load.

    python bench/fleet_drill.py [--rounds 100] [--minutes 20] [--seed 7] [--sessions 6]

Starts a throwaway PostgreSQL and three real `runbrain` instances in one fleet (lease_seconds 3,
a shared filesystem archive, the test harness that answers at once or after `sleep:S`).
Sessions are created spread across the instances. One thread per session sends inputs, each
with its own idempotency key, through a random live instance (the fleet forwards to the owner);
a send that fails (connection cut, retryable 503) is retried with the same key through another.
In each round, at a random moment, a random instance is killed (SIGKILL); the drill times, for
each session that instance owned, the first successful request through another instance
(failover), then restarts the victim. After the last round the load stops, interrupted
sessions are resumed, and every session must come to idle within a bound (else: unsettled).
Then each session's history is read and every acknowledged input is checked:
- lost: acknowledged, but not a user.message of the history, or never run and never reported;
- reported lost: its turn had started on the dead instance and a session.error names it;
- duplicated: its user.message, or its turn, appears more than once;
and a sample of keys is replayed through random instances: each must answer its first event id.
The seed fixes every choice (victims, moments, routes, inputs); thread timing is the machine's.
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import machine, percentile  # noqa: E402
from tests.fixtures.server import BrainServer, make_server  # noqa: E402
from tests.fixtures.services import PostgresServer  # noqa: E402

LEASE_SECONDS = 3
FAILOVER_BOUND = 30.0  # give up timing a failover after this (counted as failed)
SETTLE_SECONDS = 60.0  # after the faults stop, every session must be idle within this
REPLAYS = 200  # idempotency keys replayed at the end
INSTANCES = ("brain-a", "brain-b", "brain-c")
LOST = "turn lost with the instance that ran it: input "


@dataclass
class Figures:
    rounds: int = 0
    sent: int = 0  # distinct inputs (keys) the drill tried to send
    acknowledged: int = 0
    unacknowledged: int = 0  # never got a 202, even after the faults stopped
    lost: int = 0
    reported_lost: int = 0
    duplicated: int = 0
    unsettled: int = 0
    unreadable: int = 0  # sessions whose history no instance served at the end
    server_errors: int = 0  # 5xx answers other than a retryable 503
    replays: int = 0
    replay_mismatches: int = 0
    failover_failed: int = 0
    failovers: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def report(self) -> str:
        lines = [
            f"rounds {self.rounds} in {self.seconds:.0f} s; inputs sent {self.sent}, acknowledged "
            f"{self.acknowledged}, unacknowledged {self.unacknowledged}",
            f"lost (silent) {self.lost}; reported lost (started turn, session.error) {self.reported_lost}; "
            f"duplicated {self.duplicated}; unsettled {self.unsettled}; unreadable {self.unreadable}; "
            f"500 answers {self.server_errors}",
            f"idempotency keys replayed {self.replays}, mismatched {self.replay_mismatches}",
        ]
        if self.failovers:
            lines.append(
                f"failover (kill to first success elsewhere) over {len(self.failovers)} sessions: median "
                f"{statistics.median(self.failovers):.2f} s, p90 {percentile(self.failovers, 90):.2f} s, "
                f"worst {max(self.failovers):.2f} s (bound lease_seconds + 5 = {LEASE_SECONDS + 5} s); "
                f"failed {self.failover_failed}"
            )
        return "\n".join(lines)


class Fleet:
    def __init__(self, postgres: PostgresServer, directory: Path, interval_seconds: int = 5) -> None:
        self.database = postgres.create_database(f"brain_drill_{secrets.token_hex(4)}")
        archive = directory / "archive"
        archive.mkdir(parents=True)
        self.servers: list[BrainServer] = []
        secret = secrets.token_hex(32)
        for name in INSTANCES:
            persistence = {"provider": "filesystem", "directory": str(archive), "interval_seconds": interval_seconds}
            server = make_server(directory / name, persistence=persistence)
            server.directory.mkdir(parents=True)
            server.config["cluster"] = {
                "instance": name,
                "url": server.url,
                "lease_seconds": LEASE_SECONDS,
                "shared_directory": True,
            }
            if self.servers:  # one fleet, one set of tokens
                server.tokens = self.servers[0].tokens
                server.env = {**self.servers[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
            else:
                server.env |= {"BRAIN_DATABASE_URL": self.database, "BRAIN_FLEET_SECRET": secret}
            self.servers.append(server)
        self.alive = [True] * len(self.servers)
        self.lock = threading.Lock()

    def start(self) -> None:
        for server in self.servers:
            server.start()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def live(self) -> list[int]:
        with self.lock:
            return [index for index, up in enumerate(self.alive) if up]

    def owners(self) -> dict[str, str]:
        import psycopg

        with psycopg.connect(self.database) as connection:
            rows = connection.execute(
                "SELECT session_id, owner FROM fleet_app_sessionlease WHERE expires_at > now()"
            ).fetchall()
        return {str(session): str(owner) for session, owner in rows}

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.servers[0].token()}"}


def _client(server: BrainServer, headers: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=headers, timeout=httpx.Timeout(10.0, connect=2.0))


class Sender(threading.Thread):
    """Sends inputs to one session through random live instances until told to stop."""

    def __init__(self, fleet: Fleet, session_id: str, seed: int, index: int) -> None:
        super().__init__(daemon=True)
        self.fleet, self.session_id, self.rng, self.index = fleet, session_id, random.Random(seed), index
        self.running = threading.Event()
        self.done = threading.Event()
        self.acked: dict[str, tuple[str, str]] = {}  # key -> (event id, text)
        self.pending: list[tuple[str, str]] = []  # (key, text) not yet acknowledged
        self.count = 0
        self.errors = 0

    def _text(self) -> str:
        self.count += 1
        if self.rng.random() < 0.5:  # a turn long enough to be cut by a kill; unique digits
            return f"sleep:0.{self.rng.randint(1, 4)}{self.index:03d}{self.count:06d}"
        return f"m-{self.index}-{self.count}"

    def send_once(self, key: str, text: str) -> bool:
        live = self.fleet.live()
        if not live:
            return False
        server = self.fleet.servers[self.rng.choice(live)]
        body = {"type": "user.message", "text": text, "key": key}
        try:
            with _client(server, self.fleet.headers()) as client:
                response = client.post(f"/sessions/{self.session_id}/events", json=body)
        except httpx.HTTPError:
            return False
        if response.status_code == 202:
            self.acked[key] = (response.json()["id"], text)
            return True
        if response.status_code not in (409, 503, 502, 504):
            self.errors += 1
            print(f"unexpected send answer {response.status_code}: {response.text[:200]}", file=sys.stderr)
        return False

    def run(self) -> None:
        while not self.done.is_set():
            if not self.running.wait(0.1):
                continue
            if not self.pending:
                self.pending.append((f"k-{self.index}-{self.count}-{self.rng.getrandbits(32):08x}", self._text()))
            key, text = self.pending[0]
            if self.send_once(key, text):
                self.pending.pop(0)
                time.sleep(self.rng.uniform(0.15, 0.5))
            else:
                time.sleep(0.2)

    def flush_pending(self, deadline: float) -> None:
        while self.pending and time.monotonic() < deadline:
            key, text = self.pending[0]
            if self.send_once(key, text):
                self.pending.pop(0)
            else:
                time.sleep(0.2)


def _status(fleet: Fleet, rng: random.Random, session_id: str) -> tuple[int, dict[str, Any]]:
    server = fleet.servers[rng.choice(fleet.live())]
    try:
        with _client(server, fleet.headers()) as client:
            response = client.get(f"/sessions/{session_id}")
    except httpx.HTTPError:
        return 0, {}
    return response.status_code, response.json() if response.status_code == 200 else {}


def _resume(fleet: Fleet, rng: random.Random, session_id: str) -> None:
    server = fleet.servers[rng.choice(fleet.live())]
    try:
        with _client(server, fleet.headers()) as client:
            client.post(f"/sessions/{session_id}/resume")
    except httpx.HTTPError:
        pass


def _failover(fleet: Fleet, victim: int, affected: list[str], killed_at: float) -> list[float | None]:
    """For each affected session, seconds from the kill to its first 200 through another instance."""
    rng = random.Random(victim)
    others = [fleet.servers[index] for index in range(len(fleet.servers)) if index != victim]
    times: dict[str, float | None] = dict.fromkeys(affected)
    waiting = set(affected)
    last: dict[str, str] = {}
    while waiting and time.monotonic() - killed_at < FAILOVER_BOUND:
        for session_id in sorted(waiting):
            try:
                with _client(rng.choice(others), fleet.headers()) as client:
                    response = client.get(f"/sessions/{session_id}")
                ok = response.status_code == 200
                last[session_id] = f"{response.status_code} {response.text[:200]}"
            except httpx.HTTPError as error:
                ok = False
                last[session_id] = repr(error)
            if ok:
                times[session_id] = time.monotonic() - killed_at
                waiting.discard(session_id)
        time.sleep(0.05)
    for session_id in sorted(waiting):
        print(
            f"no failover of {session_id} in {FAILOVER_BOUND} s; last answer: {last.get(session_id)}", file=sys.stderr
        )
    return list(times.values())


def _history(fleet: Fleet, session_id: str) -> list[dict[str, Any]] | None:
    """The session's whole history through any instance that serves it (None: none does)."""
    for server in fleet.servers:
        try:
            return _pages(server, fleet.headers(), session_id)
        except (httpx.HTTPError, KeyError) as error:
            print(f"history of {session_id} not served by {server.url}: {error!r}", file=sys.stderr)
    return None


def _pages(server: BrainServer, headers: dict[str, str], session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = ""
    with _client(server, headers) as client:
        while True:
            response = client.get(f"/sessions/{session_id}/events", params={"after": after, "limit": 1000})
            if response.status_code != 200:
                raise httpx.HTTPError(f"{response.status_code} {response.text[:200]}")
            page = response.json()
            events.extend(page["events"])
            if not page["events"]:
                return events
            after = page["next_cursor"]


def _settle(fleet: Fleet, rng: random.Random, session_ids: list[str]) -> int:
    """Resume interrupted sessions until all are idle; returns how many never got there."""
    deadline = time.monotonic() + SETTLE_SECONDS
    waiting = set(session_ids)
    while waiting and time.monotonic() < deadline:
        for session_id in sorted(waiting):
            code, session = _status(fleet, rng, session_id)
            if code == 200 and session["status"] == "idle":
                waiting.discard(session_id)
            elif code == 200 and session["status"] in ("interrupted", "failed"):
                _resume(fleet, rng, session_id)
        time.sleep(0.2)
    for session_id in sorted(waiting):
        print(f"unsettled: {session_id} {_status(fleet, rng, session_id)}", file=sys.stderr)
    return len(waiting)


def _check(fleet: Fleet, senders: list[Sender], figures: Figures) -> None:
    for sender in senders:
        events = _history(fleet, sender.session_id)
        if events is None:
            figures.server_errors += sender.errors
            figures.unreadable += 1
            figures.acknowledged += len(sender.acked)
            figures.sent += len(sender.acked) + len(sender.pending)
            continue
        messages = Counter(event["id"] for event in events if event["type"] == "user.message")
        texts = Counter(event["data"]["text"] for event in events if event["type"] == "user.message")
        runs = Counter(
            event.get("input_id")
            for event in events
            if event["type"] == "session.status" and event["data"]["status"] == "running"
        )
        reported = {  # "turn lost with the instance that ran it: input A, B" names every lost input
            input_id.strip()
            for event in events
            if event["type"] == "session.error" and LOST in event["data"].get("message", "")
            for input_id in event["data"]["message"].partition(LOST)[2].split(",")
        }
        for event_id, text in sender.acked.values():
            figures.acknowledged += 1
            if messages[event_id] == 0:
                figures.lost += 1
                print(f"lost: {sender.session_id} {event_id} {text}", file=sys.stderr)
            elif event_id in reported and runs[event_id] <= 1:
                figures.reported_lost += 1
            elif runs[event_id] == 0:
                figures.lost += 1
                print(f"never run, not reported: {sender.session_id} {event_id} {text}", file=sys.stderr)
            if messages[event_id] > 1 or texts[text] > 1 or runs[event_id] > 1:
                figures.duplicated += 1
                print(f"duplicated: {sender.session_id} {event_id} {text} runs {runs[event_id]}", file=sys.stderr)
        figures.unacknowledged += len(sender.pending)
        figures.server_errors += sender.errors
        figures.sent += len(sender.acked) + len(sender.pending)


def _replay(fleet: Fleet, rng: random.Random, senders: list[Sender], figures: Figures) -> None:
    keys = [(sender, key) for sender in senders for key in sorted(sender.acked)]
    for sender, key in rng.sample(keys, min(REPLAYS, len(keys))):
        event_id, text = sender.acked[key]
        server = fleet.servers[rng.choice(fleet.live())]
        with _client(server, fleet.headers()) as client:
            response = client.post(
                f"/sessions/{sender.session_id}/events", json={"type": "user.message", "text": text, "key": key}
            )
        figures.replays += 1
        if response.status_code != 202 or response.json()["id"] != event_id:
            figures.replay_mismatches += 1
            print(f"replay mismatch: {key} {response.status_code} {response.text[:200]}", file=sys.stderr)


def run_drill(
    postgres: PostgresServer,
    directory: Path,
    *,
    rounds: int,
    minutes: float,
    seed: int,
    sessions: int = 6,
    interval_seconds: int = 5,
) -> Figures:
    rng = random.Random(seed)
    figures = Figures()
    fleet = Fleet(postgres, directory, interval_seconds)
    began = time.monotonic()
    senders: list[Sender] = []
    try:
        fleet.start()
        for index in range(sessions):
            server = fleet.servers[index % len(fleet.servers)]
            with _client(server, fleet.headers()) as client:
                response = client.post(
                    "/sessions",
                    json={"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}},
                )
                assert response.status_code == 201, response.text
                # in the archive before the first fault: a session whose state was never uploaded
                # waits for its creator to come back (no other instance can load it)
                flushed = client.post(f"/sessions/{response.json()['id']}/flush")
                assert flushed.status_code == 200, flushed.text
            senders.append(Sender(fleet, response.json()["id"], seed * 1000 + index, index))
        for sender in senders:
            sender.start()
            sender.running.set()
        while figures.rounds < rounds and time.monotonic() - began < minutes * 60:
            time.sleep(rng.uniform(0.5, 2.5))  # the kill lands at a random moment of the load
            victim = rng.randrange(len(fleet.servers))
            name = INSTANCES[victim]
            affected = [session for session, owner in fleet.owners().items() if owner == name]
            with fleet.lock:
                fleet.alive[victim] = False
            fleet.servers[victim].kill()
            killed_at = time.monotonic()
            times = _failover(fleet, victim, affected, killed_at)
            figures.failovers.extend(t for t in times if t is not None)
            figures.failover_failed += sum(t is None for t in times)
            fleet.servers[victim].start()
            with fleet.lock:
                fleet.alive[victim] = True
            for sender in senders:  # a started turn lost leaves its session interrupted: resume it
                code, session = _status(fleet, rng, sender.session_id)
                if code == 200 and session["status"] == "interrupted":
                    _resume(fleet, rng, sender.session_id)
            figures.rounds += 1
            worst = f"{max(t for t in times if t is not None):.2f} s" if any(t is not None for t in times) else "-"
            print(
                f"round {figures.rounds}: killed {name}, {len(affected)} sessions affected, failover worst {worst}",
                flush=True,
            )
        for sender in senders:
            sender.running.clear()
        time.sleep(0.6)  # a send under way finishes
        for sender in senders:
            sender.flush_pending(time.monotonic() + 20)
        figures.unsettled = _settle(fleet, rng, [sender.session_id for sender in senders])
        _check(fleet, senders, figures)
        _replay(fleet, rng, senders, figures)
    finally:
        for sender in senders:
            sender.done.set()
        fleet.stop()
    figures.seconds = time.monotonic() - began
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument(
        "--interval", type=int, default=5, help="persistence.interval_seconds: how often sessions upload (1-3600)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the instances' directories and logs")
    arguments = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="brain-fleet-drill-", dir="/tmp"))
    postgres = PostgresServer(directory)
    postgres.start()
    try:
        figures = run_drill(
            postgres,
            directory / "fleet",
            rounds=arguments.rounds,
            minutes=arguments.minutes,
            seed=arguments.seed,
            sessions=arguments.sessions,
            interval_seconds=arguments.interval,
        )
    finally:
        postgres.stop()
        if arguments.keep:
            print(f"kept: {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(
        f"{machine()}; seed {arguments.seed}; three instances, lease_seconds {LEASE_SECONDS}, "
        f"uploads every {arguments.interval} s"
    )
    print(figures.report())


if __name__ == "__main__":
    main()
