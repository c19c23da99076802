"""Runtime tools across a fleet: real `runbrain` instances on one PostgreSQL, relaying executor
calls over a real Redis (BRAIN_CHANNEL_REDIS), driven by the published client or by hand. The
session is owned by A; the client's executor is connected through B, then (B killed) through C;
an executor's own routes (stream, replies, close) work through any instance, and closing the
session on A closes its executor on B."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from brain import RuntimeTool
from brain.runtime import RuntimeExecutor

from fleet_app.executor_routes import ExecutorLocator
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end
from tests.fixtures.services import PostgresServer, RedisServer
from tests.fleet.support import fleet_factory, fleet_records
from tools_app.relay import ExecutorRelay, Route

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
LEASE_SECONDS = 3  # B's death is seen when its instance row expires
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}


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
        database_prefix="brain_exec",
        environment={"BRAIN_CHANNEL_REDIS": redis_server.url},
    )


def _locator(relay: ExecutorRelay) -> ExecutorLocator:
    return relay  # mypy checks that the relay is what routing takes it for


def _results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == "tool.result"]


def test_an_executor_on_another_instance_serves_the_session_and_its_death_is_an_unknown_outcome(
    fleet: Callable[[str], BrainServer],
) -> None:
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    served: list[tuple[str, Any]] = []
    started, release = threading.Event(), threading.Event()

    def lookup(arguments: Any, context: Any) -> dict[str, Any]:
        served.append((context.scope["session_id"], arguments))
        if arguments["q"] == "slow":
            started.set()
            release.wait(60)
        return {"value": f"answer to {arguments['q']}"}

    tools = [RuntimeTool("lookup", "Read application data", SCHEMA, lookup)]
    # given a session created on A (A owns it, its first executor is on A)
    on_a = a.sdk()
    session = on_a.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=tools)
    sid = session["id"]
    on_a.dispose()  # A's own executor is gone: only a remote one can answer now
    # when the client rebinds through B, and A's session calls the tool
    on_b = b.sdk()
    on_c = c.sdk()
    try:
        on_b.rebind(sid, tools)
        first = send_ok(a, sid, 'tool:runtime_lookup {"q": "through b"}')
        (result,) = _results(wait_for_turn_end(a, sid, first["id"]))
        # then the client's function answered it through B, and neither B nor C loaded the session
        assert result["outcome"] == "ok", result
        assert result["result"]["structured_content"] == {"value": "answer to through b"}
        assert served == [(sid, {"q": "through b"})]
        assert not (b.data_dir / "sessions" / sid).exists()
        assert not (c.data_dir / "sessions" / sid).exists()
        # when B is killed while a call runs in the client
        second = send_ok(a, sid, 'tool:runtime_lookup {"q": "slow"}')
        assert started.wait(30)
        b.kill()
        # then the call ends with an unknown outcome, once B has left the fleet
        first_result, lost = _results(wait_for_turn_end(a, sid, second["id"], timeout=60))
        assert first_result == result
        assert lost["outcome"] == "unknown", lost
        assert lost["result"]["unknown_outcome"] is True
        assert "left the fleet" in lost["result"]["content"][0]["text"]
        release.set()
        # and B's executor is gone through any instance: its credential refused, not a retry later
        gone = on_b._executors[sid]
        closing = httpx.post(
            f"{c.url}/executors/{gone.id}/close", headers={"Authorization": f"Bearer {gone.client.token}"}
        )
        assert _envelope(closing) == (401, {"code": "forbidden", "message": "invalid executor credential"})
        # when A's session calls the tool again before the client rebinds
        refused = send_ok(a, sid, 'tool:runtime_lookup {"q": "before the rebind"}')
        *_, unavailable = _results(wait_for_turn_end(a, sid, refused["id"]))
        # then it fails before dispatch: B is gone, nothing reached the client
        assert unavailable["outcome"] == "error", unavailable
        assert "unknown_outcome" not in unavailable["result"]
        assert "instance brain-b is gone" in unavailable["result"]["content"][0]["text"]
        assert served == [(sid, {"q": "through b"}), (sid, {"q": "slow"})]
        # when the client rebinds through C, the next call is answered through C
        on_c.rebind(sid, tools)
        third = send_ok(a, sid, 'tool:runtime_lookup {"q": "through c"}')
        *earlier, again = _results(wait_for_turn_end(a, sid, third["id"]))
        assert earlier == [result, lost, unavailable]
        assert again["outcome"] == "ok", again
        assert again["result"]["structured_content"] == {"value": "answer to through c"}
        # and each call reached the client exactly once: the lost one was never sent again
        assert served == [(sid, {"q": "through b"}), (sid, {"q": "slow"}), (sid, {"q": "through c"})]
        calls = [event["data"]["id"] for event in history(a, sid) if event["type"] == "tool.call"]
        assert len(calls) == len(set(calls)) == 4
    finally:
        release.set()
        on_b._executors.clear()  # B is dead: its executor cannot be closed there
        on_c.dispose()


# Longer than the Channels Redis layer's blocking receive (a 5 s pop, retried while nothing comes)
IDLE_RECEIVE_SECONDS = 7.0


def test_a_relayed_call_outlasting_an_idle_receive_of_the_relay_ends_with_its_result(
    fleet: Callable[[str], BrainServer],
) -> None:
    a, b = fleet("brain-a"), fleet("brain-b")
    served: list[Any] = []

    def lookup(arguments: Any, context: Any) -> dict[str, Any]:
        served.append(arguments)
        threading.Event().wait(IDLE_RECEIVE_SECONDS)  # nothing else crosses the relay meanwhile
        return {"value": "late"}

    tools = [RuntimeTool("lookup", "Read application data", SCHEMA, lookup)]
    # given a session owned by A whose executor the client rebound through B
    on_a = a.sdk()
    sid = on_a.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=tools)["id"]
    on_a.dispose()
    on_b = b.sdk()
    try:
        on_b.rebind(sid, tools)
        # when A's session calls the tool and the client answers after the relay sat idle
        accepted = send_ok(a, sid, 'tool:runtime_lookup {"q": "slow"}')
        (result,) = _results(wait_for_turn_end(a, sid, accepted["id"], timeout=60))
        # then the call ends with the client's result, not as lost with Redis
        assert result["outcome"] == "ok", result
        assert result["result"]["structured_content"] == {"value": "late"}
        assert served == [{"q": "slow"}]
    finally:
        on_b.dispose()


def _commands(stream: httpx.Response) -> Iterator[dict[str, Any]]:
    """The commands of an executor's SSE stream (each `data:` line is one JSON command)."""
    for line in stream.iter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:])


