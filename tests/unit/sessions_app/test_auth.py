"""Bearer tokens: config mirroring, digest-only storage, header parsing, and admin-issued tokens."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.contrib.sessions.models import Session as StoredSession
from django.test import Client

from fleet_app.fleet import SoloFleet
from foundation.errors import Overloaded, Unauthorized
from foundation.hostconfig import HostConfig, parse_host_config
from sessions_app import db
from sessions_app.auth import MAX_AUTHORIZATION_CHARS, MAX_PENDING_LOOKUPS, UNKNOWN_ENTRIES, TokenCache
from sessions_app.models import ApiToken, Session, Tenant, TokenSource
from sessions_app.records import Principal, SessionRecord, SessionStatus
from tests.support.admin_client import BrainAdminClient

ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-0123456789abcdef0123"
CHARLIE_TOKEN = "charlie-token-0123456789abcdef"
SESSION_ID = "0123456789abcdef0123456789abcdef"
ISSUED_TOKEN = re.compile(r'<input id="issued-token"[^>]*? value="([0-9a-f]{64})"')
SHOWN_ONCE = "Copy this token now; it will not be shown again."

# transaction=True: the auth lookups run through database_sync_to_async, which closes connections
pytestmark = pytest.mark.django_db(transaction=True)


def _host_config() -> HostConfig:
    value = {
        "tokens": [
            {"token_env": "ALICE_TOKEN", "tenant": "acme", "manage": True},
            {"token_env": "BOB_TOKEN", "tenant": "acme", "read_only": True},
            {"token_env": "CHARLIE_TOKEN", "tenant": "globex", "session": SESSION_ID},
        ],
        "harnesses": {"pi": {"command": ["node"]}},
    }
    return parse_host_config(json.dumps(value).encode())


TOKENS = TokenCache()  # this module's cache; emptied around every test


def _authenticate(header: str | None) -> Principal:
    return async_to_sync(TOKENS.authenticate)(header)


@pytest.fixture(autouse=True)
def _empty_token_cache() -> Iterator[None]:
    TOKENS.forget()
    yield
    TOKENS.forget()


@pytest.fixture
def brain_admin(admin_user: User) -> BrainAdminClient:
    """The admin as runbrain serves it: its requests reach this module's token cache."""
    client = BrainAdminClient(SimpleNamespace(tokens=TOKENS, fleet=SoloFleet()))
    client.force_login(admin_user)
    return client


@pytest.fixture
def mirrored() -> None:
    db.mirror_config_tokens(_host_config(), [ALICE_TOKEN, BOB_TOKEN, CHARLIE_TOKEN])


@pytest.fixture
def admin_client() -> Client:
    # no password: hashing one costs more than the rest of a test
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def _add_token_in_admin(client: Client, **fields: Any) -> tuple[str, Any]:
    """POST the ApiToken add form; return the token its response shows, and the response."""
    data = {"tenant": "acme", "label": "ci", "session": "", "_save": "Save", **fields}
    response = client.post("/admin/sessions_app/apitoken/add/", data)
    assert response.status_code == 200, response.content.decode()[:2000]
    match = ISSUED_TOKEN.search(response.content.decode())
    assert match is not None, response.content.decode()[:2000]
    return match.group(1), response


def _create_session() -> None:
    db.create_session(
        SessionRecord(
            id=SESSION_ID,
            tenant="acme",
            harness="pi",
            config={"model": "openai/gpt-4.1-mini", "tools": []},
            descriptors=[],
            status=SessionStatus.IDLE,
            created_at="2026-10-15T12:00:00.000000Z",
            updated_at="2026-10-15T12:00:00.000000Z",
            checkpoint={"id": "c" * 32, "offset": 0, "time": "2026-10-15T12:00:00.000000Z"},
        )
    )


# --- config tokens --------------------------------------------------------------------------


def test_a_mirrored_config_token_is_found_by_its_digest(mirrored: None) -> None:
    # when
    principal = db.find_grant(db.digest_token(ALICE_TOKEN))

    # then
    assert principal == Principal(tenant="acme", manage=True, read_only=False, session="")


