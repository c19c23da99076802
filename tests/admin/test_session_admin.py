"""Sessions in the admin of a real server: the transcript from the event log, the raw JSON pages,
and interrupt and close through the runtime after a confirmation page."""

from __future__ import annotations

import re
import time
from html import unescape
from typing import Any

import pytest

from tests.admin.support import VIEWER, VIEWER_PASSWORD, AdminClient, create_viewer, transcript_rows
from tests.fixtures.server import BrainServer, create_session, history, send_ok, wait_for_status, wait_for_turn_end

SESSIONS = "/admin/sessions_app/session"


def a_session_with_turns(server: BrainServer, *texts: str) -> dict[str, Any]:
    session = create_session(server)
    for text in texts:
        sent = send_ok(server, session["id"], text)
        wait_for_turn_end(server, session["id"], sent["id"])
    return session


def rows_of(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(type, text) of the API's events as the transcript shows the ones these tests make."""
    shown = {"user.message": "text", "assistant.message": "text", "session.status": "status"}
    return [(event["type"], event["data"][shown[event["type"]]]) for event in events]


def api_status(server: BrainServer, session_id: str) -> str:
    with server.client() as client:
        return str(client.get(f"/sessions/{session_id}").json()["status"])


def test_the_session_page_shows_its_facts_and_its_transcript_newest_last(admin_brain: BrainServer) -> None:
    # given
    session = a_session_with_turns(admin_brain, "first question", "second <question>")

    # when
    with AdminClient(admin_brain) as admin:
        page = admin.login().page(f"{SESSIONS}/{session['id']}/change/")

    # then
    assert transcript_rows(page) == [
        ("user.message", "first question"),
        ("session.status", "running"),
        ("assistant.message", "echo: first question"),
        ("session.status", "idle"),
        ("user.message", "second <question>"),
        ("session.status", "running"),
        ("assistant.message", "echo: second <question>"),
        ("session.status", "idle"),
    ]
    assert "second &lt;question&gt;" in page  # texts are escaped, never markup
    log_bytes = (admin_brain.data_dir / "sessions" / session["id"] / "events.jsonl").stat().st_size
    assert f"({log_bytes} bytes)" in page
    assert "openai/gpt-4.1-mini" in page and "instant" in page
    assert 'class="transcript-start"' in page and 'class="transcript-older"' not in page
    assert 'class="session-close"' in page and 'class="session-interrupt"' in page


def test_an_event_s_raw_json_is_the_api_s_record(admin_brain: BrainServer) -> None:
    # given
    session = a_session_with_turns(admin_brain, "hello")
    events = history(admin_brain, session["id"])

    # when
    with AdminClient(admin_brain) as admin:
        page = admin.login().page(f"{SESSIONS}/{session['id']}/change/")
        links = [unescape(link) for link in re.findall(r'class="entry-raw" href="([^"]+)"', page)]
        raw = [admin.get(link).json() for link in links]

    # then
    assert [item["events"] for item in raw] == [[event] for event in events]


def test_the_raw_json_pages_are_what_the_api_answers(admin_brain: BrainServer) -> None:
    # given
    session = a_session_with_turns(admin_brain, "one", "two")
    with admin_brain.client() as client:
        api_session = client.get(f"/sessions/{session['id']}").json()
        api_first = client.get(f"/sessions/{session['id']}/events", params={"limit": 3}).json()
        api_rest = client.get(f"/sessions/{session['id']}/events", params={"after": api_first["next_cursor"]}).json()

    # when
    with AdminClient(admin_brain) as admin:
        admin.login()
        raw_session = admin.get(f"{SESSIONS}/{session['id']}/json/")
        first = admin.get(f"{SESSIONS}/{session['id']}/events/", params={"limit": 3})
        rest = admin.get(f"{SESSIONS}/{session['id']}/events/", params={"after": first.json()["next_cursor"]})
        bad = admin.get(f"{SESSIONS}/{session['id']}/events/", params={"after": "not-a-cursor"})

    # then
    assert raw_session.json() == api_session
    assert (first.json(), rest.json()) == (api_first, api_rest)
    assert raw_session.headers["content-type"] == first.headers["content-type"] == "application/json"
    assert "no-cache" in raw_session.headers["cache-control"]
    assert bad.status_code == 409 and bad.json()["error"]["code"] == "cursor_unavailable"


def test_transcript_pages_lead_to_older_and_newer_events(admin_brain: BrainServer) -> None:
    # given: 15 turns of up to 4 events, more than one page of 50
    session = create_session(admin_brain)
    sent = [send_ok(admin_brain, session["id"], f"message {n}") for n in range(15)]
    wait_for_turn_end(admin_brain, session["id"], sent[-1]["id"])

    # when
    with AdminClient(admin_brain) as admin:
        admin.login()
        newest = admin.page(f"{SESSIONS}/{session['id']}/change/")
        older_link = unescape(re.findall(r'class="transcript-older" href="([^"]+)"', newest)[0])
        older = admin.page(f"{SESSIONS}/{session['id']}/change/{older_link}")
        newer_link = unescape(re.findall(r'class="transcript-newer" href="([^"]+)"', older)[0])
        newer = admin.page(f"{SESSIONS}/{session['id']}/change/{newer_link}")
        wrong = admin.page(f"{SESSIONS}/{session['id']}/change/?before=not-a-cursor")

    # then
    expected = rows_of(history(admin_brain, session["id"]))
    assert len(expected) > 50  # queued turns follow each other without an idle between them
    assert transcript_rows(newest) == expected[-50:]
    assert transcript_rows(older) == expected[:-50]
    assert 'class="transcript-older"' not in older and 'class="transcript-newer"' not in newest
    assert transcript_rows(newer) == transcript_rows(newest)
    assert "That position is not in this session&#x27;s event log." in wrong
    assert transcript_rows(wrong) == transcript_rows(newest)


def test_closing_asks_first_then_closes_through_the_runtime(admin_brain: BrainServer) -> None:
    # given
    session = a_session_with_turns(admin_brain, "hello")
    close_url = f"{SESSIONS}/{session['id']}/close/"

    with AdminClient(admin_brain) as admin:
        admin.login()
        # when: the button's page
        confirmation = admin.page(close_url)
        # then: it only asks
        assert 'id="confirm-session-control"' in confirmation and "This cannot be undone." in confirmation
        assert api_status(admin_brain, session["id"]) == "idle"

        # when: confirmed
        response = admin.post(close_url)
        page = admin.page(response.headers["location"])

    # then
    assert response.status_code == 302 and response.headers["location"] == f"{SESSIONS}/{session['id']}/change/"
    assert api_status(admin_brain, session["id"]) == "closed"
    assert [event["data"] for event in history(admin_brain, session["id"])][-1] == {"status": "closed"}
    assert "Close requested: the session closes as soon as no turn runs." in page
    assert transcript_rows(page)[-1] == ("session.status", "closed")
    assert 'class="session-close"' not in page  # nothing left to close
    with admin_brain.client() as client:
        refused = client.post(f"/sessions/{session['id']}/events", json={"type": "user.message", "text": "more"})
    assert refused.status_code == 409


def test_interrupting_stops_a_running_turn(admin_brain: BrainServer) -> None:
    # given: a turn that runs for a minute
    session = create_session(admin_brain)
    send_ok(admin_brain, session["id"], "sleep:60")
    wait_for_status(admin_brain, session["id"], "running")

    # when
    with AdminClient(admin_brain) as admin:
        admin.login()
        response = admin.post(f"{SESSIONS}/{session['id']}/interrupt/")
        page = admin.page(response.headers["location"])

    # then
    assert response.status_code == 302
    wait_for_status(admin_brain, session["id"], "interrupted", timeout=10)
    assert "Interrupt requested: a running turn stops." in page


def test_the_admin_history_records_who_closed_a_session(admin_brain: BrainServer) -> None:
    # given
    session = a_session_with_turns(admin_brain, "hello")

    # when
    with AdminClient(admin_brain) as admin:
        admin.login()
        admin.post(f"{SESSIONS}/{session['id']}/close/")
        page = admin.page(f"{SESSIONS}/{session['id']}/history/")

    # then
    assert "Closed in the admin." in page and "operator" in page


def test_a_viewer_reads_sessions_but_cannot_interrupt_or_close_them(admin_brain: BrainServer) -> None:
    # given
    create_viewer(admin_brain)
    session = a_session_with_turns(admin_brain, "hello")

    # when
    with AdminClient(admin_brain) as viewer:
        viewer.login(VIEWER, VIEWER_PASSWORD)
        page = viewer.page(f"{SESSIONS}/{session['id']}/change/")
        confirmation = viewer.get(f"{SESSIONS}/{session['id']}/close/")
        close = viewer.post(f"{SESSIONS}/{session['id']}/close/")
        interrupt = viewer.post(f"{SESSIONS}/{session['id']}/interrupt/")

    # then
    assert transcript_rows(page)[0] == ("user.message", "hello")
    assert 'class="session-close"' not in page and 'class="session-interrupt"' not in page
    assert (confirmation.status_code, close.status_code, interrupt.status_code) == (403, 403, 403)
    assert api_status(admin_brain, session["id"]) == "idle"


@pytest.mark.parametrize("suffix", ["change/", "json/", "events/", "close/", "interrupt/"])
def test_session_pages_need_a_login(admin_brain: BrainServer, suffix: str) -> None:
    # given
    session = a_session_with_turns(admin_brain)

    # when
    with AdminClient(admin_brain) as visitor:
        visitor.get("/admin/login/")  # a CSRF cookie, but no login
        read = visitor.get(f"{SESSIONS}/{session['id']}/{suffix}")
        write = visitor.post(f"{SESSIONS}/{session['id']}/{suffix}")

    # then
    assert read.status_code == write.status_code == 302
    assert read.headers["location"].startswith("/admin/login/")
    assert api_status(admin_brain, session["id"]) == "idle"


def test_a_session_of_another_server_has_no_transcript_here(admin_brain: BrainServer) -> None:
    # given: the session's files are gone from this server (as after a move)
    session = a_session_with_turns(admin_brain, "hello")
    directory = admin_brain.data_dir / "sessions" / session["id"]
    moved = directory.with_name(session["id"] + "-moved")
    directory.rename(moved)

    # when
    try:
        with AdminClient(admin_brain) as admin:
            page = admin.login().page(f"{SESSIONS}/{session['id']}/change/")
            events = admin.get(f"{SESSIONS}/{session['id']}/events/").json()
    finally:
        moved.rename(directory)

    # then
    assert "This server has no event log for the session." in page
    assert "This server has no files for the session." in page
    assert events == {"events": [], "next_cursor": ""}


def test_searching_finds_a_session_by_the_start_of_its_id(admin_brain: BrainServer) -> None:
    # given
    session = a_session_with_turns(admin_brain)
    other = a_session_with_turns(admin_brain)

    # when
    with AdminClient(admin_brain) as admin:
        page = admin.login().page(f"{SESSIONS}/?q={session['id'][:10]}")

    # then
    assert session["id"] in page and other["id"] not in page
    time.sleep(0)  # keep the shared server's sessions independent of ordering
