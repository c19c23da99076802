"""The executor WebSocket RPC against a real server: replies up to the 4 MiB frame limit are
accepted (Daphne's own default stops at 1 MiB); a larger reply fails only its call, and a message
past twice the limit drops the connection (close code 1009, message too big)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.fixtures.server import BrainServer, send_ok, wait_for_turn_end

MODEL = "openai/gpt-4.1-mini"
BLOB = {"name": "blob", "description": "Return a large text.", "input_schema": {"type": "object"}}


class Executor:
    def __init__(self, socket: ClientConnection, connection: str, session: str) -> None:
        self.socket = socket
        self.connection = connection
        self.session = session

    def next_call(self) -> dict[str, Any]:
        command = json.loads(self.socket.recv(timeout=10))
        while command["type"] == "ping":
            command = json.loads(self.socket.recv(timeout=10))
        assert command["type"] == "call"
        return command  # type: ignore[no-any-return]

    def reply_text(self, call: dict[str, Any], text: str) -> None:
        result = {"content": [{"type": "text", "text": text}]}
        self.socket.send(json.dumps({"connection": self.connection, "call_id": call["call_id"], "result": result}))


@pytest.fixture
def executor(brain: BrainServer) -> Iterator[Executor]:
    with brain.client() as api:
        credential = api.post("/executors", json={"binding": "runtime", "tools": [BLOB]}).json()
    url = f"ws://{brain.config['listen']}/executors/{credential['id']}/rpc"
    protocols: Any = ["brain-rpc", f"brain-auth.{credential['token']}"]
    with connect(url, subprotocols=protocols, compression=None, max_size=None) as socket:
        ready = json.loads(socket.recv(timeout=10))
        config = {
            "model": MODEL,
            "tools": [],
            "bindings": [{"alias": "runtime", "executor": credential["id"], "runtime": [BLOB]}],
        }
        with brain.client() as api:
            session = api.post("/sessions", json={"harness": "instant", "config": config}).json()
        yield Executor(socket, ready["connection"], session["id"])


def _result(brain: BrainServer, session: str, input_id: str) -> dict[str, Any]:
    events = wait_for_turn_end(brain, session, input_id)
    (result,) = [e["data"] for e in events if e["type"] == "tool.result" and e["input_id"] == input_id]
    return result  # type: ignore[no-any-return]


def test_a_3_mib_reply_is_accepted_and_a_5_mib_one_fails_only_its_call(brain: BrainServer, executor: Executor) -> None:
    # given
    big = "a" * (3 << 20)

    # when: a 3 MiB reply, then a 5 MiB one, then a small one on the same connection
    first = send_ok(brain, executor.session, "tool:runtime_blob {}")
    executor.reply_text(executor.next_call(), big)
    accepted = _result(brain, executor.session, first["id"])
    second = send_ok(brain, executor.session, "tool:runtime_blob {}")
    oversized_call = executor.next_call()
    executor.reply_text(oversized_call, "b" * (5 << 20))
    refusal = json.loads(executor.socket.recv(timeout=10))
    failed = _result(brain, executor.session, second["id"])
    third = send_ok(brain, executor.session, "tool:runtime_blob {}")
    executor.reply_text(executor.next_call(), "still connected")
    after = _result(brain, executor.session, third["id"])

    # then
    assert accepted["outcome"] == "ok" and accepted["result"] == {"content": [{"type": "text", "text": big}]}
    assert refusal["type"] == "error" and refusal["call_id"] == oversized_call["call_id"]
    assert refusal["error"]["code"] == "invalid_request"
    assert failed["outcome"] == "unknown"
    assert failed["result"]["is_error"] is True and failed["result"]["unknown_outcome"] is True
    assert "exceeds the 4 MiB frame limit" in failed["result"]["content"][0]["text"]
    assert after == {
        "call_id": after["call_id"],
        "result": {"content": [{"type": "text", "text": "still connected"}]},
        "outcome": "ok",
    }


def test_a_message_past_twice_the_limit_drops_the_connection_and_its_call(
    brain: BrainServer, executor: Executor
) -> None:
    # given
    accepted = send_ok(brain, executor.session, "tool:runtime_blob {}")
    call = executor.next_call()

    # when: Daphne fails the connection (1009, message too big) while the client is still sending
    with pytest.raises(ConnectionClosed):
        executor.reply_text(call, "c" * (9 << 20))
        while True:
            executor.socket.recv(timeout=10)

    # then: the connection's call ends as an unknown outcome
    result = _result(brain, executor.session, accepted["id"])
    assert result["outcome"] == "unknown" and result["result"]["is_error"] is True
