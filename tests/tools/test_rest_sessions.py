"""REST tools through a real runbrain: a session's harness calls one and the event log records
it; a bad template stops the server at startup with the field named."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import ROOT, BrainServer, create_session, make_server, send_ok, wait_for_turn_end
from tests.tools.rest_server import RestService
from tests.tools.servers import LoopbackServer

REST_KEY = "orders-api-key-0123456789abcdef"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["order"],
}


@pytest.fixture(scope="module")
def rest_server() -> Iterator[tuple[RestService, LoopbackServer]]:
    service = RestService()
    server = LoopbackServer(service).start()
    yield service, server
    server.stop()


def rest_tool(url: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": "update_order",
        "description": "Update an order's line count.",
        "input_schema": SCHEMA,
        "transport": "rest",
        "method": "PUT",
        "url": url + "/items/orders/{{order}}",
        "body": {"count": "{{count}}"},
        "token_env": "TEST_ORDERS_KEY",
        "tenants": ["acme"],
        **fields,
    }


def test_a_session_calls_a_rest_tool_and_the_events_record_it(
    brain_factory: Callable[..., BrainServer], rest_server: tuple[RestService, LoopbackServer]
) -> None:
    # given
    service, server = rest_server
    brain = brain_factory(start=False, tools=[rest_tool(server.url)])
    brain.env["TEST_ORDERS_KEY"] = REST_KEY
    brain.start()
    session = create_session(brain, tools=["update_order"])

    # when
    message = send_ok(brain, session["id"], 'tool:update_order {"order": "A-7", "count": 4}')
    events = [event for event in wait_for_turn_end(brain, session["id"], message["id"]) if event.get("input_id")]

    # then
    (call,) = [event for event in events if event["type"] == "tool.call"]
    (result,) = [event for event in events if event["type"] == "tool.result"]
    assert call["data"]["arguments"] == {"order": "A-7", "count": 4}
    assert result["data"]["outcome"] == "ok"
    structured = result["data"]["result"]["structured_content"]
    assert structured["method"] == "PUT" and structured["path"] == "/items/orders/A-7"
    assert structured["body"] == {"count": 4}
    (request,) = service.requests("/items/orders/")
    assert request.headers["authorization"] == f"Bearer {REST_KEY}"
    assert REST_KEY not in (brain.directory / "data").joinpath("sessions", session["id"], "events.jsonl").read_text()


def test_runbrain_refuses_to_start_with_a_placeholder_in_the_host(tmp_path: Path) -> None:
    # given
    server = make_server(tmp_path, tools=[rest_tool("https://{{order}}.example.com")])
    server.env["TEST_ORDERS_KEY"] = REST_KEY
    path = tmp_path / "brain.json"
    path.write_text(json.dumps(server.config))

    # when
    result = subprocess.run(
        [sys.executable, "manage.py", "runbrain", "--config", str(path)],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # then
    assert result.returncode != 0
    assert "tools[0].url: placeholders are allowed only in the path and query values" in result.stderr
