"""The one session-id rule: the contract's pattern, lowercase once accepted, and the same rule
wherever a session id is taken (routes, token grants, runtime executor registration)."""

from __future__ import annotations

import json

import pytest

from foundation.session_ids import SESSION_ID_PATTERN, canonical_session_id
from tests.support.spec import spec_path


def test_the_published_session_id_pattern_is_the_specifications() -> None:
    # given
    spec = json.loads(spec_path("openapi.json").read_text())
    # when
    patterns = {
        parameter["schema"]["pattern"]
        for path in spec["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", [])
        if parameter.get("in") == "path" and parameter.get("name") == "id" and "pattern" in parameter["schema"]
    }
    # then
    assert patterns == {SESSION_ID_PATTERN}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef", id="lowercase_case"),
        pytest.param("0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcdef", id="mixed_case"),
        pytest.param("0123456789abcdef0123456789abcde", None, id="31_digits_case"),
        pytest.param("0123456789abcdef0123456789abcdef0", None, id="33_digits_case"),
        pytest.param("0123456789abcdef0123456789abcdeg", None, id="not_hex_case"),
        pytest.param("0123456789abcdef0123456789abcdef\n", None, id="trailing_newline_case"),
        pytest.param("", None, id="empty_case"),
    ],
)
def test_a_session_id_is_32_hex_digits_of_either_case_and_lowercased(value: str, expected: str | None) -> None:
    # when
    canonical = canonical_session_id(value)
    # then
    assert canonical == expected
