"""Runtime executors are a pool every tenant draws on: on a real `runbrain` one tenant holds at
most `limits.tenant_executors` (then 429 with Retry-After, while another tenant still registers),
and an executor no session binds is closed `limits.unbound_executor_seconds` after its
registration by the server's own sweep, with no further registration to trigger it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx

from tests.fixtures.server import BrainServer

DESCRIPTOR = {
    "name": "lookup",
    "description": "Read application data",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
REGISTRATION = {"binding": "runtime", "tools": [DESCRIPTOR]}


def register(brain: BrainServer, name: str) -> httpx.Response:
    with brain.client(name) as client:
        return client.post("/executors", json=REGISTRATION)


def test_a_tenant_past_its_executor_share_gets_429_and_another_tenant_still_registers(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: acme holds its whole share
    brain = brain_factory(limits={"tenant_executors": 2})
    held = [register(brain, "alice") for _ in range(2)]
    assert [response.status_code for response in held] == [201, 201]
    # when
    refused = register(brain, "alice")
    admitted = register(brain, "charlie")  # globex
    # then
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == {
        "code": "overloaded",
        "message": "the tenant's share of runtime executors (2, limits.tenant_executors) is in use; "
        "close executors it no longer needs or try again later",
    }
    assert admitted.status_code == 201
    # and closing one of acme's gives its share back
    first = held[0].json()
    closed = httpx.post(
        f"{brain.url}/executors/{first['id']}/close", headers={"Authorization": f"Bearer {first['token']}"}
    )
    assert closed.status_code == 200
    assert register(brain, "alice").status_code == 201
    assert register(brain, "alice").status_code == 429


def test_an_unbound_executor_is_closed_on_time_without_another_registration(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: an executor nobody binds, its command stream open
    brain = brain_factory(limits={"tenant_executors": 1, "unbound_executor_seconds": 2})
    credential = register(brain, "alice").json()
    headers = {"Authorization": f"Bearer {credential['token']}"}
    base = f"{brain.url}/executors/{credential['id']}"
    frames: list[dict[str, Any]] = []
    ended = threading.Event()

    def read_commands() -> None:
        with httpx.Client(headers=headers, timeout=60) as http, http.stream("GET", f"{base}/commands") as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    frames.append(json.loads(line[5:]))
        ended.set()

    threading.Thread(target=read_commands, daemon=True).start()
    # when: nothing else happens (keep-alives would hold a lazily expired executor's stream open)
    # then: the sweep closes the executor, which ends its stream
    assert ended.wait(20), "the unbound executor's command stream is still open"
    assert [frame["type"] for frame in frames] == ["ready"]
    assert httpx.post(f"{base}/close", headers=headers).status_code == 401
    assert "never bound to a session" in brain.logs()
    assert register(brain, "alice").status_code == 201  # its share is free again