def _envelope(response: httpx.Response) -> tuple[int, dict[str, str]]:
    return response.status_code, response.json()["error"]


def test_an_executors_stream_replies_and_close_reach_it_through_any_instance(
    fleet: Callable[[str], BrainServer],
) -> None:
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    tool = RuntimeTool("lookup", "Read application data", SCHEMA, lambda arguments, context: {})
    # given a session owned by A whose runtime binding is served by an executor registered on B
    on_a = a.sdk()
    sid = on_a.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[tool])["id"]
    on_a.dispose()
    with b.client() as api:
        registered = api.post("/executors", json={"binding": "runtime", "tools": [tool.descriptor()], "session": sid})
    assert registered.status_code == 201
    credential = registered.json()
    path = f"/executors/{credential['id']}"
    with (
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {credential['token']}"}) as http,
        http.stream("GET", f"{c.url}{path}/commands") as stream,  # when its command stream goes through C
    ):
        assert stream.status_code == 200
        commands = _commands(stream)
        ready = next(commands)
        assert ready["type"] == "ready"
        # and A's session calls the tool
        accepted = send_ok(a, sid, 'tool:runtime_lookup {"q": "across"}')
        call = next(command for command in commands if command["type"] == "call")
        assert (call["tool"], call["arguments"], call["scope"]["session_id"]) == ("lookup", {"q": "across"}, sid)
        # then progress through A (the owner) and the result through C reach the call held on B
        reply = {"connection": ready["connection"], "call_id": call["call_id"]}
        progress = http.post(f"{a.url}{path}/responses", json={**reply, "progress": {"done": 1}})
        assert (progress.status_code, progress.json()) == (200, {"status": "accepted"})
        result = {"content": [{"type": "text", "text": "42"}], "structured_content": {"value": "42"}}
        answered = http.post(f"{c.url}{path}/responses", json={**reply, "result": result})
        assert (answered.status_code, answered.json()) == (200, {"status": "accepted"})
        (tool_result,) = _results(wait_for_turn_end(a, sid, accepted["id"]))
        assert tool_result["outcome"] == "ok", tool_result
        assert tool_result["result"]["structured_content"] == {"value": "42"}
        # and a duplicate result is B's conflict through every instance, changing nothing
        duplicates = [
            http.post(f"{server.url}{path}/responses", json={**reply, "result": result}) for server in (a, b, c)
        ]
        assert [response.status_code for response in duplicates] == [409, 409, 409]
        assert {response.json()["error"]["code"] for response in duplicates} == {"conflict"}
        assert _results(history(a, sid)) == [tool_result]
        # when the executor is closed through A
        closed = http.post(f"{a.url}{path}/close")
        assert (closed.status_code, closed.json()) == (200, {"status": "closed"})
        # then its stream through C ends with nothing but keep-alives after the call
        assert {command["type"] for command in commands} <= {"ping"}
        # and its credential is refused through every instance, as an unknown executor's is
        unknown = f"/executors/{secrets.token_hex(16)}"
        refused = [
            _envelope(http.post(f"{server.url}{target}/{route}", json={**reply, "result": result}))
            for server in (a, b, c)
            for target in (path, unknown)
            for route in ("responses", "close")
        ]
        assert refused == [(401, {"code": "forbidden", "message": "invalid executor credential"})] * 12


