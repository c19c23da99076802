"""Fleet routing benchmark: what forwarding a session request to its owner adds.

    python bench/fleet_bench.py [--rounds 2000]

Starts a throwaway PostgreSQL (leases live there) and, on loopback, an owner: a small HTTP/1.1
keep-alive server that verifies every fleet signature (ReplayGuard included) and answers a send
with a 202 and a short JSON body, as an owner's send does. Measures, in the same run:
- direct: the request sent straight to the owner (the client found the owner itself);
- through a non-owner: fleet_app.routing's whole path on the receiving instance (the owner
  lookup in PostgreSQL, the signature, the forward on a pooled connection, the owner's
  verification, the answer streamed back);
- the owner's own fast path: the routing layer's cost for a session this instance holds (no
  query, no body read).
Prints medians and p99 in milliseconds, and the forwarding overhead (median difference). The
client's own hop to the receiving instance is the same in both cases and not part of either.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import machine, percentile  # noqa: E402
from tests.fixtures.services import PostgresServer  # noqa: E402

SECRET = secrets.token_bytes(32)
ANSWER = b'{"id":"evt_0123456789abcdef","type":"user.message"}'
BODY = b'{"type":"user.message","data":{"text":"hello, a message of ordinary length"}}'


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
                        receiver="brain-a",
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


class _Brain:
    def __init__(self, leases: Any) -> None:
        self.leases = leases
        self.fleet_secret = SECRET


def _line(name: str, samples: list[float]) -> str:
    return (
        f"{name:<44} median {statistics.median(samples) * 1000:7.3f} ms   p99 {percentile(samples, 99) * 1000:7.3f} ms"
    )


async def _run(rounds: int) -> None:
    import httpx

    from fleet_app.leases import LeaseManager
    from fleet_app.routing import FleetRouter
    from fleet_app.signing import ReplayGuard

    guard = ReplayGuard()
    server = await asyncio.start_server(lambda r, w: _owner(r, w, guard), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    a = LeaseManager(instance="brain-a", url=url, lease_seconds=60.0)
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

        await router.route(_Brain(leases), leases, scope(), receive, send, limit=1 << 20)
        return sent

    async with httpx.AsyncClient() as direct:
        for _ in range(50):  # warm both paths' connections
            await direct.post(url + path, content=BODY, headers={"content-type": "application/json"})
            await through(router_b, b)
        direct_samples, forwarded_samples, local_samples = [], [], []
        for _ in range(rounds):
            began = time.perf_counter()
            response = await direct.post(url + path, content=BODY, headers={"content-type": "application/json"})
            direct_samples.append(time.perf_counter() - began)
            failures += response.status_code != 202
            began = time.perf_counter()
            sent = await through(router_b, b)
            forwarded_samples.append(time.perf_counter() - began)
            failures += sent[0]["status"] != 202 or b"".join(m.get("body", b"") for m in sent[1:]) != ANSWER
            began = time.perf_counter()
            await through(router_a, a)
            local_samples.append(time.perf_counter() - began)
    await router_b.aclose()
    server.close()
    print(f"{machine()}; {rounds} rounds; a send's body {len(BODY)} bytes, answer {len(ANSWER)} bytes")
    print(_line("direct to the owner", direct_samples))
    print(_line("through a non-owner (lookup+sign+forward)", forwarded_samples))
    print(_line("routing layer on the owner (held lease)", local_samples))
    overhead = statistics.median(forwarded_samples) - statistics.median(direct_samples)
    print(f"forwarding overhead (median difference): {overhead * 1000:.3f} ms; failed requests: {failures}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
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

        MigrationExecutor(connections["default"]).migrate([("fleet_app", "0001_initial")])
        asyncio.run(_run(arguments.rounds))
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
