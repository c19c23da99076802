"""Fleet routing benchmark: what forwarding a session request to its owner adds.

    python bench/fleet_bench.py [--rounds 2000]

Starts a throwaway PostgreSQL (leases live there) and, on loopback, an owner: a small HTTP/1.1
keep-alive server that verifies every fleet signature (ReplayGuard included) and answers a send
with a 202 and a short JSON body, as an owner's send does. Measures, in the same run:
- direct: the same request sent straight to the owner, unsigned, on the same kind of kept-alive
  connection (the client found the owner itself);
- through a non-owner: fleet_app.routing's whole path on the receiving instance (the owner
  lookup in PostgreSQL, the signature, the forward on a pooled connection, the owner's
  verification, the answer streamed back);
- the owner's own fast path: the routing layer's cost for a session this instance holds (no
  query, no body read).
Prints medians and p99 in milliseconds, and the forwarding overhead (median difference). The
client's own hop to the receiving instance is the same in both cases and not part of either.

Then, unless `--turns 0`, two real `runbrain` instances on that PostgreSQL and a shared
filesystem archive (the test harness that answers at once): a session created on A, and turns
sent alternately to A (the owner) and through B (forwarded), each on a keep-alive connection.
For each it prints the median and p99 of the send (until its 202) and of the whole turn (until
the turn's idle status arrives on an SSE stream open on A, the same observer for both), and the
CPU both instances spend per turn sent to A and per turn through B (a figure other load on the
machine does not stretch as it stretches wall time). Then reads (GET of the session) in
alternating blocks to A and through B: the latency and each instance's CPU per read, medians
over the blocks: the cost of the hop itself, without a turn competing for the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import machine, percentile  # noqa: E402
from tests.fixtures.services import PostgresServer  # noqa: E402

SECRET = secrets.token_bytes(32)
OWNER_INCARNATION = secrets.token_hex(16)
ANSWER = b'{"id":"evt_0123456789abcdef","type":"user.message"}'
BODY = b'{"type":"user.message","data":{"text":"hello, a message of ordinary length"}}'
TURN_WARMUP = 10  # turns each way before measuring: connections open, the session loaded
READ_BLOCKS = 20  # reads: alternating blocks to the owner and through the non-owner
READS_PER_BLOCK = 500


def _configure(port: int, database: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["fleet_app.apps.FleetAppConfig"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": database,
                "USER": "postgres",
                "HOST": "127.0.0.1",
                "PORT": str(port),
                "CONN_MAX_AGE": None,
            }
        },
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()


async def _owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, guard: Any) -> None:
    from fleet_app.signing import FleetAuthError, verify_request

    try:
        while line := (await reader.readline()).rstrip(b"\r\n"):
            method, target, _ = line.split(b" ", 2)
            headers: dict[str, str] = {}
            while (header := (await reader.readline()).rstrip(b"\r\n")) != b"":
                name, _, value = header.partition(b":")
                headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status = b"202 Accepted"
            if "brain-fleet-signature" in headers:
                try:
                    verify_request(
                        SECRET,
                        receiver=f"brain-a/{OWNER_INCARNATION}",  # fleet_app.signing.receiver_identity
                        method=method.decode(),
                        target=target,
                        body=body,
                        headers=headers,
                        now=time.time(),
                        replay=guard,
                    )
                except FleetAuthError:
                    status = b"401 Unauthorized"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
            )
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass  # the forwarding side closed its connection, or the bench ended
    finally:
        writer.close()


class _Tenant:
    tenant = "acme"


class _Tokens:
    """A token cache whose grant is cached, as a running instance's is after its first request:
    the request's token digested and found in a dict."""

    def __init__(self) -> None:
        self._grants = {hashlib.sha256(b"tok").hexdigest(): _Tenant()}

    async def authenticate(self, header: str | None) -> _Tenant:
        return self._grants[hashlib.sha256((header or "").partition(" ")[2].strip().encode()).hexdigest()]


class _Brain:
    """The app object as routing reads it (fleet_app.app_object.RoutedAppObject)."""

    def __init__(self) -> None:
        from foundation.hostconfig import FleetSecret, Secrets
        from foundation.telemetry import Telemetry

        self.secrets = Secrets(tokens=(), provider_keys={}, fleet_secret=FleetSecret(SECRET))
        self.tokens = _Tokens()
        self.relay = None
        self.config = SimpleNamespace(limits=SimpleNamespace(tenant_forwarded_streams=256))
        self.telemetry = Telemetry()


