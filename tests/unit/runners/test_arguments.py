"""Tool-call arguments as a model streams them: decoded under the frame rules, never dropped."""

from __future__ import annotations

from typing import Any

import pytest

from runners.loop.providers.base import parse_arguments


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param('{"city":"Paris","days":3}', {"city": "Paris", "days": 3}, id="object_case"),
        pytest.param("", {}, id="empty_case"),
        pytest.param("  \n", {}, id="blank_case"),
        pytest.param("[1,2]", {"_value": [1, 2]}, id="not_an_object_case"),
        pytest.param('{"city":', {"_raw_arguments": '{"city":'}, id="broken_json_case"),
        pytest.param('{"n":NaN}', {"_raw_arguments": '{"n":NaN}'}, id="nan_case"),
        pytest.param(
            '{"n":18446744073709551616}', {"_raw_arguments": '{"n":18446744073709551616}'}, id="above_uint64_case"
        ),
        pytest.param('{"s":"\\ud800"}', {"_raw_arguments": '{"s":"\\ud800"}'}, id="lone_surrogate_case"),
        pytest.param('{"n":18446744073709551615}', {"n": 2**64 - 1}, id="uint64_max_case"),
    ],
)
def test_arguments_that_no_frame_could_carry_are_wrapped_not_dropped(raw: str, expected: dict[str, Any]) -> None:
    # when
    arguments = parse_arguments(raw)

    # then
    assert arguments == expected