def test_mirrored_grants_keep_their_tenant_and_scope(mirrored: None) -> None:
    # when
    grants = [db.find_grant(db.digest_token(token)) for token in (ALICE_TOKEN, BOB_TOKEN, CHARLIE_TOKEN)]

    # then
    assert grants == [
        Principal(tenant="acme", manage=True),
        Principal(tenant="acme", read_only=True),
        Principal(tenant="globex", session=SESSION_ID),
    ]
    assert sorted(Tenant.objects.values_list("name", flat=True)) == ["acme", "globex"]
    assert ApiToken.objects.filter(source=TokenSource.CONFIG).count() == 3


def test_an_unknown_digest_has_no_grant(mirrored: None) -> None:
    # when
    principal = db.find_grant(db.digest_token("not-a-token-0123456789abcdef"))

    # then
    assert principal is None


def test_mirroring_again_drops_config_tokens_that_left_the_config(mirrored: None, admin_client: Client) -> None:
    # given an admin token and a config that now holds only alice's grant
    admin_token, _ = _add_token_in_admin(admin_client)
    config = parse_host_config(
        json.dumps(
            {"tokens": [{"token_env": "ALICE_TOKEN", "tenant": "acme"}], "harnesses": {"pi": {"command": ["node"]}}}
        ).encode()
    )

    # when
    db.mirror_config_tokens(config, [ALICE_TOKEN])

    # then
    assert db.find_grant(db.digest_token(ALICE_TOKEN)) == Principal(tenant="acme", manage=False)
    assert db.find_grant(db.digest_token(BOB_TOKEN)) is None
    assert db.find_grant(db.digest_token(CHARLIE_TOKEN)) is None
    assert db.find_grant(db.digest_token(admin_token)) == Principal(tenant="acme")


def test_tokens_are_stored_only_as_sha256_digests(mirrored: None, admin_client: Client) -> None:
    # given
    admin_token, _ = _add_token_in_admin(admin_client)
    tokens = [ALICE_TOKEN, BOB_TOKEN, CHARLIE_TOKEN, admin_token]

    # when
    rows = list(ApiToken.objects.values())

    # then no column of any row holds any token value
    assert len(rows) == 4
    stored = json.dumps(rows, default=str)
    assert [token for token in tokens if token in stored] == []
    assert sorted(row["digest"] for row in rows) == sorted(
        hashlib.sha256(token.encode()).hexdigest() for token in tokens
    )


# --- TokenCache.authenticate ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(f"Bearer {ALICE_TOKEN}", Principal(tenant="acme", manage=True), id="bearer_case"),
        pytest.param(f"bearer {BOB_TOKEN}", Principal(tenant="acme", read_only=True), id="lowercase_scheme_case"),
        pytest.param(
            f"BEARER {CHARLIE_TOKEN}", Principal(tenant="globex", session=SESSION_ID), id="uppercase_scheme_case"
        ),
    ],
)
def test_a_known_bearer_token_authenticates(mirrored: None, header: str, expected: Principal) -> None:
    # when
    principal = _authenticate(header)

    # then
    assert principal == expected


REJECTED_HEADERS = [
    pytest.param(None, id="missing_case"),
    pytest.param("", id="empty_case"),
    pytest.param(ALICE_TOKEN, id="no_scheme_case"),
    pytest.param(f"Basic {ALICE_TOKEN}", id="basic_scheme_case"),
    pytest.param(f"Token {ALICE_TOKEN}", id="other_scheme_case"),
    pytest.param("Bearer", id="scheme_only_case"),
    pytest.param("Bearer    ", id="blank_token_case"),
    pytest.param("Bearer not-a-known-token-0123456789", id="unknown_token_case"),
    pytest.param(f"Bearer {ALICE_TOKEN}x", id="token_with_suffix_case"),
    pytest.param("Bearer " + "a" * (MAX_AUTHORIZATION_CHARS - 6), id="over_1024_characters_case"),
]