def _line(name: str, samples: list[float]) -> str:
    return (
        f"{name:<44} median {statistics.median(samples) * 1000:7.3f} ms   p99 {percentile(samples, 99) * 1000:7.3f} ms"
    )


async def _run(rounds: int) -> None:
    from fleet_app.leases import LeaseManager
    from fleet_app.routing import FleetRouter
    from fleet_app.signing import ReplayGuard
    from fleet_app.transport import FleetTransport

    guard = ReplayGuard()
    server = await asyncio.start_server(lambda r, w: _owner(r, w, guard), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    a = LeaseManager(instance="brain-a", url=url, lease_seconds=60.0)
    a.incarnation = OWNER_INCARNATION  # the process the owner's signatures must name
    b = LeaseManager(instance="brain-b", url="http://127.0.0.1:1", lease_seconds=60.0)
    await a.join()
    await b.join()
    session_id = secrets.token_hex(16)
    await a.acquire(session_id)
    path = f"/sessions/{session_id}/events"
    router_b, router_a = FleetRouter(), FleetRouter()
    failures = 0

    def scope() -> dict[str, Any]:
        return {
            "type": "http",
            "method": "POST",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"authorization", b"Bearer tok")],
            "client": ("203.0.113.7", 50000),
            "brain_request_id": "0" * 32,
        }

    async def through(router: Any, leases: Any) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": BODY, "more_body": False}
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await router.route(_Brain(), leases, scope(), receive, send, limit=1 << 20)
        return sent

    # direct: the same request, unsigned, on the same kind of kept-alive connection (the fleet's
    # own transport), so the difference is what routing adds, not which HTTP client sent it
    direct = FleetTransport()
    host, port = "127.0.0.1", server.sockets[0].getsockname()[1]
    request = b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        path.encode(),
        host.encode(),
        port,
        len(BODY),
        BODY,
    )

    async def straight() -> tuple[int, bytes]:
        answer = await direct.exchange(host, port, "POST", request)
        try:
            return answer.status, b"".join([chunk async for chunk in answer.body])
        finally:
            await answer.body.aclose()

    for _ in range(50):  # warm both paths' connections
        await straight()
        await through(router_b, b)
    direct_samples, forwarded_samples, local_samples = [], [], []
    for _ in range(rounds):
        began = time.perf_counter()
        status, answer = await straight()
        direct_samples.append(time.perf_counter() - began)
        failures += status != 202 or answer != ANSWER
        began = time.perf_counter()
        sent = await through(router_b, b)
        forwarded_samples.append(time.perf_counter() - began)
        failures += sent[0]["status"] != 202 or b"".join(m.get("body", b"") for m in sent[1:]) != ANSWER
        began = time.perf_counter()
        await through(router_a, a)
        local_samples.append(time.perf_counter() - began)
    await direct.aclose()
    await router_b.aclose()
    server.close()
    print(f"{machine()}; {rounds} rounds; a send's body {len(BODY)} bytes, answer {len(ANSWER)} bytes")
    print(_line("direct to the owner (same transport)", direct_samples))
    print(_line("through a non-owner (lookup+sign+forward)", forwarded_samples))
    print(_line("routing layer on the owner (held lease)", local_samples))
    overhead = statistics.median(forwarded_samples) - statistics.median(direct_samples)
    print(f"forwarding overhead (median difference): {overhead * 1000:.3f} ms; failed requests: {failures}")


