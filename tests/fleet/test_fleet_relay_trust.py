"""What a writer to the fleet's Redis can do to runtime executors: nothing. Real `runbrain`
instances on one PostgreSQL relay executor calls over a real Redis (BRAIN_CHANNEL_REDIS); the
test writes to that Redis as an attacker on its network would: a rewritten holder record, a
forged relay message, a genuine relay message sent again."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from brain import RuntimeTool
from channels_redis.core import RedisChannelLayer

from tests.fixtures.server import BrainServer, send_ok, wait_for_turn_end
from tests.fixtures.services import PostgresServer, RedisServer
from tests.fleet.support import fleet_factory

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
LEASE_SECONDS = 3
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}
TOOL = RuntimeTool("lookup", "Read application data", SCHEMA, lambda arguments, context: {})
RELAY_PREFIX = "brain-relay"  # the relay's channel layer prefix (tools_app.relay_channel)
B_CHANNEL = "brain-executors.brain-b"  # instance brain-b's relay channel (tools_app.relay_records)
ANSWER = {"content": [{"type": "text", "text": "42"}], "structured_content": {"value": "42"}}


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    tmp_path: Path,
) -> Callable[[str], BrainServer]:
    return fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_trust",
        environment={"BRAIN_CHANNEL_REDIS": redis_server.url},
    )


def _register(server: BrainServer) -> dict[str, str]:
    """A new executor of alice's (tenant acme), registered on `server` and bound to no session."""
    with server.client() as api:
        registered = api.post("/executors", json={"binding": "runtime", "tools": [TOOL.descriptor()]})
    assert registered.status_code == 201, registered.text
    credential: dict[str, str] = registered.json()
    return credential


def _bind(server: BrainServer, executor_id: str) -> str:
    """A session created on `server` binding the executor (held by another instance)."""
    bound = {"alias": "runtime", "executor": executor_id, "runtime": [TOOL.descriptor()]}
    body = {"harness": "instant", "config": {"model": MODEL, "tools": [], "bindings": [bound]}}
    with server.client() as api:
        created = api.post("/sessions", json=body)
    assert created.status_code == 201, created.text
    sid: str = created.json()["id"]
    return sid


def _calls(stream: httpx.Response) -> Iterator[dict[str, Any]]:
    """The `call` commands of an executor's SSE stream, after its `ready`."""
    for line in stream.iter_lines():
        if line.startswith("data:"):
            command = json.loads(line[5:])
            if command["type"] in ("call", "ready"):
                yield command


def _answer(http: httpx.Client, server: BrainServer, executor_id: str, call: dict[str, Any]) -> None:
    reply = {"connection": call["connection"], "call_id": call["call_id"], "result": ANSWER}
    answered = http.post(f"{server.url}/executors/{executor_id}/responses", json=reply)
    assert (answered.status_code, answered.json()) == (200, {"status": "accepted"})


def _outcomes(events: list[dict[str, Any]]) -> list[str]:
    return [event["data"]["outcome"] for event in events if event["type"] == "tool.result"]


