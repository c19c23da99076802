"""A host function connected over the executor WebSocket (`/executors/{id}/rpc`) emits extension
events with the same reply as over HTTP: `{connection, call_id, event: {kind, data}}`, answered by a
`committed` frame once the event is in the session's log, or an `error` frame with the code HTTP
would give. Against a real server, the `loop` harness and the scripted provider."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end

MODEL = "openai/gpt-4.1-mini"
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up.",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


@dataclass
class Host:
    socket: ClientConnection
    connection: str
    session: str

    def next_call(self) -> dict[str, Any]:
        command = json.loads(self.socket.recv(timeout=20))
        while command["type"] == "ping":
            command = json.loads(self.socket.recv(timeout=20))
        assert command["type"] == "call", command
        return command  # type: ignore[no-any-return]

    def send(self, call_id: str, **fields: Any) -> dict[str, Any]:
        """One reply frame, and the frame it is answered with."""
        self.socket.send(json.dumps({"connection": self.connection, "call_id": call_id, **fields}))
        answer: dict[str, Any] = json.loads(self.socket.recv(timeout=20))
        return answer


@contextlib.contextmanager
def _host(server: BrainServer) -> Iterator[Host]:
    """An executor of the `app` environment connected over the WebSocket, and a session placing
    `lookup` there."""
    with server.client() as api:
        credential = api.post("/executors", json={"binding": "app", "tools": [LOOKUP]}).json()
    url = f"ws://{server.config['listen']}/executors/{credential['id']}/rpc"
    protocols: Any = ["brain-rpc", f"brain-auth.{credential['token']}"]
    with connect(url, subprotocols=protocols, compression=None) as socket:
        ready = json.loads(socket.recv(timeout=10))
        placement = {
            "environments": [{"name": "app", "executor": credential["id"]}],
            "tools": [{"tool": LOOKUP, "env": "app"}],
        }
        with server.client() as api:
            created = api.post(
                "/sessions", json={"harness": "loop", "config": {"model": MODEL, "tools": [], "placement": placement}}
            )
        assert created.status_code == 201, created.text
        yield Host(socket, ready["connection"], created.json()["id"])


def test_an_event_sent_on_the_socket_is_committed_before_it_is_answered(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    server = brain_factory(
        harnesses={"loop": LOOP_HARNESS},
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": scripted_provider.openai_base_url}},
        environments=[{"name": "app", "kind": "host", "tenants": ["acme"]}],
    )
    scripted_provider.reset()
    with _host(server) as host:
        # given: a placed call of the host function, dispatched over the socket
        turn = send_ok(server, host.session, 'call lookup {"q": "brain"}')
        call = host.next_call()
        assert call["tool"] == "lookup" and call["scope"]["environment"] == "app"
        # when: the function emits an event, then one the server refuses, then one with a result
        committed = host.send(call["call_id"], event={"kind": "lookup.started", "data": {"q": "brain"}})
        logged = [e["data"] for e in history(server, host.session) if e["type"] == "tool.event"]
        refused = host.send(call["call_id"], event={"kind": "9 bad kind", "data": {}})
        mixed = host.send(call["call_id"], event={"kind": "x", "data": {}}, result={"content": []})
        host.socket.send(
            json.dumps(
                {
                    "connection": host.connection,
                    "call_id": call["call_id"],
                    "result": {"content": [{"type": "text", "text": "found"}]},
                }
            )
        )
        events = wait_for_turn_end(server, host.session, turn["id"])
        late = host.send(call["call_id"], event={"kind": "lookup.late", "data": {}})
    # then: the first was in the log when its answer came, with the call and environment named
    assert committed == {"type": "committed", "call_id": call["call_id"]}
    assert logged == [
        {"call_id": call["call_id"], "environment": "app", "kind": "lookup.started", "data": {"q": "brain"}}
    ]
    # and the refusals name their reason with the codes HTTP gives, the connection going on
    assert (refused["type"], refused["call_id"], refused["error"]["code"]) == (
        "error",
        call["call_id"],
        "invalid_request",
    )
    assert "kind" in refused["error"]["message"]
    assert mixed["error"] == {"code": "invalid_request", "message": "a reply carries an event alone"}
    assert late["type"] == "error" and late["error"]["code"] in ("conflict", "not_found")
    (result,) = [e["data"] for e in events if e["type"] == "tool.result"]
    assert result["outcome"] == "ok" and result["environment"] == "app"
    assert [e["data"]["kind"] for e in history(server, host.session) if e["type"] == "tool.event"] == ["lookup.started"]
