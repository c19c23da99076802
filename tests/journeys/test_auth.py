"""Bearer tokens, grants, tenants and the headers every response carries."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from brain import BrainError

from tests.fixtures.server import BrainServer, create_session, history, open_stream, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

HEX32 = re.compile(r"^[0-9a-f]{32}$")
CREATE_BODY = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}


def _assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    body = response.json()
    assert body["error"]["code"] == "forbidden"
    assert body["request_id"] == response.headers["x-request-id"]


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(None, id="missing_case"),
        pytest.param("Basic YWxpY2U6c2VjcmV0", id="basic_scheme_case"),
        pytest.param("Bearer " + "f" * 48, id="unknown_token_case"),
        pytest.param("Bearer", id="empty_token_case"),
        pytest.param("Bearer " + "a" * 1100, id="over_1024_chars_case"),
    ],
)
def test_it_answers_401_forbidden_with_a_bearer_challenge(module_brain: BrainServer, authorization: str | None) -> None:
    # given
    headers = {} if authorization is None else {"Authorization": authorization}
    # when
    responses = [
        httpx.get(module_brain.url + "/sessions", headers=headers),
        httpx.post(module_brain.url + "/sessions", headers=headers, json=CREATE_BODY),
        httpx.get(module_brain.url + "/catalog", headers=headers),
    ]
    # then
    for response in responses:
        _assert_unauthorized(response)
    with httpx.Client(base_url=module_brain.url, headers={"Authorization": f"Bearer {module_brain.token()}"}) as client:
        assert client.get("/sessions").json()["sessions"] == []


def test_a_valid_token_longer_than_1024_characters_is_refused_whatever_its_value(module_brain: BrainServer) -> None:
    # given: a real token behind enough spaces to pass the header limit
    header = "Bearer" + " " * 1100 + module_brain.token()
    # when
    response = httpx.get(module_brain.url + "/sessions", headers={"Authorization": header})
    # then
    _assert_unauthorized(response)


def test_the_sse_route_also_answers_401_without_a_token(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    # when
    response = httpx.get(
        module_brain.url + f"/sessions/{session['id']}/events", headers={"Accept": "text/event-stream"}
    )
    # then
    _assert_unauthorized(response)


def test_a_read_only_token_reads_but_every_post_is_403(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    path = f"/sessions/{session['id']}"
    with module_brain.client("reader") as reader:
        # when
        reads = [reader.get("/sessions"), reader.get(path), reader.get(path + "/events"), reader.get("/catalog")]
        writes = [
            reader.post("/sessions", json=CREATE_BODY),
            reader.post(path + "/events", json={"type": "user.message", "text": "hi"}),
            reader.post(path + "/events", json={"type": "user.interrupt"}),
            reader.post(path + "/resume"),
            reader.post(path + "/close"),
        ]
    # then
    assert [response.status_code for response in reads] == [200, 200, 200, 200]
    assert [response.status_code for response in writes] == [403] * 5
    assert {response.json()["error"]["code"] for response in writes} == {"forbidden"}
    assert history(module_brain, session["id"]) == []
    assert module_brain.sdk().get(session["id"])["status"] == "idle"


def test_a_token_without_manage_sends_and_interrupts_but_cannot_create_resume_or_close(
    module_brain: BrainServer,
) -> None:
    # given
    bob = module_brain.sdk("bob")
    session = create_session(module_brain)
    # when
    refused = []
    for call in (lambda: bob.create(CREATE_BODY), lambda: bob.resume(session["id"]), lambda: bob.close(session["id"])):
        with pytest.raises(BrainError) as caught:
            call()
        refused.append((caught.value.status, caught.value.code))
    message = bob.send(session["id"], {"type": "user.message", "text": "from bob"})
    wait_for_turn_end(module_brain, session["id"], message["id"])
    bob.interrupt(session["id"])
    # then
    assert refused == [(403, "forbidden")] * 3
    assert [(event["type"], event["data"].get("status")) for event in history(module_brain, session["id"])] == [
        ("user.message", None),
        ("session.status", "running"),
        ("assistant.message", None),
        ("session.status", "idle"),
    ]
    assert [s["id"] for s in module_brain.sdk().list()["sessions"]].count(session["id"]) == 1
    assert module_brain.sdk().get(session["id"])["status"] == "idle"


def test_another_tenants_session_is_404_on_every_route(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    path = f"/sessions/{session['id']}"
    with module_brain.client("charlie") as charlie:
        # when
        responses = [
            charlie.get(path),
            charlie.get(path + "/events"),
            charlie.post(path + "/events", json={"type": "user.message", "text": "hi"}),
            charlie.post(path + "/events", json={"type": "user.interrupt"}),
            charlie.post(path + "/resume"),
            charlie.post(path + "/close"),
        ]
        listed = charlie.get("/sessions").json()["sessions"]
    stream = open_stream(module_brain, session["id"], "charlie")
    stream_error = stream.error()
    stream.close()
    # then
    assert [response.status_code for response in responses] == [404] * 6
    assert {response.json()["error"]["code"] for response in responses} == {"not_found"}
    assert (stream.status, stream_error["error"]["code"]) == (404, "not_found")
    assert session["id"] not in [s["id"] for s in listed]
    assert history(module_brain, session["id"]) == []
    assert module_brain.sdk().get(session["id"])["status"] == "idle"


def test_an_unknown_session_looks_exactly_like_another_tenants(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    with module_brain.client("charlie") as charlie:
        # when
        foreign = charlie.get(f"/sessions/{session['id']}").json()
        unknown = charlie.get("/sessions/" + "0" * 32).json()
    # then
    assert foreign["error"] == unknown["error"] == {"code": "not_found", "message": "session not found"}


def test_a_session_scoped_token_sees_only_its_session_and_cannot_create(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: the session exists before the token limited to it is configured
    server = brain_factory()
    mine, other = create_session(server), create_session(server)
    server.stop()
    server.config["tokens"].append(
        {"token_env": "TEST_SESSION_TOKEN", "tenant": "acme", "session": mine["id"], "manage": True}
    )
    server.start()
    with server.client("alice_session") as scoped:
        # when
        listed = scoped.get("/sessions").json()["sessions"]
        own = scoped.get(f"/sessions/{mine['id']}")
        foreign = [
            scoped.get(f"/sessions/{other['id']}"),
            scoped.get(f"/sessions/{other['id']}/events"),
            scoped.post(f"/sessions/{other['id']}/events", json={"type": "user.message", "text": "hi"}),
            scoped.post(f"/sessions/{other['id']}/close"),
        ]
        created = scoped.post("/sessions", json=CREATE_BODY)
        sent = scoped.post(f"/sessions/{mine['id']}/events", json={"type": "user.message", "text": "mine"})
    # then
    assert [s["id"] for s in listed] == [mine["id"]]
    assert own.status_code == 200
    assert [response.status_code for response in foreign] == [403] * 4
    assert (created.status_code, created.json()["error"]["code"]) == (403, "forbidden")
    assert sent.status_code == 202
    assert history(server, other["id"]) == []
    assert sorted(s["id"] for s in server.sdk().list()["sessions"]) == sorted([mine["id"], other["id"]])


def test_every_response_carries_a_request_id_and_nosniff(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    with module_brain.client() as alice:
        # when
        responses = [
            alice.get("/sessions"),
            alice.get(f"/sessions/{session['id']}"),
            alice.post("/sessions", content=b"{"),
            alice.get("/no/such/route"),
            alice.get("/sessions/" + "0" * 32),
            httpx.get(module_brain.url + "/health/live"),
            httpx.get(module_brain.url + "/health/ready"),
            httpx.get(module_brain.url + "/sessions"),
        ]
    with open_stream(module_brain, session["id"]) as stream:
        stream_headers = stream.headers
    # then
    ids = [response.headers["x-request-id"] for response in responses] + [stream_headers["x-request-id"]]
    assert all(HEX32.match(value) for value in ids)
    assert len(set(ids)) == len(ids)
    assert {response.headers["x-content-type-options"] for response in responses} == {"nosniff"}
    assert stream_headers["x-content-type-options"] == "nosniff"


def test_errors_use_the_envelope_with_the_header_request_id(module_brain: BrainServer) -> None:
    # given
    with module_brain.client() as alice:
        # when
        unknown_route = alice.get("/no/such/route")
        malformed = alice.post("/sessions", content=b"{", headers={"Content-Type": "application/json"})
    # then
    assert unknown_route.status_code == 404
    assert unknown_route.json() == {
        "error": {"code": "not_found", "message": "not found"},
        "request_id": unknown_route.headers["x-request-id"],
    }
    assert malformed.status_code == 400
    assert set(malformed.json()) == {"error", "request_id"}
    assert malformed.json()["error"]["code"] == "invalid_request"
    assert malformed.json()["request_id"] == malformed.headers["x-request-id"]


def test_the_sdk_reports_the_request_id_of_a_failure(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    # when
    with pytest.raises(BrainError) as caught:
        client.get("0" * 32)
    # then
    assert (caught.value.status, caught.value.code, str(caught.value)) == (404, "not_found", "session not found")
    assert HEX32.match(caught.value.request_id or "")


def test_a_send_from_a_session_scoped_token_to_its_own_session_runs_a_turn(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given
    server = brain_factory()
    session = create_session(server)
    server.stop()
    server.config["tokens"].append({"token_env": "TEST_SESSION_TOKEN", "tenant": "acme", "session": session["id"]})
    server.start()
    # when
    message = send_ok(server, session["id"], "scoped", name="alice_session")
    events = wait_for_turn_end(server, session["id"], message["id"])
    # then
    assert events[-1]["data"] == {"status": "idle"}
    assert events[-2]["data"]["text"] == "echo: scoped"
