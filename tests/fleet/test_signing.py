"""Signed instance-to-instance requests: accepted once from a peer, refused when altered,
misdirected, stale or replayed."""

from __future__ import annotations

from typing import Any

import pytest

from fleet_app.signing import (
    FleetAuthError,
    ReplayGuard,
    honoured_headers,
    receiver_identity,
    sign_request,
    verify_request,
)

SECRET = b"k" * 32
NOW = 1_800_000_000.0
NONCE = "0123456789abcdef0123456789abcdef"
TARGET = b"/sessions/0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f/events?after=abc"
HEADERS = {
    "authorization": "Bearer tok-1234567890abcdefghijkl",
    "accept": "text/event-stream",
    "last-event-id": "eyJvIjoxMjgsImkiOiI4ZjE0In0",
    "brain-fleet-client": "203.0.113.7",
}


def signed(**overrides: Any) -> dict[str, str]:
    fields: dict[str, Any] = {
        "sender": "brain-b",
        "target_instance": "brain-a",
        "method": "GET",
        "target": TARGET,
        "body": b"",
        "headers": HEADERS,
        "now": NOW,
        "nonce": NONCE,
    }
    fields.update(overrides)
    return {**fields["headers"], **sign_request(SECRET, **fields)}


def verify(headers: dict[str, str], guard: ReplayGuard, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "receiver": "brain-a",
        "method": "GET",
        "target": TARGET,
        "body": b"",
        "headers": headers,
        "now": NOW,
        "replay": guard,
    }
    fields.update(overrides)
    secret = fields.pop("secret", SECRET)
    return str(verify_request(secret, **fields))


def test_a_signed_request_is_accepted_once_and_names_its_sender() -> None:
    # given
    guard = ReplayGuard()
    headers = signed()
    # when
    sender = verify(headers, guard)
    # then
    assert sender == "brain-b"
    assert sorted(name for name in headers if name.startswith("brain-fleet-") and name != "brain-fleet-client") == [
        "brain-fleet-instance",
        "brain-fleet-nonce",
        "brain-fleet-signature",
        "brain-fleet-time",
    ]
    assert headers["brain-fleet-time"] == "1800000000"
    assert len(guard) == 1


def test_header_names_are_matched_without_case() -> None:
    # given
    headers = {name.title(): value for name, value in signed().items()}
    # when / then
    assert verify(headers, ReplayGuard()) == "brain-b"


@pytest.mark.parametrize(
    ("alteration"),
    [
        {"method": "POST"},
        {"target": b"/sessions/0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f/events?after=abd"},
        {"target": b"/sessions/1f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f/events?after=abc"},
        {"body": b"{}"},
        {"receiver": "brain-c"},
        {"secret": b"j" * 32},
    ],
    ids=["method_case", "query_case", "path_case", "body_case", "other_receiver_case", "other_secret_case"],
)
def test_a_request_altered_or_sent_elsewhere_is_refused(alteration: dict[str, Any]) -> None:
    # given
    guard = ReplayGuard()
    # when
    with pytest.raises(FleetAuthError) as refused:
        verify(signed(), guard, **alteration)
    # then
    assert refused.value.reason == "bad fleet signature"
    assert len(guard) == 0  # a forged request leaves nothing behind


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("authorization", "Bearer another-token-abcdefghijkl"),
        ("last-event-id", "eyJvIjowLCJpIjoiMCJ9"),
        ("brain-fleet-client", "198.51.100.1"),
        ("accept", "application/json"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("brain-fleet-instance", "brain-c"),
        ("brain-fleet-time", "1800000001"),
        ("brain-fleet-nonce", "f123456789abcdef0123456789abcdef"),
    ],
    ids=[
        "authorization_case",
        "last_event_id_case",
        "client_case",
        "accept_case",
        "added_trace_case",
        "sender_case",
        "time_case",
        "nonce_case",
    ],
)
def test_an_altered_or_added_header_is_refused(name: str, value: str) -> None:
    # given
    headers = {**signed(), name: value}
    # when
    with pytest.raises(FleetAuthError) as refused:
        verify(headers, ReplayGuard())
    # then
    assert refused.value.reason == "bad fleet signature"


def test_a_replayed_request_is_refused_within_the_window_and_after_it() -> None:
    # given
    guard = ReplayGuard(window_seconds=30)
    headers = signed()
    assert verify(headers, guard) == "brain-b"
    # when
    with pytest.raises(FleetAuthError) as replayed:
        verify(headers, guard, now=NOW + 29)
    with pytest.raises(FleetAuthError) as late:
        verify(headers, guard, now=NOW + 31)
    # then
    assert replayed.value.reason == "replayed nonce"
    assert late.value.reason == "fleet request outside the replay window"