class Listener:
    """A TCP listener standing in for an attacker's: counts connections, keeps what they sent."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self.received = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with connection:
                connection.settimeout(2)
                try:
                    self.received += connection.recv(65536)
                    connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 24\r\n\r\n" + b'{"status": "accepted"} ')
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.socket.close()


def test_a_rewritten_holder_record_sends_no_executor_reply_to_the_address_it_names(
    fleet: Callable[[str], BrainServer], redis_server: RedisServer
) -> None:
    a, b = fleet("brain-a"), fleet("brain-b")
    # given an executor registered on B, its command stream open on B
    credential = _register(b)
    path = f"/executors/{credential['id']}"
    listener = Listener()
    try:
        with (
            httpx.Client(timeout=30, headers={"Authorization": f"Bearer {credential['token']}"}) as http,
            http.stream("GET", f"{b.url}{path}/commands") as stream,
            redis.Redis.from_url(redis_server.url) as store,
        ):
            commands = _calls(stream)  # kept: closing the iterator would close the stream
            ready = next(commands)
            unsolicited = {"connection": ready["connection"], "call_id": "0" * 32, "result": ANSWER}
            # when a writer to Redis rewrites the executor's holder record to name its own listener
            key = f"brain:executor-holder:{credential['id']}"
            genuine = store.get(key)
            assert genuine is not None
            recorded = json.loads(genuine if genuine.startswith(b"{") else genuine.partition(b":")[2])
            forged = {**recorded, "url": f"http://127.0.0.1:{listener.port}"}
            store.set(key, json.dumps(forged))
            # and the executor's reply goes through A
            through_a = http.post(f"{a.url}{path}/responses", json=unsolicited)
            # then A never connects to the listener, and the executor's credential does not leave
            assert listener.connections == 0
            assert credential["token"].encode() not in listener.received
            # and A refuses the reply as it refuses one for an executor no instance holds
            assert (through_a.status_code, through_a.json()["error"]) == (
                401,
                {"code": "forbidden", "message": "invalid executor credential"},
            )
            # when the genuine record is back, the reply reaches B (at the instances table's address)
            store.set(key, genuine)
            again = http.post(f"{a.url}{path}/responses", json=unsolicited)
            assert (again.status_code, again.json()["error"]) == (
                409,
                {"code": "conflict", "message": "no such pending call on this connection (unsolicited or duplicate)"},
            )
            assert listener.connections == 0
    finally:
        listener.close()
    assert "executor relay refused what Redis held" in a.logs()
    assert credential["token"] not in a.logs()


async def _send_raw(url: str, channel: str, message: dict[str, Any]) -> None:
    layer = RedisChannelLayer(hosts=[url], prefix=RELAY_PREFIX, expiry=30, capacity=1000)
    try:
        await layer.send(channel, message)
    finally:
        await layer.close_pools()


def test_a_forged_relay_message_hands_another_tenants_unbound_executor_no_call(
    fleet: Callable[[str], BrainServer], redis_server: RedisServer
) -> None:
    a, b = fleet("brain-a"), fleet("brain-b")
    # given acme's executor registered on B and bound to no session, its command stream open
    credential = _register(b)
    executor_id = credential["id"]
    with (
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {credential['token']}"}) as http,
        http.stream("GET", f"{b.url}/executors/{executor_id}/commands") as stream,
    ):
        calls = _calls(stream)
        assert next(calls)["type"] == "ready"
        # when a writer to Redis sends B's relay channel calls for it, with globex's scope:
        # as the relay encoded them, with no session; and with a made-up MAC, fresh time and nonce
        forged = {
            "relay": secrets.token_hex(16),
            "reply_to": "brain-executors.attacker",
            "executor": executor_id,
            "call_id": secrets.token_hex(16),
            "tool": "lookup",
            "arguments": {"q": "forged"},
            "scope": {"tenant_id": "globex", "session_id": secrets.token_hex(16), "call_id": "x"},
        }
        unsealed = {"type": "relay.call", "body": orjson.dumps(forged)}
        fresh = {**forged, "to": B_CHANNEL, "at": time.time(), "nonce": secrets.token_hex(16), "session": ""}
        guessed = {"type": "relay.call", "body": orjson.dumps(fresh), "mac": secrets.token_hex(32).encode()}
        for message in (unsealed, guessed):
            asyncio.run(_send_raw(redis_server.url, B_CHANNEL, message))
        # and then a session created on A binds the executor and calls it
        sid = _bind(a, executor_id)
        accepted = send_ok(a, sid, 'tool:runtime_lookup {"q": "genuine"}')
        # then the first call the executor receives is the session's: the forged ones never came
        first = next(calls)
        assert (first["arguments"], first["scope"]["session_id"], first["scope"]["tenant_id"]) == (
            {"q": "genuine"},
            sid,
            "acme",
        )
        _answer(http, b, executor_id, first)
        assert _outcomes(wait_for_turn_end(a, sid, accepted["id"])) == ["ok"]
    assert "executor relay refused what Redis held" in b.logs()


# --- a genuine message sent again ----------------------------------------------------------

ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')
ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b", b"\\": b"\\", b'"': b'"'}


def _unescape(quoted: bytes) -> bytes:
    """An argument as MONITOR shows it (Redis's sdscatrepr), back to its bytes."""
    out, i = bytearray(), 0
    while i < len(quoted):
        if quoted[i : i + 1] != b"\\":
            out += quoted[i : i + 1]
            i += 1
        elif quoted[i + 1 : i + 2] == b"x":
            out.append(int(quoted[i + 2 : i + 4], 16))
            i += 4
        else:
            out += ESCAPES[quoted[i + 1 : i + 2]]
            i += 2
    return bytes(out)


@contextmanager
def _monitor(port: int) -> Iterator[list[list[bytes]]]:
    """Every command Redis runs meanwhile, as its arguments (Redis's MONITOR)."""
    commands: list[list[bytes]] = []
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"MONITOR\r\n")
    stop = threading.Event()

    def read() -> None:
        buffer = b""
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            commands.extend([_unescape(arg) for arg in ARGUMENT.findall(line)] for line in lines)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        time.sleep(0.5)  # MONITOR answers +OK once it is on
        yield commands
    finally:
        time.sleep(0.5)  # the last commands' lines
        stop.set()
        reader.join()
        sock.close()


def test_a_genuine_relayed_call_sent_again_runs_once(
    fleet: Callable[[str], BrainServer], redis_server: RedisServer
) -> None:
    a, b = fleet("brain-a"), fleet("brain-b")
    # given a session on A bound to alice's executor on B, its command stream open on B
    credential = _register(b)
    executor_id = credential["id"]
    with (
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {credential['token']}"}) as http,
        http.stream("GET", f"{b.url}/executors/{executor_id}/commands") as stream,
        redis.Redis.from_url(redis_server.url) as store,
    ):
        calls = _calls(stream)
        assert next(calls)["type"] == "ready"
        sid = _bind(a, executor_id)
        # when a call is relayed from A to B while a writer to Redis watches
        with _monitor(redis_server.port) as seen:
            first_input = send_ok(a, sid, 'tool:runtime_lookup {"q": "first"}')
            first = next(calls)
            assert first["arguments"] == {"q": "first"}
            _answer(http, b, executor_id, first)
            assert _outcomes(wait_for_turn_end(a, sid, first_input["id"])) == ["ok"]
        channel_key = f"{RELAY_PREFIX}{B_CHANNEL}".encode()
        relayed = [
            command[3]
            for command in seen
            if command[:2] == [b"ZADD", channel_key] and b"relay.call" in command[3] and b"first" in command[3]
        ]
        assert len(relayed) == 1, seen
        # and sends the same bytes to B's channel again, then the session calls once more
        store.zadd(channel_key, {relayed[0]: time.time()})
        second_input = send_ok(a, sid, 'tool:runtime_lookup {"q": "second"}')
        # then the executor's next call is the second one: the first was not run twice
        second = next(calls)
        assert second["arguments"] == {"q": "second"}, second
        _answer(http, b, executor_id, second)
        assert _outcomes(wait_for_turn_end(a, sid, second_input["id"])) == ["ok", "ok"]
    assert "executor relay refused what Redis held" in b.logs()
