"""JSON pages of the event log: limit, next_cursor, cursor format and cursor errors."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, history, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0


def _decode(cursor: str) -> dict[str, Any]:
    return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))  # type: ignore[no-any-return]


def _encode(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def two_turns(module_brain: BrainServer) -> Iterator[tuple[BrainServer, str]]:
    session = create_session(module_brain)
    for text in ("one", "two"):
        message = send_ok(module_brain, session["id"], text)
        wait_for_turn_end(module_brain, session["id"], message["id"])
    yield module_brain, session["id"]


def _page(server: BrainServer, session_id: str, **params: Any) -> Any:
    with server.client("reader") as client:
        return client.get(f"/sessions/{session_id}/events", params=params)


def test_pages_follow_next_cursor_to_the_end(two_turns: tuple[BrainServer, str]) -> None:
    # given
    server, session_id = two_turns
    everything = history(server, session_id)
    # when
    first = _page(server, session_id, limit=3).json()
    second = _page(server, session_id, limit=3, after=first["next_cursor"]).json()
    rest = _page(server, session_id, after=second["next_cursor"]).json()
    end = _page(server, session_id, after=rest["next_cursor"]).json()
    # then
    assert len(everything) == 8
    assert first["events"] == everything[:3]
    assert first["next_cursor"] == everything[2]["cursor"]
    assert second["events"] == everything[3:6]
    assert second["next_cursor"] == everything[5]["cursor"]
    assert rest["events"] == everything[6:]
    assert end == {"events": [], "next_cursor": rest["next_cursor"]}


def test_the_sdk_history_pages_the_same_way(two_turns: tuple[BrainServer, str]) -> None:
    # given
    server, session_id = two_turns
    client = server.sdk("reader")
    # when
    first = client.history(session_id, limit=5)
    second = client.history(session_id, after=first["next_cursor"], limit=5)
    # then
    assert [event["id"] for event in first["events"] + second["events"]] == [
        e["id"] for e in history(server, session_id)
    ]


def test_an_empty_session_has_an_empty_page_with_an_empty_cursor(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    # when
    page = _page(module_brain, session["id"])
    # then
    assert (page.status_code, page.json()) == (200, {"events": [], "next_cursor": ""})


def test_a_cursor_is_base64url_of_the_byte_offset_and_event_id(two_turns: tuple[BrainServer, str]) -> None:
    # given
    server, session_id = two_turns
    events = history(server, session_id)
    # when
    decoded = [_decode(event["cursor"]) for event in events]
    # then
    assert [value["i"] for value in decoded] == [event["id"] for event in events]
    assert decoded[0]["o"] == 0
    assert [value["o"] for value in decoded] == sorted({value["o"] for value in decoded})
    assert all("=" not in event["cursor"] and "+" not in event["cursor"] for event in events)


def test_a_rebuilt_cursor_of_the_same_offset_and_id_works(two_turns: tuple[BrainServer, str]) -> None:
    # given
    server, session_id = two_turns
    events = history(server, session_id)
    cursor = _encode(_decode(events[3]["cursor"]))
    # when
    page = _page(server, session_id, after=cursor).json()
    # then
    assert page["events"] == events[4:]


def test_live_only_deltas_never_reach_pages(two_turns: tuple[BrainServer, str]) -> None:
    # given
    server, session_id = two_turns
    # when
    types = [event["type"] for event in history(server, session_id)]
    # then
    assert types == ["user.message", "session.status", "assistant.message", "session.status"] * 2


@pytest.mark.parametrize(
    "cursor_of",
    [
        pytest.param(lambda events: events[1]["id"], id="event_id_case"),
        pytest.param(lambda events: "garbage!", id="garbage_case"),
        pytest.param(lambda events: "e30", id="empty_object_case"),
        pytest.param(lambda events: _encode({"o": 1, "i": events[0]["id"]}), id="wrong_offset_case"),
        pytest.param(lambda events: _encode({"o": 0, "i": events[1]["id"]}), id="wrong_id_case"),
        pytest.param(lambda events: _encode({"o": 10**9, "i": events[0]["id"]}), id="past_the_end_case"),
        pytest.param(lambda events: _encode({"o": -1, "i": events[0]["id"]}), id="negative_offset_case"),
        pytest.param(
            lambda events: _encode({"o": 0, "i": events[0]["id"], "pad": "x" * 400}), id="over_512_bytes_case"
        ),
        pytest.param(lambda events: events[0]["cursor"] + "A" * 520, id="valid_prefix_over_512_case"),
    ],
)
def test_a_cursor_brain_did_not_issue_is_409_cursor_unavailable(
    two_turns: tuple[BrainServer, str], cursor_of: Any
) -> None:
    # given
    server, session_id = two_turns
    cursor = cursor_of(history(server, session_id))
    # when
    response = _page(server, session_id, after=cursor)
    # then
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cursor_unavailable"
    assert response.json()["request_id"] == response.headers["x-request-id"]


def test_a_cursor_of_another_session_is_409(two_turns: tuple[BrainServer, str]) -> None:
    # given
    server, session_id = two_turns
    other = create_session(server)
    send_ok(server, other["id"], "x" * 500)
    cursor = history(server, session_id)[1]["cursor"]
    # when
    response = _page(server, other["id"], after=cursor)
    # then
    assert (response.status_code, response.json()["error"]["code"]) == (409, "cursor_unavailable")


def test_pages_work_after_a_restart(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory()
    session = create_session(server)
    message = send_ok(server, session["id"], "persisted")
    before = wait_for_turn_end(server, session["id"], message["id"])
    server.restart()
    # when
    after = history(server, session["id"])
    tail = _page(server, session["id"], after=before[1]["cursor"]).json()["events"]
    # then
    assert after == before
    assert tail == before[2:]
