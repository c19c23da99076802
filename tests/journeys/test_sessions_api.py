"""Create, list, get, catalog and health, plus the strict request rules of every POST."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from brain import BrainError

from tests.fixtures.server import BrainServer, create_session, make_server

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

HEX32 = re.compile(r"^[0-9a-f]{32}$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
INPUT_BYTES = 2048
BODY_LIMIT = INPUT_BYTES + 16 * 1024
ECHO_TOOL = {
    "name": "echo",
    "description": "Echo a value back.",
    "input_schema": {"type": "object", "properties": {"value": {"type": "string"}}},
    "url": "http://127.0.0.1:9/echo",
    "tenants": ["acme"],
    "token_env": "TEST_TOOL_TOKEN",
}
GLOBEX_TOOL = {**ECHO_TOOL, "name": "globex_only", "tenants": ["globex"], "token_env": ""}


@pytest.fixture(scope="module")
def api_brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    server = make_server(
        tmp_path_factory.mktemp("brain"), limits={"input_bytes": INPUT_BYTES}, tools=[ECHO_TOOL, GLOBEX_TOOL]
    )
    server.env["TEST_TOOL_TOKEN"] = "tool-token-0123456789abcdef"
    server.start()
    yield server
    server.stop()


def _create(server: BrainServer, body: Any, name: str = "alice") -> httpx.Response:
    with server.client(name) as client:
        return client.post("/sessions", json=body)


def _config(**fields: Any) -> dict[str, Any]:
    return {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": [], **fields}}


def _ids(server: BrainServer) -> list[str]:
    with server.client() as client:
        return [s["id"] for s in client.get("/sessions", params={"limit": 1000}).json()["sessions"]]


# -- create ----------------------------------------------------------------------------------


def test_create_returns_201_with_the_idle_session_and_its_first_checkpoint(api_brain: BrainServer) -> None:
    # given
    body = _config(instructions="Answer in one paragraph.")
    # when
    response = _create(api_brain, body)
    # then
    assert response.status_code == 201
    session = response.json()
    assert set(session) == {
        "id",
        "harness",
        "config",
        "descriptors",
        "status",
        "created_at",
        "updated_at",
        "checkpoint",
    }
    assert HEX32.match(session["id"])
    assert session["harness"] == "instant"
    assert session["config"] == {
        "model": "openai/gpt-4.1-mini",
        "tools": [],
        "instructions": "Answer in one paragraph.",
    }
    assert session["descriptors"] == []
    assert session["status"] == "idle"
    assert RFC3339.match(session["created_at"])
    assert session["updated_at"] == session["created_at"]
    assert set(session["checkpoint"]) == {"id", "offset", "time"}
    assert HEX32.match(session["checkpoint"]["id"])
    assert session["checkpoint"]["offset"] == 0
    assert session["checkpoint"]["time"] == session["created_at"]
    assert api_brain.sdk().get(session["id"]) == session


def test_create_through_the_sdk_lists_the_enabled_tool_descriptors(api_brain: BrainServer) -> None:
    # given
    client = api_brain.sdk()
    # when
    session = client.create({"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": ["echo"]}})
    # then
    assert session["descriptors"] == [
        {
            "name": "echo",
            "description": "Echo a value back.",
            "input_schema": {"type": "object", "properties": {"value": {"type": "string"}}},
        }
    ]
    assert session["config"] == {"model": "openai/gpt-4.1-mini", "tools": ["echo"]}


@pytest.mark.parametrize("effort", ["off", "minimal", "low", "medium", "high", "xhigh", "max"])
def test_every_reasoning_effort_of_the_set_is_accepted(api_brain: BrainServer, effort: str) -> None:
    # when
    response = _create(api_brain, _config(reasoning_effort=effort))
    # then
    assert response.status_code == 201
    assert response.json()["config"]["reasoning_effort"] == effort


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param({**_config(), "harness": "pi"}, 422, "unsupported", id="unknown_harness_case"),
        pytest.param(_config(model="gpt-4.1-mini"), 400, "invalid_request", id="model_without_slash_case"),
        pytest.param(_config(model="/gpt-4.1-mini"), 400, "invalid_request", id="model_empty_provider_case"),
        pytest.param(_config(model="openai/"), 400, "invalid_request", id="model_empty_name_case"),
        pytest.param(_config(model="openai/" + "m" * 250), 400, "invalid_request", id="model_over_256_case"),
        pytest.param(_config(model="anthropic/claude"), 400, "invalid_request", id="unconfigured_provider_case"),
        pytest.param(_config(reasoning_effort="extreme"), 400, "invalid_request", id="unknown_effort_case"),
        pytest.param(_config(reasoning_effort=""), 400, "invalid_request", id="empty_effort_case"),
        pytest.param(_config(tools=[f"t{i}" for i in range(129)]), 400, "invalid_request", id="129_tools_case"),
        pytest.param(_config(tools=["echo", "echo"]), 400, "invalid_request", id="duplicate_tool_case"),
        pytest.param(_config(tools=["nope"]), 403, "forbidden", id="unknown_tool_case"),
        pytest.param(_config(tools=["globex_only"]), 403, "forbidden", id="other_tenants_tool_case"),
        pytest.param(
            _config(instructions="i" * (INPUT_BYTES + 1)), 400, "invalid_request", id="long_instructions_case"
        ),
        pytest.param(
            _config(instructions="é" * (INPUT_BYTES // 2 + 1)), 400, "invalid_request", id="instructions_bytes_case"
        ),
        pytest.param(
            {"harness": "instant", "config": {"model": "openai/x"}}, 400, "invalid_request", id="no_tools_case"
        ),
        pytest.param({"harness": "instant"}, 400, "invalid_request", id="no_config_case"),
        pytest.param({**_config(), "extra": 1}, 400, "invalid_request", id="unknown_field_case"),
        pytest.param(_config(temperature=0.2), 400, "invalid_request", id="unknown_config_field_case"),
        pytest.param(_config(tools="echo"), 400, "invalid_request", id="tools_not_a_list_case"),
        pytest.param({"harness": 7, "config": _config()["config"]}, 400, "invalid_request", id="harness_number_case"),
    ],
)
def test_an_invalid_create_is_refused_and_creates_nothing(
    api_brain: BrainServer, body: dict[str, Any], status: int, code: str
) -> None:
    # given
    before = _ids(api_brain)
    # when
    response = _create(api_brain, body)
    # then
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert _ids(api_brain) == before


def test_a_create_with_a_lone_surrogate_is_400_and_creates_nothing(api_brain: BrainServer) -> None:
    # given: JSON may escape half of a UTF-16 pair, which no UTF-8 log can hold
    before = _ids(api_brain)
    content = b'{"harness":"instant","config":{"model":"openai/gpt\\ud800","tools":[],"instructions":"\\ud800"}}'
    # when
    with api_brain.client() as client:
        response = client.post("/sessions", content=content, headers={"Content-Type": "application/json"})
    # then
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": "body: strings must be valid Unicode (no lone surrogates)",
    }
    assert _ids(api_brain) == before


def test_instructions_of_exactly_input_bytes_are_accepted(api_brain: BrainServer) -> None:
    # when
    response = _create(api_brain, _config(instructions="é" * (INPUT_BYTES // 2)))
    # then
    assert response.status_code == 201


def test_the_sdk_raises_the_spec_codes_for_create(api_brain: BrainServer) -> None:
    # given
    client = api_brain.sdk()
    outcomes = []
    # when
    for body in (_config() | {"harness": "pi"}, _config(model="nope"), _config(tools=["nope"])):
        with pytest.raises(BrainError) as caught:
            client.create(body)
        outcomes.append((caught.value.status, caught.value.code))
    # then
    assert outcomes == [(422, "unsupported"), (400, "invalid_request"), (403, "forbidden")]


# -- strict request bodies -------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"type":"user.message","text":"hi"} {}', id="trailing_object_case"),
        pytest.param(b'{"type":"user.message","text":"hi"}x', id="trailing_garbage_case"),
        pytest.param(b'["user.message"]', id="array_case"),
        pytest.param(b'"user.message"', id="string_case"),
        pytest.param(b"null", id="null_case"),
        pytest.param(b"", id="empty_case"),
        pytest.param(b'{"type":"user.message",', id="truncated_case"),
        pytest.param(b'{"type":"user.message","text":"hi","urgent":true}', id="unknown_field_case"),
        pytest.param(b'{"type":"user.message","text":42}', id="text_number_case"),
        pytest.param(b'{"type":"user.message","text":"hi","key":7}', id="key_number_case"),
        pytest.param(b'{"type":["user.message"],"text":"hi"}', id="type_list_case"),
        pytest.param(b'{"type":"user.message","text":"half a pair \\ud800"}', id="lone_surrogate_case"),
        pytest.param(b'{"type":"user.message","text":"hi","key":"\\udfff"}', id="lone_surrogate_key_case"),
    ],
)
def test_a_body_that_is_not_one_strict_json_object_is_400(api_brain: BrainServer, content: bytes) -> None:
    # given
    session = create_session(api_brain)
    # when
    with api_brain.client() as client:
        response = client.post(
            f"/sessions/{session['id']}/events", content=content, headers={"Content-Type": "application/json"}
        )
        events = client.get(f"/sessions/{session['id']}/events").json()["events"]
    # then
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert events == []


def test_a_body_over_input_bytes_plus_16_kib_is_413_invalid_request(api_brain: BrainServer) -> None:
    # given
    session = create_session(api_brain)
    text = "x" * BODY_LIMIT
    # when
    with api_brain.client() as client:
        response = client.post(f"/sessions/{session['id']}/events", json={"type": "user.message", "text": text})
        events = client.get(f"/sessions/{session['id']}/events").json()["events"]
    # then
    assert response.status_code == 413
    assert response.json() == {
        "error": {"code": "invalid_request", "message": "request body exceeds the size limit"},
        "request_id": response.headers["x-request-id"],
    }
    assert events == []


def test_a_chunked_body_over_the_limit_is_413_too(api_brain: BrainServer) -> None:
    # given: no Content-Length, the body arrives in chunks
    session = create_session(api_brain)

    def chunks() -> Iterator[bytes]:
        yield b'{"type":"user.message","text":"'
        for _ in range(BODY_LIMIT // 1024 + 2):
            yield b"x" * 1024
        yield b'"}'

    # when
    with api_brain.client() as client:
        response = client.post(
            f"/sessions/{session['id']}/events", content=chunks(), headers={"Content-Type": "application/json"}
        )
        events = client.get(f"/sessions/{session['id']}/events").json()["events"]
    # then
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert events == []


def test_a_chunked_body_within_the_limit_is_accepted(api_brain: BrainServer) -> None:
    # given
    session = create_session(api_brain)

    def chunks() -> Iterator[bytes]:
        yield b'{"type":"user.message",'
        yield b'"text":"chunked"}'

    # when
    with api_brain.client() as client:
        response = client.post(
            f"/sessions/{session['id']}/events", content=chunks(), headers={"Content-Type": "application/json"}
        )
    # then
    assert response.status_code == 202
    assert response.json()["data"]["text"] == "chunked"


# -- list, get -------------------------------------------------------------------------------


def test_list_is_sorted_by_id_and_pages_with_after_and_limit(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory()
    created = sorted(create_session(server)["id"] for _ in range(5))
    create_session(server, "charlie")
    client = server.sdk()
    # when
    everything = client.list()["sessions"]
    first = client.list(limit=2)["sessions"]
    second = client.list(after=first[-1]["id"], limit=2)["sessions"]
    third = client.list(after=second[-1]["id"], limit=2)["sessions"]
    past_end = client.list(after=third[-1]["id"], limit=2)["sessions"]
    # then
    assert [s["id"] for s in everything] == created
    assert [s["id"] for s in first + second + third] == created
    assert [len(first), len(second), len(third), len(past_end)] == [2, 2, 1, 0]
    assert {s["status"] for s in everything} == {"idle"}


def test_list_shows_only_the_callers_tenant(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory()
    acme = create_session(server)
    globex = create_session(server, "charlie")
    # when
    as_alice = server.sdk().list()["sessions"]
    as_reader = server.sdk("reader").list()["sessions"]
    as_charlie = server.sdk("charlie").list()["sessions"]
    # then
    assert [s["id"] for s in as_alice] == [acme["id"]]
    assert [s["id"] for s in as_reader] == [acme["id"]]
    assert [s["id"] for s in as_charlie] == [globex["id"]]


@pytest.mark.parametrize("limit", ["0", "1001", "abc", "-1", "1.5"])
def test_a_limit_outside_1_to_1000_is_400_on_lists_and_pages(api_brain: BrainServer, limit: str) -> None:
    # given
    session = create_session(api_brain)
    # when
    with api_brain.client() as client:
        sessions = client.get("/sessions", params={"limit": limit})
        events = client.get(f"/sessions/{session['id']}/events", params={"limit": limit})
    # then
    assert (sessions.status_code, sessions.json()["error"]["code"]) == (400, "invalid_request")
    assert (events.status_code, events.json()["error"]["code"]) == (400, "invalid_request")


def test_limits_1_and_1000_are_accepted(api_brain: BrainServer) -> None:
    # when
    with api_brain.client() as client:
        responses = [client.get("/sessions", params={"limit": limit}) for limit in ("1", "1000")]
    # then
    assert [response.status_code for response in responses] == [200, 200]
    assert len(responses[0].json()["sessions"]) == 1


def test_get_returns_the_session_and_a_malformed_id_is_404(api_brain: BrainServer) -> None:
    # given
    session = create_session(api_brain)
    # when
    with api_brain.client() as client:
        found = client.get(f"/sessions/{session['id']}")
        malformed = client.get("/sessions/not-a-session")
    # then
    assert found.json() == session
    assert (malformed.status_code, malformed.json()["error"]["code"]) == (404, "not_found")


# -- catalog and health ----------------------------------------------------------------------


def test_the_catalog_lists_the_tenants_tools_without_urls_or_credentials(api_brain: BrainServer) -> None:
    # when
    acme = api_brain.sdk().catalog()
    globex = api_brain.sdk("charlie").catalog()
    # then
    assert acme == {
        "tools": [
            {
                "name": "echo",
                "description": "Echo a value back.",
                "input_schema": {"type": "object", "properties": {"value": {"type": "string"}}},
            }
        ]
    }
    assert [tool["name"] for tool in globex["tools"]] == ["globex_only"]


def test_the_catalog_is_empty_without_tools(module_brain: BrainServer) -> None:
    # when
    catalog = module_brain.sdk("reader").catalog()
    # then
    assert catalog == {"tools": []}


def test_health_routes_are_public(api_brain: BrainServer) -> None:
    # when
    live = httpx.get(api_brain.url + "/health/live")
    ready = httpx.get(api_brain.url + "/health/ready")
    # then
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    assert live.headers["content-type"].split(";")[0] == "application/json"


def test_the_openapi_document_is_served(api_brain: BrainServer) -> None:
    # when
    response = httpx.get(api_brain.url + "/openapi.json")
    # then
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
    assert "/sessions/{id}/events" in response.json()["paths"]


def test_an_unknown_route_is_a_404_envelope(api_brain: BrainServer) -> None:
    # when
    response = httpx.get(api_brain.url + "/nothing-here")
    # then
    assert response.status_code == 404
    assert response.json()["error"] == {"code": "not_found", "message": "not found"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"[" * 3_000 + b"]" * 3_000, "body is not valid JSON", id="deeper_than_the_parser_case"),
        pytest.param(
            b'{"harness":"instant","config":' + b'{"a":' * 65 + b"1" + b"}" * 65 + b"}",
            "body nests deeper than 64 levels",
            id="deeper_than_the_bound_case",
        ),
        pytest.param(b'{"harness":"instant","config":{"model":1e400}}', "body is not valid JSON", id="infinity_case"),
    ],
)
def test_a_body_nested_too_deep_or_not_json_is_400_and_creates_nothing(
    api_brain: BrainServer, content: bytes, message: str
) -> None:
    # given
    before = _ids(api_brain)
    # when
    with api_brain.client() as client:
        response = client.post("/sessions", content=content, headers={"Content-Type": "application/json"})
    # then
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["message"].startswith(message)
    assert _ids(api_brain) == before