def _instances(postgres: PostgresServer, directory: Path, turns: int) -> None:
    """Turns through a non-owner against turns sent to the owner, on real runbrain instances."""
    from tests.fixtures.server import BrainServer, create_session, make_server
    from tests.support.sse import EventStream

    database = postgres.create_database(f"brain_fleet_turns_{secrets.token_hex(4)}")
    archive = directory / "archive"
    archive.mkdir(parents=True)
    servers: list[BrainServer] = []
    try:
        for name in ("brain-a", "brain-b"):
            server = make_server(directory / name, persistence={"provider": "filesystem", "directory": str(archive)})
            server.directory.mkdir(parents=True)
            server.config["cluster"] = {"instance": name, "url": server.url, "shared_directory": True}
            if servers:  # one fleet, one set of tokens
                server.tokens = servers[0].tokens
                server.env = {**servers[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
            else:
                server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": SECRET.hex()}
            servers.append(server)
            server.start()
        owner, other = servers
        session_id = create_session(owner)["id"]
        samples: dict[str, tuple[list[float], list[float]]] = {"owner": ([], []), "non-owner": ([], [])}
        with (
            EventStream(owner.url, owner.token(), session_id) as stream,
            owner.client() as to_owner,
            other.client() as to_other,
        ):
            for index in range(TURN_WARMUP + turns):
                for label, client in (("owner", to_owner), ("non-owner", to_other)):
                    began = time.perf_counter()
                    response = client.post(
                        f"/sessions/{session_id}/events", json={"type": "user.message", "text": f"{label} {index}"}
                    )
                    accepted = time.perf_counter()
                    if response.status_code != 202:
                        raise SystemExit(f"send through the {label} failed: {response.status_code} {response.text}")
                    stream.wait_for_event("session.status", input_id=response.json()["id"], status="idle")
                    if index >= TURN_WARMUP:
                        samples[label][0].append(accepted - began)
                        samples[label][1].append(time.perf_counter() - began)
            # CPU, which other load on the machine does not stretch as it does wall time: both
            # instances' CPU seconds over `turns` turns all sent to the owner, then all through B
            cpu: dict[str, float] = {}
            for label, client in (("owner", to_owner), ("non-owner", to_other)):
                began_cpu = _cpu_seconds(owner) + _cpu_seconds(other)
                for index in range(turns):
                    response = client.post(
                        f"/sessions/{session_id}/events", json={"type": "user.message", "text": f"cpu {index}"}
                    )
                    stream.wait_for_event("session.status", input_id=response.json()["id"], status="idle")
                cpu[label] = (_cpu_seconds(owner) + _cpu_seconds(other) - began_cpu) / turns
            reads = _reads(owner, other, to_owner, to_other, session_id)
        print(f"real runbrain instances, one session owned by A; {turns} turns each way, alternating")
        for label, (sends, whole) in samples.items():
            print(_line(f"send (202) to the {label}", sends))
            print(_line(f"turn (send to idle) via the {label}", whole))
        added = statistics.median(samples["non-owner"][1]) - statistics.median(samples["owner"][1])
        print(f"a turn through a non-owner adds (median difference): {added * 1000:.3f} ms")
        extra = cpu["non-owner"] - cpu["owner"]
        print(
            f"CPU of both instances per turn: {cpu['owner'] * 1000:.3f} ms sent to the owner, "
            f"{cpu['non-owner'] * 1000:.3f} ms through the non-owner (adds {extra * 1000:.3f} ms)"
        )
        print(
            f"reads (GET /sessions/{{id}}), {READ_BLOCKS} alternating blocks of {READS_PER_BLOCK}, medians of the "
            "blocks' figures:"
        )
        for label, (latency, cpu_a, cpu_b) in reads.items():
            print(
                f"  via the {label:<9}  latency {latency * 1000:.3f} ms   CPU per read: A {cpu_a * 1000:.3f} ms, "
                f"B {cpu_b * 1000:.3f} ms"
            )
        direct, forwarded = reads["owner"], reads["non-owner"]
        print(
            f"a read through a non-owner adds: latency {(forwarded[0] - direct[0]) * 1000:.3f} ms, "
            f"CPU {(sum(forwarded[1:]) - sum(direct[1:])) * 1000:.3f} ms"
        )
    finally:
        for server in servers:
            server.stop()


def _reads(owner: Any, other: Any, to_owner: Any, to_other: Any, session_id: str) -> dict[str, tuple[float, ...]]:
    """GET /sessions/{id} in alternating blocks to the owner and through the non-owner: per
    block the median latency and each instance's CPU per read; the medians over the blocks
    (a block the machine's other load slowed does not move them)."""
    blocks: dict[str, list[tuple[float, float, float]]] = {"owner": [], "non-owner": []}
    for client in (to_owner, to_other):
        for _ in range(READS_PER_BLOCK):
            client.get(f"/sessions/{session_id}")
    for _ in range(READ_BLOCKS):
        for label, client in (("owner", to_owner), ("non-owner", to_other)):
            cpu_a, cpu_b = _cpu_seconds(owner), _cpu_seconds(other)
            latencies = []
            for _ in range(READS_PER_BLOCK):
                began = time.perf_counter()
                response = client.get(f"/sessions/{session_id}")
                latencies.append(time.perf_counter() - began)
                if response.status_code != 200:
                    raise SystemExit(f"read through the {label} failed: {response.status_code} {response.text}")
            blocks[label].append(
                (
                    statistics.median(latencies),
                    (_cpu_seconds(owner) - cpu_a) / READS_PER_BLOCK,
                    (_cpu_seconds(other) - cpu_b) / READS_PER_BLOCK,
                )
            )
    return {
        label: tuple(statistics.median(column) for column in zip(*rows, strict=True)) for label, rows in blocks.items()
    }


def _cpu_seconds(server: Any) -> float:
    """User and system CPU seconds the server's process has used (Linux /proc)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fleet(postgres: PostgresServer, directory: Path, names: tuple[str, ...], lease_seconds: int = 10) -> list[Any]:
    """Real runbrain instances of one fleet on `postgres` and a shared filesystem archive, started."""
    from tests.fixtures.server import BrainServer, make_server

    database = postgres.create_database(f"brain_fleet_{secrets.token_hex(4)}")
    archive = directory / "archive"
    archive.mkdir(parents=True)
    servers: list[BrainServer] = []
    for name in names:
        server = make_server(directory / name, persistence={"provider": "filesystem", "directory": str(archive)})
        server.directory.mkdir(parents=True)
        server.config["limits"] = {"subscribers": 4096}  # one SSE stream per session in flight
        server.config["cluster"] = {
            "instance": name,
            "url": server.url,
            "lease_seconds": lease_seconds,
            "shared_directory": True,
        }
        if servers:  # one fleet, one set of tokens
            server.tokens = servers[0].tokens
            server.env = {**servers[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        else:
            server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": SECRET.hex()}
        servers.append(server)
        server.start()
    return servers


def _failovers(postgres: PostgresServer, directory: Path, kills: int, lease_seconds: int) -> None:
    """kill -9 of a session's owner, N times: seconds until another instance first serves it."""
    from tests.fixtures.server import create_session, send_ok, wait_for_status

    servers = _fleet(postgres, directory, ("brain-a", "brain-b"), lease_seconds)
    samples: list[float] = []
    try:
        owner, other = servers
        session_id = create_session(owner)["id"]
        with owner.client() as client:  # in the archive: a session never published waits for its creator
            assert client.post(f"/sessions/{session_id}/flush").status_code == 200
        for index in range(kills):
            send_ok(owner, session_id, f"turn {index}")
            wait_for_status(owner, session_id, "idle")
            with owner.client() as client:  # uploaded: the new owner serves it idle, nothing lost
                assert client.post(f"/sessions/{session_id}/flush").status_code == 200
            owner.kill()
            killed = time.monotonic()
            with other.client() as client:
                while client.get(f"/sessions/{session_id}").status_code != 200:
                    if time.monotonic() - killed > 120:
                        raise SystemExit(f"kill {index}: no failover within 120 s")
                    time.sleep(0.05)
            samples.append(time.monotonic() - killed)
            owner.start()  # back as a plain member; the survivor owns the session now
            owner, other = other, owner
    finally:
        for server in servers:
            server.stop()
    print(
        f"failover over {kills} kills (lease_seconds {lease_seconds}, goal under {lease_seconds + 5} s): "
        f"median {statistics.median(samples):.2f} s, p90 {percentile(samples, 90):.2f} s, "
        f"worst {max(samples):.2f} s, best {min(samples):.2f} s"
    )


async def _load(servers: list[Any], sessions: int, work: float, seconds: float) -> tuple[list[float], int, float]:
    """`sessions` sessions spread over `servers`, each with one `sleep:work` turn in flight at all
    times for `seconds`, sent to its owner and timed to its idle status on an SSE stream there."""
    import httpx

    headers = {"Authorization": f"Bearer {servers[0].token()}"}
    limits = httpx.Limits(max_connections=sessions * 2 + 10, max_keepalive_connections=sessions * 2 + 10)
    async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as client:
        owners: list[str] = []
        for index in range(sessions):
            url = servers[index % len(servers)].url
            body = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
            response = await client.post(url + "/sessions", json=body)
            while response.status_code == 429:  # the upload backlog is full: back off, as a client does
                await asyncio.sleep(0.5)
                response = await client.post(url + "/sessions", json=body)
            if response.status_code != 201:
                raise SystemExit(f"create failed: {response.status_code} {response.text}")
            owners.append(url + "/sessions/" + response.json()["id"])
        latencies: list[float] = []
        failures = 0
        ended = asyncio.Event()

        async def drive(base: str) -> None:
            nonlocal failures
            idle: dict[str, asyncio.Future[None]] = {}
            loop = asyncio.get_running_loop()
            sse = {"Accept": "text/event-stream"}
            async with client.stream("GET", base + "/events", headers=sse) as stream:
                if stream.status_code != 200:
                    raise SystemExit(f"stream refused: {stream.status_code} {(await stream.aread())[:300]!r}")

                async def read() -> None:
                    async for line in stream.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        event = json.loads(line[5:])
                        if event.get("type") == "session.status" and event["data"].get("status") == "idle":
                            waiter = idle.setdefault(event.get("input_id") or "", loop.create_future())
                            if not waiter.done():  # (the idle may arrive before the 202 did)
                                waiter.set_result(None)

                reader = asyncio.create_task(read())
                began_all = time.monotonic()
                while not ended.is_set() and time.monotonic() - began_all < seconds:
                    began = time.monotonic()
                    response = await client.post(
                        base + "/events", json={"type": "user.message", "text": f"sleep:{work}"}
                    )
                    if response.status_code != 202:
                        failures += 1
                        await asyncio.sleep(0.1)
                        continue
                    waiter = idle.setdefault(response.json()["id"], loop.create_future())
                    await asyncio.wait_for(waiter, 120)
                    idle.pop(response.json()["id"], None)
                    latencies.append(time.monotonic() - began - work)
                reader.cancel()

        began = time.monotonic()  # the sessions exist (their runners start with their first turn)
        await asyncio.gather(*(drive(base) for base in owners))
    return latencies, failures, time.monotonic() - began


def _throughput(postgres: PostgresServer, directory: Path, sessions: int, work: float, seconds: float) -> None:
    """The same load on one instance, then spread over two."""
    for names in (("brain-a",), ("brain-a", "brain-b")):
        servers = _fleet(postgres, directory / f"{len(names)}-instances", names)
        try:
            latencies, failures, elapsed = asyncio.run(_load(servers, sessions, work, seconds))
        finally:
            for server in servers:
                server.stop()
        print(
            f"{len(names)} instance(s), {sessions} turns in flight (sleep {work} s each): "
            f"{len(latencies) / elapsed:.1f} turns/s, added p50 {statistics.median(latencies) * 1000:.0f} ms, "
            f"p99 {percentile(latencies, 99) * 1000:.0f} ms; {len(latencies)} turns, failed sends {failures}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=200, help="turns each way on real instances (0: skip)")
    parser.add_argument("--kills", type=int, default=50, help="failovers timed (0: skip)")
    parser.add_argument("--lease-seconds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=200, help="turns in flight, 1 vs 2 instances (0: skip)")
    parser.add_argument("--load-seconds", type=float, default=20.0)
    parser.add_argument("--skip-routing", action="store_true", help="skip the forwarding rounds")
    arguments = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="brain-fleet-bench-", dir="/tmp"))
    server = PostgresServer(directory)
    server.start()
    try:
        database = f"brain_fleet_{secrets.token_hex(4)}"
        server.create_database(database)
        _configure(server.port, database)
        from django.db import connections
        from django.db.migrations.executor import MigrationExecutor

        MigrationExecutor(connections["default"]).migrate([("fleet_app", "0003_lease_incarnation")])
        if not arguments.skip_routing:
            asyncio.run(_run(arguments.rounds))
        if arguments.turns > 0:
            _instances(server, directory / "instances", arguments.turns)
        if arguments.kills > 0:
            _failovers(server, directory / "failovers", arguments.kills, arguments.lease_seconds)
        if arguments.in_flight > 0:
            _throughput(server, directory / "throughput", arguments.in_flight, 1.0, arguments.load_seconds)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
