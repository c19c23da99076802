"""The routing decision on its own: what a request is, what this instance holds and what the
lookups found decide serve here, forward to an instance, or refuse; nothing is looked up here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fleet_app.decision import Decision, ForwardTo, Found, Here, Refuse, Request, ServeHere, decide, read_request
from foundation.errors import Overloaded, Unavailable

SESSION = "0f" * 16
EXECUTOR = "ab" * 16


@dataclass(frozen=True)
class Peer:
    instance: str
    incarnation: str = "i-1"
    url: str = "http://127.0.0.1:9"


HERE = Here("brain-b", "i-1", draining=False, holds=False)
DRAINING = Here("brain-b", "i-1", draining=True, holds=False)
OWNER, SUCCESSOR = Peer("brain-a"), Peer("brain-c")


def session(*, signed: bool = False) -> Request:
    return Request("session", SESSION, signed, stream=False)


def executor(*, signed: bool = False) -> Request:
    return Request("executor", EXECUTOR, signed, stream=True)


def outcome(decision: Decision) -> tuple[str, str, int]:
    """serve / forward (to whom, as what) / refuse (the status), as a comparable row."""
    if isinstance(decision, ServeHere):
        return ("serve", "", 0)
    if isinstance(decision, ForwardTo):
        return ("forward", f"{decision.peer.instance} as {decision.role}", decision.unreachable.status)
    assert isinstance(decision, Refuse)
    return ("refuse", decision.error.message, decision.error.status)


MOVING = "the session is moving to another instance"


@pytest.mark.parametrize(
    ("request_", "here", "found", "expected"),
    [
        pytest.param(Request("other", "", False, False), HERE, Found(), ("serve", "", 0), id="another_route_case"),
        pytest.param(session(), Here("brain-b", "i-1", False, True), Found(OWNER), ("serve", "", 0), id="held_case"),
        pytest.param(
            session(signed=True), Here("b", "i", True, True), Found(), ("serve", "", 0), id="signed_held_case"
        ),
        pytest.param(session(), HERE, Found(OWNER), ("forward", "brain-a as owner", 503), id="owned_elsewhere_case"),
        pytest.param(session(signed=True), HERE, Found(OWNER), ("refuse", MOVING, 503), id="second_hop_case"),
        pytest.param(session(), HERE, Found(), ("serve", "", 0), id="nobody_owns_case"),
        pytest.param(session(), HERE, Found(Peer("brain-b")), ("serve", "", 0), id="owned_here_case"),
        pytest.param(
            session(), DRAINING, Found(None, SUCCESSOR), ("forward", "brain-c as successor", 503), id="drain_case"
        ),
        pytest.param(session(), DRAINING, Found(), ("refuse", MOVING, 503), id="drain_without_successor_case"),
        pytest.param(session(), DRAINING, Found(Peer("brain-b")), ("refuse", MOVING, 503), id="still_lapsing_case"),
        pytest.param(
            session(), HERE, Found(error=Overloaded("busy")), ("refuse", "busy", 429), id="lookup_refused_case"
        ),
        pytest.param(executor(), HERE, Found(), ("serve", "", 0), id="executor_held_nowhere_case"),
        pytest.param(executor(), HERE, Found(OWNER), ("forward", "brain-a as holder", 503), id="executor_case"),
        pytest.param(executor(signed=True), HERE, Found(OWNER), ("serve", "", 0), id="signed_executor_case"),
        pytest.param(
            executor(), HERE, Found(error=Unavailable("out of reach")), ("refuse", "out of reach", 503), id="redis_case"
        ),
    ],
)
def test_a_request_is_served_here_forwarded_or_refused_by_what_it_is_and_what_was_found(
    request_: Request, here: Here, found: Found, expected: tuple[str, str, int]
) -> None:
    # when
    decision = decide(request_, here, found)

    # then
    assert outcome(decision) == expected


def test_the_route_is_read_from_the_path_and_the_signature_header() -> None:
    # given
    events = {"path": f"/sessions/{SESSION}/events", "method": "GET", "headers": [(b"accept", b"text/event-stream")]}
    commands = {"path": f"/executors/{EXECUTOR}/commands", "method": "GET", "headers": []}
    signed = {"path": f"/sessions/{SESSION}", "method": "GET", "headers": [(b"brain-fleet-signature", b"v1=0")]}

    # when / then
    assert read_request(events, executors=True) == Request("session", SESSION, False, True)
    assert read_request(commands, executors=True) == Request("executor", EXECUTOR, False, True)
    assert read_request(commands, executors=False) == Request("other", "", False, True)
    assert read_request(signed, executors=True) == Request("session", SESSION, True, False)
    assert read_request({"path": "/sessions", "method": "POST"}, executors=True) == Request("other", "", False, False)


def test_the_admins_console_routes_of_a_session_go_to_its_owner_and_no_other_admin_page_does() -> None:
    # given
    base = f"/admin/sessions_app/session/{SESSION.upper()}"
    stream = {"path": base + "/stream/", "method": "GET", "headers": []}
    decide_post = {"path": base + "/approvals/" + "ab" * 16 + "/decide/", "method": "POST", "headers": []}
    interrupt = {"path": base + "/interrupt/", "method": "POST", "headers": []}
    page = {"path": base + "/change/", "method": "GET", "headers": []}
    elsewhere = {"path": base + "/approvals/../../login/decide/", "method": "POST", "headers": []}
    # when / then
    assert read_request(stream, executors=True) == Request("session", SESSION, False, True, True)
    assert read_request(decide_post, executors=True) == Request("session", SESSION, False, False, True)
    assert read_request(interrupt, executors=True) == Request("session", SESSION, False, False, True)
    assert read_request(page, executors=True) == Request("other", "", False, False)
    assert read_request(elsewhere, executors=True) == Request("other", "", False, False)