def test_closing_a_session_on_its_owner_closes_its_executor_on_another_instance(
    fleet: Callable[[str], BrainServer],
) -> None:
    a, b = fleet("brain-a"), fleet("brain-b")
    served: list[Any] = []

    def lookup(arguments: Any, context: Any) -> dict[str, Any]:
        served.append(arguments)
        return {"value": "ok"}

    tools = [RuntimeTool("lookup", "Read application data", SCHEMA, lookup)]
    # given a session owned by A whose executor the client rebound through B
    on_a = a.sdk()
    sid = on_a.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=tools)["id"]
    on_a.dispose()
    on_b = b.sdk()
    try:
        on_b.rebind(sid, tools)
        executor = on_b._executors[sid]
        first = send_ok(a, sid, 'tool:runtime_lookup {"q": "before the close"}')
        (result,) = _results(wait_for_turn_end(a, sid, first["id"]))
        assert result["outcome"] == "ok", result
        # when the session is closed on A
        with a.client() as api:
            closed = api.post(f"/sessions/{sid}/close")
        assert (closed.status_code, closed.json()) == (202, {"status": "close_requested"})
        # then B ends the executor's command stream and refuses its credential, through any instance
        assert executor.stopped.wait(30)
        headers = {"Authorization": f"Bearer {executor.client.token}"}
        refused = [httpx.post(f"{server.url}/executors/{executor.id}/close", headers=headers) for server in (a, b)]
        assert [_envelope(response) for response in refused] == [
            (401, {"code": "forbidden", "message": "invalid executor credential"})
        ] * 2
        # and the client's function ran once, before the close
        assert served == [{"q": "before the close"}]
        assert history(a, sid)[-1]["data"]["status"] == "closed"
    finally:
        on_b.dispose()  # its executor is closed already: the client's close is refused, as expected


def test_an_executors_routes_through_another_instance_are_a_retryable_503_while_redis_is_out(
    fleet: Callable[[str], BrainServer], redis_server: RedisServer
) -> None:
    a, b = fleet("brain-a"), fleet("brain-b")
    tool = RuntimeTool("lookup", "Read application data", SCHEMA, lambda arguments, context: {})
    # given an executor registered and connected on B
    with b.client() as api:
        registered = api.post("/executors", json={"binding": "runtime", "tools": [tool.descriptor()]})
    assert registered.status_code == 201
    credential = registered.json()
    path = f"/executors/{credential['id']}"
    with (
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {credential['token']}"}) as http,
        http.stream("GET", f"{b.url}{path}/commands") as stream,
    ):
        commands = _commands(stream)  # kept: closing the iterator would close the stream
        ready = next(commands)
        unsolicited = {"connection": ready["connection"], "call_id": "0" * 32, "result": {"content": []}}
        # when Redis is out of reach
        with redis_server.stopped():
            through_a = http.post(f"{a.url}{path}/responses", json=unsolicited)
            on_b = http.post(f"{b.url}{path}/responses", json=unsolicited)
        # then A cannot tell where the executor is held and says so, retryably; B, its holder, answers
        assert _envelope(through_a)[0] == 503
        assert _envelope(through_a)[1]["code"] == "unavailable"
        assert through_a.headers["retry-after"] == "1"
        assert _envelope(on_b) == (
            409,
            {"code": "conflict", "message": "no such pending call on this connection (unsolicited or duplicate)"},
        )