@pytest.mark.parametrize("header", REJECTED_HEADERS)
def test_bad_authorization_headers_are_unauthorized(mirrored: None, header: str | None) -> None:
    # when
    with pytest.raises(Unauthorized) as caught:
        _authenticate(header)

    # then
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        401,
        "forbidden",
        "missing or invalid bearer token",
    )
    assert caught.value.headers() == {"WWW-Authenticate": "Bearer"}


def test_a_header_of_exactly_1024_characters_is_looked_up(mirrored: None) -> None:
    # given
    header = "Bearer " + "a" * (MAX_AUTHORIZATION_CHARS - 7)

    # when
    with pytest.raises(Unauthorized):
        _authenticate(header)

    # then it was a lookup miss, now cached
    assert len(header) == MAX_AUTHORIZATION_CHARS


def test_a_deleted_token_stops_authenticating_once_the_cache_is_forgotten(mirrored: None) -> None:
    # given a cached grant
    assert _authenticate(f"Bearer {ALICE_TOKEN}") == Principal(tenant="acme", manage=True)
    ApiToken.objects.filter(digest=db.digest_token(ALICE_TOKEN)).delete()

    # when
    TOKENS.forget()

    # then
    with pytest.raises(Unauthorized):
        _authenticate(f"Bearer {ALICE_TOKEN}")


# --- admin ----------------------------------------------------------------------------------


def test_a_token_added_in_the_admin_is_shown_once_and_authenticates_at_once(
    mirrored: None, admin_client: Client
) -> None:
    # when
    token, response = _add_token_in_admin(admin_client, manage="on")

    # then
    page = response.content.decode()
    assert (page.count(token), page.count(SHOWN_ONCE)) == (1, 1)
    assert list(get_messages(response.wsgi_request)) == []
    row = ApiToken.objects.get(source=TokenSource.ADMIN)
    assert (row.digest, row.tenant_id, row.label, row.manage, row.read_only) == (
        db.digest_token(token),
        "acme",
        "ci",
        True,
        False,
    )
    assert _authenticate(f"Bearer {token}") == Principal(tenant="acme", manage=True)


def test_the_admin_never_shows_an_issued_token_again(mirrored: None, admin_client: Client) -> None:
    # given a token the response to the add form showed
    token, _ = _add_token_in_admin(admin_client)
    row = ApiToken.objects.get(source=TokenSource.ADMIN)

    # when
    listing = admin_client.get("/admin/sessions_app/apitoken/")
    change = admin_client.get(f"/admin/sessions_app/apitoken/{row.pk}/change/")
    history = admin_client.get(f"/admin/sessions_app/apitoken/{row.pk}/history/")

    # then
    assert (listing.status_code, change.status_code, history.status_code) == (200, 200, 200)
    assert [token in page.content.decode() for page in (listing, change, history)] == [False, False, False]
    assert row.digest in change.content.decode()


