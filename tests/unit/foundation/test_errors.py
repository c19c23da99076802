"""The error tree: one class per spec code, with its HTTP status and headers (reference-errors)."""

from __future__ import annotations

import pytest

from foundation.errors import (
    BrainError,
    Conflict,
    CursorUnavailable,
    Forbidden,
    InvalidRequest,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    Unsupported,
)


@pytest.mark.parametrize(
    ("error", "code", "status", "headers"),
    [
        pytest.param(BrainError, "brain_error", 500, {}, id="brain_error_case"),
        pytest.param(InvalidRequest, "invalid_request", 400, {}, id="invalid_request_case"),
        pytest.param(PayloadTooLarge, "invalid_request", 413, {}, id="payload_too_large_case"),
        pytest.param(Unauthorized, "forbidden", 401, {"WWW-Authenticate": "Bearer"}, id="unauthorized_case"),
        pytest.param(Forbidden, "forbidden", 403, {}, id="forbidden_case"),
        pytest.param(NotFound, "not_found", 404, {}, id="not_found_case"),
        pytest.param(Conflict, "conflict", 409, {}, id="conflict_case"),
        pytest.param(CursorUnavailable, "cursor_unavailable", 409, {}, id="cursor_unavailable_case"),
        pytest.param(Unsupported, "unsupported", 422, {}, id="unsupported_case"),
        pytest.param(Overloaded, "overloaded", 429, {"Retry-After": "1"}, id="overloaded_case"),
    ],
)
def test_each_error_carries_its_spec_code_status_and_headers(
    error: type[BrainError], code: str, status: int, headers: dict[str, str]
) -> None:
    # when
    raised = error("details")

    # then
    assert (raised.code, raised.status, raised.headers(), raised.message, str(raised)) == (
        code,
        status,
        headers,
        "details",
        "details",
    )
    assert isinstance(raised, BrainError)


def test_a_payload_too_large_is_an_invalid_request() -> None:
    # then
    assert issubclass(PayloadTooLarge, InvalidRequest)


def test_the_default_message_is_generic() -> None:
    # when
    raised = BrainError()

    # then
    assert raised.message == "internal server error"
