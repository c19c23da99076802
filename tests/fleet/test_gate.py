"""fleet_app.gate with the real token cache: an inspection token another instance of the fleet
granted passes (sealed for its session) for the owner to decide; it names no other session, and
an unknown or missing token is the owner's 401."""

from __future__ import annotations

import secrets

import pytest

from fleet_app.gate import authenticate_caller
from foundation.errors import Unauthorized
from foundation.inspection import inspection_key
from sessions_app.auth import TokenCache

FLEET_KEY = secrets.token_bytes(32)
SESSION_ID = secrets.token_hex(16)


def _scope(header: bytes | None) -> dict[str, object]:
    return {"headers": [(b"authorization", header)] if header is not None else []}


@pytest.mark.django_db(transaction=True)  # the unknown token is looked up in the tokens table
async def test_an_inspection_token_granted_on_another_instance_passes_for_its_session_only() -> None:
    # given: the owner's token cache granted it; this instance's cache knows nothing of it
    token = TokenCache(inspection_key=inspection_key(FLEET_KEY)).grant_inspection(SESSION_ID, "acme")
    here = TokenCache(inspection_key=inspection_key(FLEET_KEY))
    header = f"Bearer {token}".encode()
    # when / then
    assert await authenticate_caller(here, _scope(header), SESSION_ID, key=FLEET_KEY) == ("inspection", SESSION_ID)
    with pytest.raises(Unauthorized):
        await authenticate_caller(here, _scope(header), secrets.token_hex(16), key=FLEET_KEY)
    with pytest.raises(Unauthorized):
        await authenticate_caller(here, _scope(header), SESSION_ID, key=secrets.token_bytes(32))


@pytest.mark.parametrize(
    "header", [None, b"Basic YWxpY2U6c2VjcmV0", b"Bearer "], ids=["missing_case", "basic_case", "empty_case"]
)
async def test_a_missing_or_malformed_token_is_the_owners_401(header: bytes | None) -> None:
    with pytest.raises(Unauthorized, match="missing or invalid bearer token"):
        await authenticate_caller(TokenCache(), _scope(header), SESSION_ID, key=FLEET_KEY)