def test_an_issued_token_rides_in_no_cookie_message_session_url_or_log(
    mirrored: None, admin_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    # given every logger recorded
    caplog.set_level(logging.DEBUG)

    # when
    token, response = _add_token_in_admin(admin_client)

    # then: the page that shows it is the response itself, kept by no cache
    assert response.get("Location") is None
    assert "no-store" in response["Cache-Control"]
    assert [token in cookie.OutputString() for cookie in response.cookies.values()] == [False] * len(response.cookies)
    assert list(get_messages(response.wsgi_request)) == []
    stored_sessions = [row.get_decoded() for row in StoredSession.objects.all()]
    assert len(stored_sessions) == 1
    assert token not in repr(stored_sessions)
    assert token not in repr(list(LogEntry.objects.values_list("object_repr", "change_message")))
    assert [record for record in caplog.records if token in record.getMessage()] == []
    assert ApiToken.objects.get(source=TokenSource.ADMIN).digest == db.digest_token(token)


def test_the_admin_shows_an_issued_token_once_through_the_asgi_stack(
    mirrored: None, brain_admin: BrainAdminClient
) -> None:
    # when
    data = {"tenant": "acme", "label": "ci", "session": "", "_save": "Save"}
    response = async_to_sync(brain_admin.post)("/admin/sessions_app/apitoken/add/", data)
    listing = async_to_sync(brain_admin.get)("/admin/sessions_app/apitoken/")

    # then
    match = ISSUED_TOKEN.search(response.content.decode())
    assert (response.status_code, match is not None) == (200, True), response.content.decode()[:2000]
    assert match is not None
    token = match.group(1)
    assert response["X-Frame-Options"] == "DENY"
    assert [token in cookie.OutputString() for cookie in response.cookies.values()] == [False] * len(response.cookies)
    assert token not in listing.content.decode()
    assert _authenticate(f"Bearer {token}") == Principal(tenant="acme")


def test_changing_an_admin_token_in_the_admin_takes_effect_at_once(
    mirrored: None, admin_client: Client, brain_admin: BrainAdminClient
) -> None:
    # given a cached read-write grant
    token, _ = _add_token_in_admin(admin_client)
    row = ApiToken.objects.get(source=TokenSource.ADMIN)
    assert _authenticate(f"Bearer {token}") == Principal(tenant="acme")

    # when
    response = async_to_sync(brain_admin.post)(
        f"/admin/sessions_app/apitoken/{row.pk}/change/",
        {"tenant": "acme", "label": "ci", "read_only": "on", "session": "", "_save": "Save"},
    )

    # then
    assert response.status_code == 302
    assert _authenticate(f"Bearer {token}") == Principal(tenant="acme", read_only=True)
    assert ApiToken.objects.get(pk=row.pk).digest == db.digest_token(token)


def test_deleting_an_admin_token_in_the_admin_takes_effect_at_once(
    mirrored: None, admin_client: Client, brain_admin: BrainAdminClient
) -> None:
    # given a cached grant
    token, _ = _add_token_in_admin(admin_client)
    row = ApiToken.objects.get(source=TokenSource.ADMIN)
    assert _authenticate(f"Bearer {token}") == Principal(tenant="acme")

    # when
    response = async_to_sync(brain_admin.post)(f"/admin/sessions_app/apitoken/{row.pk}/delete/", {"post": "yes"})

    # then
    assert response.status_code == 302
    assert not ApiToken.objects.filter(pk=row.pk).exists()
    with pytest.raises(Unauthorized):
        _authenticate(f"Bearer {token}")


def test_a_config_token_has_no_editable_fields_in_the_admin(mirrored: None, admin_client: Client) -> None:
    # given
    row = ApiToken.objects.get(digest=db.digest_token(ALICE_TOKEN))

    # when
    response = admin_client.get(f"/admin/sessions_app/apitoken/{row.pk}/change/")

    # then
    assert response.status_code == 200
    assert list(response.context["adminform"].form.fields) == []
    assert response.context["has_delete_permission"] is False


def test_posting_a_change_to_a_config_token_changes_nothing(mirrored: None, admin_client: Client) -> None:
    # given
    row = ApiToken.objects.get(digest=db.digest_token(BOB_TOKEN))
    before = ApiToken.objects.filter(pk=row.pk).values().get()

    # when
    admin_client.post(
        f"/admin/sessions_app/apitoken/{row.pk}/change/",
        {"tenant": "globex", "label": "hijacked", "manage": "on", "session": "", "_save": "Save"},
    )

    # then
    assert ApiToken.objects.filter(pk=row.pk).values().get() == before
    assert _authenticate(f"Bearer {BOB_TOKEN}") == Principal(tenant="acme", read_only=True)


def test_a_config_token_cannot_be_deleted_in_the_admin(mirrored: None, admin_client: Client) -> None:
    # given
    row = ApiToken.objects.get(digest=db.digest_token(ALICE_TOKEN))

    # when
    response = admin_client.post(f"/admin/sessions_app/apitoken/{row.pk}/delete/", {"post": "yes"})

    # then
    assert response.status_code == 403
    assert ApiToken.objects.filter(pk=row.pk).exists()


def test_bulk_delete_in_the_admin_refuses_a_selection_with_config_tokens(mirrored: None, admin_client: Client) -> None:
    # given an admin token next to the three config tokens, all selected
    token, _ = _add_token_in_admin(admin_client)
    selected = [str(pk) for pk in ApiToken.objects.values_list("pk", flat=True)]

    # when
    response = admin_client.post(
        "/admin/sessions_app/apitoken/",
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
    )

    # then nothing was deleted
    assert response.status_code == 403
    assert ApiToken.objects.count() == 4
    assert _authenticate(f"Bearer {token}") == Principal(tenant="acme")


def test_bulk_delete_in_the_admin_removes_admin_tokens_at_once(
    mirrored: None, admin_client: Client, brain_admin: BrainAdminClient
) -> None:
    # given two cached admin tokens
    first, _ = _add_token_in_admin(admin_client, label="one")
    second, _ = _add_token_in_admin(admin_client, label="two")
    assert _authenticate(f"Bearer {first}") == _authenticate(f"Bearer {second}") == Principal(tenant="acme")
    selected = [str(pk) for pk in ApiToken.objects.filter(source=TokenSource.ADMIN).values_list("pk", flat=True)]

    # when
    response = async_to_sync(brain_admin.post)(
        "/admin/sessions_app/apitoken/",
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
    )

    # then
    assert response.status_code == 302
    assert sorted(ApiToken.objects.values_list("source", flat=True)) == ["config", "config", "config"]
    for token in (first, second):
        with pytest.raises(Unauthorized):
            _authenticate(f"Bearer {token}")


def test_the_admin_session_list_shows_tenant_status_harness_model_and_timestamps(admin_client: Client) -> None:
    # given
    _create_session()

    # when
    response = admin_client.get("/admin/sessions_app/session/")

    # then
    html = response.content.decode()
    assert response.status_code == 200
    assert re.findall(r'<th scope="col" class="[^"]*column-(\w+)', html) == [
        "id",
        "tenant",
        "status",
        "harness",
        "model",
        "created_at",
        "updated_at",
    ]
    row = re.search(r'<tr>\s*<th class="field-id">.*?</tr>', html, re.DOTALL)
    assert row is not None
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row.group(0))]
    assert cells == [
        SESSION_ID,
        "acme",
        "idle",
        "pi",
        "openai/gpt-4.1-mini",
        "Oct. 15, 2026, noon",
        "Oct. 15, 2026, noon",
    ]
    assert Session.objects.get().model == "openai/gpt-4.1-mini"