def test_a_session_created_on_one_instance_binds_an_executor_registered_on_another(
    fleet: Callable[[str], BrainServer], redis_server: RedisServer
) -> None:
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    served: list[tuple[str, Any]] = []

    def lookup(arguments: Any, context: Any) -> dict[str, Any]:
        served.append((context.scope["session_id"], arguments))
        return {"value": f"answer to {arguments['q']}"}

    tools = [RuntimeTool("lookup", "Read application data", SCHEMA, lookup)]
    descriptors = [tool.descriptor() for tool in tools]

    def create(server: BrainServer, bound: dict[str, Any]) -> httpx.Response:
        body = {"harness": "instant", "config": {"model": MODEL, "tools": [], "bindings": [bound]}}
        with server.client() as api:
            return api.post("/sessions", json=body)

    def sessions() -> list[str]:
        with a.client() as api:
            return [session["id"] for session in api.get("/sessions", params={"limit": 100}).json()["sessions"]]

    # when a session is created on A binding an executor A does not hold while Redis is out of reach
    with redis_server.stopped():
        outage = create(a, {"alias": "runtime", "executor": secrets.token_hex(16), "runtime": descriptors})
    # then A cannot tell whether another instance holds it and says so, retryably, creating nothing
    assert _envelope(outage) == (
        503,
        {"code": "unavailable", "message": "the runtime executor records are out of reach; retry"},
    )
    assert outage.headers["retry-after"] == "1"
    assert sessions() == []
    # given the client's executor registered and connected on B, bound to no session yet
    executor = RuntimeExecutor(b.sdk(), tools)
    binding = {"alias": "runtime", "executor": executor.id, "runtime": descriptors}
    try:
        # and an executor no instance holds is refused on A as on one instance
        unknown_id = secrets.token_hex(16)
        unknown = create(a, {**binding, "executor": unknown_id})
        assert _envelope(unknown) == (
            400,
            {
                "code": "invalid_request",
                "message": f"binding 'runtime': runtime executor '{unknown_id}' is not registered",
            },
        )
        # and so are tools other than those B recorded at its registration
        other = {**binding, "runtime": [{**tools[0].descriptor(), "description": "Something else"}]}
        assert _envelope(create(a, other)) == (
            400,
            {
                "code": "invalid_request",
                "message": "binding 'runtime': the runtime tools differ from the executor's registration",
            },
        )
        assert sessions() == []
        # when the session is created on A with B's executor bound
        created = create(a, binding)
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        assert sessions() == [sid]
        # and a message sent through C makes the model call the client's function
        accepted = send_ok(c, sid, 'tool:runtime_lookup {"q": "through c"}')
        (result,) = _results(wait_for_turn_end(a, sid, accepted["id"]))
        # then the result came back from B's executor, the call reached the client exactly once
        assert result["outcome"] == "ok", result
        assert result["result"]["structured_content"] == {"value": "answer to through c"}
        assert served == [(sid, {"q": "through c"})]
        calls = [event["data"]["id"] for event in history(a, sid) if event["type"] == "tool.call"]
        assert len(calls) == 1
        assert not (b.data_dir / "sessions" / sid).exists()
        # when another session's route names that executor (a bind that lost a race, made by hand)
        on_a = a.sdk()
        other_sid = on_a.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=tools)[
            "id"
        ]
        on_a.dispose()
        with redis.Redis.from_url(redis_server.url) as store:
            holder = json.loads(store.get(f"brain:executor-holder:{executor.id}").partition(b":")[2])
            route = Route("brain-b", holder["incarnation"], executor.id)
            store.hset(
                f"brain:executor-routes:{other_sid}", "runtime", fleet_records().route(other_sid, "runtime", route)
            )
        stray = send_ok(a, other_sid, 'tool:runtime_lookup {"q": "stray"}')
        (refused_call,) = _results(wait_for_turn_end(a, other_sid, stray["id"]))
        # then B refuses it before dispatch: the executor serves its own session only
        assert refused_call["outcome"] == "error", refused_call
        assert "unknown_outcome" not in refused_call["result"]
        assert "serves another session" in refused_call["result"]["content"][0]["text"]
        assert served == [(sid, {"q": "through c"})]
        # and B took the executor as bound to the session: closing the session on A closes it
        with a.client() as api:
            closed = api.post(f"/sessions/{sid}/close")
        assert (closed.status_code, closed.json()) == (202, {"status": "close_requested"})
        assert executor.stopped.wait(30)
        refused = httpx.post(
            f"{b.url}/executors/{executor.id}/close", headers={"Authorization": f"Bearer {executor.client.token}"}
        )
        assert _envelope(refused) == (401, {"code": "forbidden", "message": "invalid executor credential"})
        assert served == [(sid, {"q": "through c"})]
    finally:
        if not executor.stopped.is_set():
            executor.close()
