"""Routes of features a server is not configured for answer 422 `unsupported` after the usual
authorization and session lookup."""

from __future__ import annotations

import pytest

from tests.fixtures.server import BrainServer, create_session


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [("POST", "flush", None), ("GET", "sync", None), ("POST", "restore", {"checkpoint": "0" * 32})],
    ids=["flush_case", "sync_case", "restore_case"],
)
def test_persistence_routes_are_unsupported_without_persistence(
    brain: BrainServer, method: str, suffix: str, body: dict[str, str] | None
) -> None:
    # given
    session = create_session(brain)
    with brain.client() as alice, brain.client("charlie") as charlie:
        # when
        response = alice.request(method, f"/sessions/{session['id']}/{suffix}", json=body)
        foreign = charlie.request(method, f"/sessions/{session['id']}/{suffix}", json=body)
    # then
    assert response.status_code == 422, response.text
    assert response.json()["error"] == {
        "code": "unsupported",
        "message": "external persistence is not configured on this server",
    }
    assert foreign.status_code == 404


def test_flush_needs_a_manage_token_and_restore_a_valid_body(brain: BrainServer) -> None:
    # given
    session = create_session(brain)
    with brain.client("bob") as bob, brain.client() as alice:
        # when
        flush = bob.post(f"/sessions/{session['id']}/flush")
        restore = alice.post(f"/sessions/{session['id']}/restore", json={"checkpoint": 1})
    # then
    assert flush.status_code == 403
    assert restore.status_code == 400 and restore.json()["error"]["code"] == "invalid_request"
