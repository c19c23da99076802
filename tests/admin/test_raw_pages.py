"""The admin outside runbrain (Django's test client): raw JSON of events.jsonl in bounded pages,
the transcript, and no runtime to ask."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from sessions_app import admin as sessions_admin
from sessions_app import db
from sessions_app.eventlog import Event, EventLog
from sessions_app.models import Tenant
from sessions_app.records import SessionRecord, SessionStatus

SESSION_ID = "5" * 32
TIME = "2026-10-15T12:00:00.000000Z"


@pytest.fixture
def session_log(settings: pytest.FixtureRequest, tmp_path: Path) -> EventLog:
    """A session row, and its events.jsonl where the admin finds it outside runbrain (DATA_DIR)."""
    settings.DATA_DIR = tmp_path  # type: ignore[attr-defined]  # pytest-django's settings fixture
    Tenant.objects.create(name="acme")
    db.create_session(
        SessionRecord(
            id=SESSION_ID,
            tenant="acme",
            harness="instant",
            config={"model": "openai/m", "tools": []},
            descriptors=[],
            status=SessionStatus.IDLE,
            created_at=TIME,
            updated_at=TIME,
            checkpoint={"id": "c" * 32, "offset": 0, "time": TIME},
        )
    )
    directory = tmp_path / "sessions" / SESSION_ID
    directory.mkdir(parents=True)
    return EventLog(directory / "events.jsonl", max_bytes=1 << 30)


@pytest.mark.django_db
def test_a_raw_page_stops_after_its_byte_budget(
    admin_client: Client, session_log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: five events of about 10 KB and a budget of two and a half
    events = [session_log.append(Event.build("assistant.message", {"text": "t" * 10_000})) for _ in range(5)]
    monkeypatch.setattr(sessions_admin, "RAW_PAGE_BYTES", len(events[0].line) * 5 // 2)

    # when
    first = admin_client.get(f"/admin/sessions_app/session/{SESSION_ID}/events/").json()
    second = admin_client.get(
        f"/admin/sessions_app/session/{SESSION_ID}/events/", {"after": first["next_cursor"]}
    ).json()

    # then
    assert [event["id"] for event in first["events"]] == [event.id for event in events[:3]]
    assert [event["id"] for event in second["events"]] == [event.id for event in events[3:]]
    assert second["next_cursor"] == events[-1].cursor


@pytest.mark.django_db
def test_a_raw_event_at_a_cursor_is_that_one_event(admin_client: Client, session_log: EventLog) -> None:
    # given
    events = [session_log.append(Event.build("user.message", {"text": f"m{n}"})) for n in range(3)]

    # when
    page = admin_client.get(f"/admin/sessions_app/session/{SESSION_ID}/events/", {"at": events[1].cursor}).json()
    wrong = admin_client.get(f"/admin/sessions_app/session/{SESSION_ID}/events/", {"at": events[1].cursor[:-2]})

    # then
    assert page == {"events": [events[1].as_dict()], "next_cursor": events[1].cursor}
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "cursor_unavailable"


@pytest.mark.django_db
def test_the_session_page_reads_the_transcript_outside_runbrain_too(
    admin_client: Client, session_log: EventLog
) -> None:
    # given
    session_log.append(Event.build("user.message", {"type": "user.message", "text": "hello there"}))

    # when
    response = admin_client.get(f"/admin/sessions_app/session/{SESSION_ID}/change/")

    # then
    assert response.status_code == 200
    assert [entry.text for entry in response.context["transcript"].entries] == ["hello there"]
    assert 'class="session-close"' in response.content.decode()  # offered; the runtime answers on POST


@pytest.mark.django_db
def test_an_id_that_is_no_session_is_not_found(admin_client: Client, session_log: EventLog) -> None:
    # when
    responses = [
        admin_client.get(f"/admin/sessions_app/session/{'6' * 32}/{suffix}/") for suffix in ("json", "events", "close")
    ]

    # then
    assert [response.status_code for response in responses] == [404, 404, 404]


@pytest.mark.django_db
def test_without_a_runtime_in_the_request_a_close_changes_nothing(admin_client: Client, session_log: EventLog) -> None:
    # when: a request that did not come through runbrain's ASGI entry
    response = admin_client.post(f"/admin/sessions_app/session/{SESSION_ID}/close/", follow=True)

    # then
    assert "The session runtime is not reachable from this request." in response.content.decode()
    assert db.get_session_by_id(SESSION_ID).status == "idle"  # type: ignore[union-attr]
    assert not session_log.path.exists()  # no event was appended