def test_sessions_cannot_be_added_changed_or_deleted_in_the_admin(admin_client: Client) -> None:
    # given
    _create_session()

    # when
    add = admin_client.get("/admin/sessions_app/session/add/")
    change = admin_client.get(f"/admin/sessions_app/session/{SESSION_ID}/change/")
    delete = admin_client.post(f"/admin/sessions_app/session/{SESSION_ID}/delete/", {"post": "yes"})

    # then
    assert (add.status_code, change.status_code, delete.status_code) == (403, 200, 403)
    assert list(change.context["adminform"].form.fields) == []
    assert Session.objects.get().id == SESSION_ID


# --- bounds under a flood of unknown tokens -------------------------------------------------


async def _flood(tokens: TokenCache, count: int, *, batch: int = 32) -> None:
    for start in range(0, count, batch):
        outcomes = await asyncio.gather(
            *(tokens.authenticate(f"Bearer random-{n:08d}-0123456789abcdef") for n in range(start, start + batch)),
            return_exceptions=True,
        )
        assert all(isinstance(outcome, Unauthorized) for outcome in outcomes)


def test_a_flood_of_unknown_tokens_never_evicts_a_valid_grant(mirrored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # given: alice's grant cached, then her row gone from the database (so only the cache knows her);
    # the grant outlives the flood however slow the machine (eviction, not expiry, is under test)
    monkeypatch.setattr("sessions_app.auth.CACHE_SECONDS", 3600.0)
    tokens = TokenCache()
    assert async_to_sync(tokens.authenticate)(f"Bearer {ALICE_TOKEN}") == Principal(tenant="acme", manage=True)
    ApiToken.objects.filter(digest=db.digest_token(ALICE_TOKEN)).delete()

    # when: more unknown tokens than the negative cache holds
    async_to_sync(_flood)(tokens, UNKNOWN_ENTRIES + 200)

    # then: still served from the cache
    assert async_to_sync(tokens.authenticate)(f"Bearer {ALICE_TOKEN}") == Principal(tenant="acme", manage=True)


def test_an_unknown_token_is_looked_up_once_per_cache_period(mirrored: None) -> None:
    # given: a 401 for a token, which then appears in the database without the admin's notice
    tokens = TokenCache()
    token = "late-token-0123456789abcdef0123"
    with pytest.raises(Unauthorized):
        async_to_sync(tokens.authenticate)(f"Bearer {token}")
    ApiToken.objects.create(digest=db.digest_token(token), tenant_id="acme", source=TokenSource.ADMIN)

    # when / then: the second 401 came from the negative cache, not a query
    with pytest.raises(Unauthorized):
        async_to_sync(tokens.authenticate)(f"Bearer {token}")
    tokens.forget()
    assert async_to_sync(tokens.authenticate)(f"Bearer {token}") == Principal(tenant="acme")


def test_lookups_in_flight_are_bounded_and_the_rest_are_overloaded(mirrored: None) -> None:
    # given
    tokens = TokenCache()

    async def burst() -> list[BaseException | Principal]:
        headers = [f"Bearer burst-{n:04d}-0123456789abcdef0123" for n in range(MAX_PENDING_LOOKUPS + 36)]
        return await asyncio.gather(*(tokens.authenticate(header) for header in headers), return_exceptions=True)

    # when: all start before the first lookup returns
    outcomes = async_to_sync(burst)()

    # then
    assert sum(isinstance(outcome, Overloaded) for outcome in outcomes) == 36
    assert sum(isinstance(outcome, Unauthorized) for outcome in outcomes) == MAX_PENDING_LOOKUPS


# --- revocation ends the streams a token opened ----------------------------------------------


class Closer:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_an_inspection_token_ends_its_streams_when_its_call_returns() -> None:
    # given: a stream opened with an inspection token
    tokens = TokenCache()
    header = f"Bearer {tokens.grant_inspection(SESSION_ID, 'acme')}"
    stream = Closer()

    async def open_and_revoke() -> None:
        await tokens.authenticate(header)
        untrack = tokens.track_stream(header, stream)
        # when
        tokens.revoke_inspection(header.partition(" ")[2])
        untrack()  # the stream's own cleanup afterwards is harmless

    async_to_sync(open_and_revoke)()

    # then
    assert stream.calls == 1
    with pytest.raises(Unauthorized):
        async_to_sync(tokens.authenticate)(header)


def test_a_token_deleted_in_the_database_ends_its_streams_once_the_cache_is_forgotten(mirrored: None) -> None:
    # given: streams of alice and of bob; alice's token is then deleted
    tokens = TokenCache()
    alice, bob = Closer(), Closer()

    async def scenario() -> None:
        for header, stream in ((f"Bearer {ALICE_TOKEN}", alice), (f"Bearer {BOB_TOKEN}", bob)):
            await tokens.authenticate(header)
            tokens.track_stream(header, stream)
        await sync_to_async(ApiToken.objects.filter(digest=db.digest_token(ALICE_TOKEN)).delete)()
        # when: the admin's save hook, which may run on another thread
        await asyncio.to_thread(tokens.forget)
        for _ in range(100):
            if alice.calls:
                break
            await asyncio.sleep(0.01)

    async_to_sync(scenario)()

    # then
    assert (alice.calls, bob.calls) == (1, 0)