@pytest.mark.parametrize("skew", [-31.0, 31.0], ids=["stale_case", "future_case"])
def test_a_request_outside_the_window_is_refused(skew: float) -> None:
    # given
    guard = ReplayGuard(window_seconds=30)
    # when
    with pytest.raises(FleetAuthError) as refused:
        verify(signed(now=NOW + skew), guard)
    # then
    assert refused.value.reason == "fleet request outside the replay window"
    assert len(guard) == 0


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing fleet signature headers"),
        ({"brain-fleet-signature": ""}, "missing fleet signature headers"),
        ({"brain-fleet-time": "１８００000000"}, "malformed fleet timestamp"),
        ({"brain-fleet-time": "9" * 13}, "malformed fleet timestamp"),
        ({"brain-fleet-time": "-1"}, "malformed fleet timestamp"),
        ({"brain-fleet-nonce": "XYZ"}, "malformed fleet signature"),
        ({"brain-fleet-signature": "v2=" + "0" * 64}, "malformed fleet signature"),
        ({"brain-fleet-signature": "v1=" + "0" * 63}, "malformed fleet signature"),
    ],
    ids=[
        "unsigned_case",
        "empty_signature_case",
        "fullwidth_digits_case",
        "long_time_case",
        "negative_time_case",
        "bad_nonce_case",
        "unknown_version_case",
        "short_signature_case",
    ],
)
def test_a_malformed_signature_is_refused(headers: dict[str, str], reason: str) -> None:
    # given
    sent = signed() if headers else dict(HEADERS)
    sent.update(headers)
    # when
    with pytest.raises(FleetAuthError) as refused:
        verify(sent, ReplayGuard())
    # then
    assert refused.value.reason == reason


def test_a_full_guard_refuses_new_requests_until_old_nonces_age_out() -> None:
    # given: room for two nonces
    guard = ReplayGuard(window_seconds=30, capacity=2)
    nonces = [f"{index:032x}" for index in range(4)]
    verify(signed(nonce=nonces[0]), guard)
    verify(signed(nonce=nonces[1]), guard)
    # when
    with pytest.raises(FleetAuthError) as full:
        verify(signed(nonce=nonces[2]), guard)
    later = NOW + 61  # both remembered nonces are past twice the window
    accepted = verify(signed(nonce=nonces[3], now=later), guard, now=later)
    # then
    assert full.value.reason == "too many fleet requests in the replay window"
    assert accepted == "brain-b"
    assert len(guard) == 1


def test_a_request_signed_for_one_process_is_refused_by_the_next_process_of_its_name() -> None:
    # given: a request signed for brain-a's process before a restart
    headers = signed(target_instance=receiver_identity("brain-a", "1" * 32))
    # when / then: the process after the restart (a fresh replay memory) refuses it
    with pytest.raises(FleetAuthError) as refused:
        verify(headers, ReplayGuard(), receiver=receiver_identity("brain-a", "2" * 32))
    assert refused.value.reason == "bad fleet signature"
    assert verify(headers, ReplayGuard(), receiver=receiver_identity("brain-a", "1" * 32)) == "brain-b"


def test_only_the_signed_headers_are_honoured() -> None:
    # given: the signed headers, a signature, and unsigned extras
    headers = {**signed(), "x-csrftoken": "stolen", "x-forwarded-proto": "https", "accept-encoding": "gzip"}
    # when
    honoured = honoured_headers(headers, host="10.0.0.1:8080", body=b"{}")
    # then
    assert honoured == [
        (b"host", b"10.0.0.1:8080"),
        (b"content-length", b"2"),
        (b"authorization", HEADERS["authorization"].encode()),
        (b"accept", b"text/event-stream"),
        (b"last-event-id", HEADERS["last-event-id"].encode()),
        (b"brain-fleet-client", b"203.0.113.7"),
    ]


def test_a_cookie_added_after_signing_is_refused_since_the_admins_cookies_are_signed() -> None:
    # given: a signed request without cookies, and the same request with one added on the way
    added = {**signed(), "cookie": "sessionid=stolen"}
    changed = {**signed(headers={**HEADERS, "cookie": "sessionid=mine"}), "cookie": "sessionid=stolen"}
    # when / then
    with pytest.raises(FleetAuthError):
        verify(added, ReplayGuard())
    with pytest.raises(FleetAuthError):
        verify(changed, ReplayGuard())
    assert verify(signed(headers={**HEADERS, "cookie": "sessionid=mine"}), ReplayGuard()) == "brain-b"
