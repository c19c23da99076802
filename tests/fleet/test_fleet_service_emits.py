"""A tool service's extension events through an instance that does not own the session: the
service of a placed call posts its event to B, which checks the emit token by its seal alone and
forwards the request to A, the owner, which appends the event before answering; a forged or
expired token is refused on either instance and an emit after the call ended is 409, with
nothing appended."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from foundation.emit_tokens import emit_key, seal_emit_token
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end
from tests.fixtures.services import PostgresServer, RedisServer
from tests.fleet.support import SECRET, fleet_factory
from tests.tools.emit_services import KIND, EmitProbe, EmittingService
from tests.tools.servers import LoopbackServer
from toolkits.authoring import create_placed_session, service_env, tool

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
OPEN = {"type": "object"}


@pytest.fixture
def probe() -> EmitProbe:
    return EmitProbe()


@pytest.fixture
def service(probe: EmitProbe) -> Iterator[str]:
    server = LoopbackServer(EmittingService(probe)).start()
    yield server.url
    server.stop()


def _unused(arguments: object, ctx: object) -> object:
    raise AssertionError("a service placement never runs in this process")


def test_a_service_emits_through_an_instance_that_does_not_own_the_session(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
    probe: EmitProbe,
    service: str,
) -> None:
    fleet = fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=5,
        database_prefix="brain_emits",
        environment={"BRAIN_CHANNEL_REDIS": redis_server.url},
        config={
            "harnesses": {"loop": LOOP_HARNESS},
            "providers": {"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": scripted_provider.openai_base_url}},
            "tools": [
                {
                    "name": "zoo_json",
                    "description": "emits",
                    "url": service + "/json",
                    "tenants": ["acme"],
                    "input_schema": OPEN,
                },
            ],
            "environments": [{"name": "svc", "kind": "service", "tenants": ["acme"], "services": {"json": "zoo_json"}}],
        },
    )
    a, b = fleet("brain-a"), fleet("brain-b")
    scripted_provider.reset()
    probe.reader_token, probe.through = a.tokens["reader"], b.url
    # given: a session created on A (A owns it); its service posts to B
    placed = create_placed_session(
        a.sdk(),
        harness="loop",
        config={"model": MODEL, "tools": []},
        placements=[tool(name="json", description="emits", input=OPEN, run=_unused)(env=service_env("svc"))],
    )

    # when: the model calls the service
    accepted = send_ok(a, placed.id, "call json {}")
    wait_for_turn_end(a, placed.id, accepted["id"], timeout=60)
    events = [e for e in history(a, placed.id) if e.get("input_id") == accepted["id"]]

    # then: B forwarded the emit to A, which appended it before answering
    (call,) = [e["data"] for e in events if e["type"] == "tool.call"]
    (result,) = [e["data"] for e in events if e["type"] == "tool.result"]
    report = result["result"]["structured_content"]
    assert result["outcome"] == "ok"
    assert report["emit"] == 200 and report["answer"] == {"status": "committed"}
    assert {"call_id": call["id"], "environment": "svc", "kind": KIND, "data": {"via": "/json"}} in report["in_log"]
    assert (report["forged"], report["api_token"], report["bad_kind"], report["too_big"]) == (401, 401, 400, 400)
    assert [e["data"]["call_id"] for e in events if e["type"] == "tool.event"] == [call["id"]]

    # when: the call has ended; an expired token sealed with the fleet's key; a forged one
    (given_url, token) = probe.given[0]
    path = f"/sessions/{placed.id}/tool-calls/{call['id']}/events"
    expired = seal_emit_token(emit_key(SECRET.encode()), placed.id, call["id"], int(time.time()) - 1)
    before = len(history(a, placed.id))

    def post(server: BrainServer, bearer: str) -> tuple[int, str]:
        answer = httpx.post(
            server.url + path, json={"kind": KIND, "data": {}}, headers={"Authorization": f"Bearer {bearer}"}
        )
        return answer.status_code, answer.json()["error"]["code"]

    # then: 409 through either instance for the ended call, 401 for the expired and forged tokens
    assert given_url.endswith(path)
    assert [post(b, token), post(a, token)] == [(409, "conflict")] * 2
    assert [post(b, expired), post(a, expired)] == [(401, "forbidden")] * 2
    assert [post(b, "bemit." + "0" * 32 + ".9999999999." + "0" * 32)] == [(401, "forbidden")]
    assert len(history(a, placed.id)) == before
