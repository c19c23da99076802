"""Every operation of the served contract that takes a JSON body, sent what a hostile or broken
client sends (not JSON, JSON of the wrong shape, fields of the wrong type, an empty body, deep
nesting), is answered at once with a 4xx in the spec's error envelope, never a 500, and the
server goes on running turns. The operations come from the contract the server serves, so one
added later is covered without a change here."""

from __future__ import annotations

import itertools
import re
from typing import Any

import httpx
import pytest

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_turn_end

DEEP = b"[" * 100_000 + b"]" * 100_000
BODIES: dict[str, bytes] = {
    "not_json": b"{not json",
    "array": b"[1, 2, 3]",
    "string": b'"text"',
    "wrong_types": b'{"type": 7, "config": "x", "text": [], "connection": 1, "call_id": {}, "binding": false}',
    "empty": b"",
    "deep": DEEP,
    "invalid_utf8": b'{"type": "\xff\xfe"}',
}
ENVELOPE_FIELDS = {"error", "request_id"}
LOOKUP = {"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}


def _operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            content = (operation.get("requestBody") or {}).get("content") or {}
            if "application/json" in content:
                found.append((method.upper(), path))
    return sorted(found)


def _fill(path: str, session_id: str, executor_id: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "id":
            return executor_id if path.startswith("/executors") else session_id
        return "0" * 32

    return re.sub(r"\{([^}]+)\}", value, path)


def test_every_json_operation_answers_hostile_bodies_with_a_4xx_envelope_and_turns_go_on(
    module_brain: BrainServer,
) -> None:
    server = module_brain
    with server.client() as api:
        document = api.get("/openapi.json").json()
        registered = api.post("/executors", json={"binding": "runtime", "tools": [LOOKUP]})
    assert registered.status_code == 201, registered.text
    executor = registered.json()
    operations = _operations(document)
    assert ("POST", "/sessions") in operations and ("POST", "/sessions/{id}/events") in operations
    session_id = create_session(server)["id"]
    answers: dict[tuple[str, str, str], tuple[int, Any]] = {}
    with server.client() as api:
        for method, path in operations:
            url = _fill(path, session_id, executor["id"])
            headers = {"content-type": "application/json"}
            if path.startswith("/executors/{id}/"):  # the executor's own routes take its token
                headers["authorization"] = f"Bearer {executor['token']}"
            for label, body in BODIES.items():
                response = api.request(method, url, content=body, headers=headers)
                try:
                    parsed: Any = response.json()
                except ValueError:
                    parsed = response.text[:200]
                answers[(method, path, label)] = (response.status_code, parsed)
    bad = {
        key: answer
        for key, answer in answers.items()
        if not 400 <= answer[0] < 500
        or not isinstance(answer[1], dict)
        or set(answer[1]) != ENVELOPE_FIELDS
        or not isinstance(answer[1]["error"].get("code"), str)
        or not isinstance(answer[1]["error"].get("message"), str)
    }
    assert bad == {}
    # the bodies were read, not refused for want of a credential (but a tool call's events, whose
    # credential is the call's own capability, checked before its body)
    refused = {key[1] for key, answer in answers.items() if answer[0] in (401, 403)}
    assert refused <= {"/sessions/{id}/tool-calls/{call_id}/events"}
    # and the server still runs a turn of the session every hostile body was aimed at
    sent = send_ok(server, session_id, "still here")
    assert wait_for_turn_end(server, session_id, sent["id"])[-1]["data"]["status"] == "idle"


@pytest.mark.parametrize("label", sorted(BODIES))
def test_a_hostile_body_on_create_leaves_no_session_behind(module_brain: BrainServer, label: str) -> None:
    with module_brain.client() as api:
        before = api.get("/sessions").json()["sessions"]
        response = api.post("/sessions", content=BODIES[label], headers={"content-type": "application/json"})
        after = api.get("/sessions").json()["sessions"]
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["code"] in ("invalid_request", "payload_too_large")
    assert after == before
    assert isinstance(httpx.Headers(response.headers).get("x-request-id"), str)


HOSTILE_VALUES = ["", "-1", "0", "abc", "9" * 40, "\x00", "%ff", "a" * 5000, "1e309", "[]"]
ACCEPTS = ["application/json", "text/event-stream"]  # the events route streams for the second


def test_every_query_parameter_answers_hostile_values_with_a_2xx_or_a_4xx_envelope(module_brain: BrainServer) -> None:
    server = module_brain
    with server.client() as api:
        document = api.get("/openapi.json").json()
    session_id = create_session(server)["id"]
    answers: dict[tuple[str, str, str, str], int] = {}
    malformed: list[tuple[str, str, str, str]] = []
    with server.client() as api:
        for path, item in sorted(document["paths"].items()):
            operation = item.get("get")
            if operation is None:
                continue
            names = [p["name"] for p in operation.get("parameters", ()) if p.get("in") == "query"]
            url = _fill(path, session_id, "0" * 32)
            for name, value, accept in itertools.product(names, HOSTILE_VALUES, ACCEPTS):
                with api.stream("GET", url, params={name: value}, headers={"accept": accept}) as response:
                    key = (path, name, value[:12], accept)
                    answers[key] = response.status_code
                    if response.status_code >= 400:
                        body = response.read()
                        try:
                            envelope = httpx.Response(200, content=body).json()
                        except ValueError:
                            envelope = None
                        if not isinstance(envelope, dict) or set(envelope) != ENVELOPE_FIELDS:
                            malformed.append(key)
    assert answers, "the served contract lists no GET operation with query parameters"
    assert {key: status for key, status in answers.items() if status >= 500} == {}
    assert malformed == []
