"""The `model.request` record's rules (runners/accounting.py), case by case, without processes."""

from __future__ import annotations

from typing import Any

import pytest

from runners.accounting import check_request_record, complete_request_record
from tests.support.hostile_runner import VALID_RECORD


def _with_usage(**changes: Any) -> dict[str, Any]:
    return {**VALID_RECORD, "usage": {**VALID_RECORD["usage"], **changes}}


def test_a_valid_record_comes_back_equal_and_brain_adds_the_harness_and_the_boundary() -> None:
    # when
    record = check_request_record(VALID_RECORD)
    completed = complete_request_record(record, harness="loop", boundary="b" * 32)
    # then
    assert record == VALID_RECORD
    assert completed == {**VALID_RECORD, "harness": "loop", "boundary": "b" * 32}


def test_a_failed_request_without_usage_is_unavailable_and_needs_no_counts() -> None:
    # given
    usage = {k: v for k, v in VALID_RECORD["usage"].items() if not k.endswith("_tokens")}
    failed = {**VALID_RECORD, "state": "failed", "usage": {**usage, "availability": "unavailable"}}
    # then
    assert check_request_record(failed)["usage"] == {**usage, "availability": "unavailable"}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        pytest.param(_with_usage(output_tokens=None), "usage.output_tokens must be an integer", id="null_count_case"),
        pytest.param({**VALID_RECORD, "attempts": "0/3"}, "attempts is not a valid value", id="no_attempt_case"),
        pytest.param({**VALID_RECORD, "attempts": "1/300"}, "attempts must be <made>/<allowed>", id="too_many_case"),
        pytest.param({**VALID_RECORD, "purpose": "Turn"}, "purpose must be one of", id="purpose_case"),
        pytest.param({**VALID_RECORD, "provider": "Open AI"}, "provider is not a valid value", id="provider_case"),
        pytest.param({**VALID_RECORD, "model": "gpt 4"}, "model is not a valid value", id="model_space_case"),
        pytest.param({**VALID_RECORD, "model": "m\n"}, "model is not a valid value", id="model_newline_case"),
        pytest.param(
            {**VALID_RECORD, "unmeasured": ["cache_write_tokens", "cache_write_tokens"]},
            "unmeasured must name distinct usage counts",
            id="duplicate_unmeasured_case",
        ),
        pytest.param(
            {**VALID_RECORD, "unmeasured": "cache_write_tokens"},
            "unmeasured must be a list of usage count names",
            id="unmeasured_string_case",
        ),
        pytest.param(
            _with_usage(input_cache="unreported"),
            "input_cache 'unreported' needs both cache counts in unmeasured",
            id="unreported_cache_case",
        ),
        pytest.param(
            {**VALID_RECORD, "state": "completed", "usage": {**VALID_RECORD["usage"], "availability": "partial"}}
            | {"unmeasured": ["cache_write_tokens"]},
            "usage.availability must be 'reported' for the counts present",
            id="partial_claimed_case",
        ),
        pytest.param(
            {**VALID_RECORD, "provider_request_id": "x" * 257},
            "provider_request_id is not a valid value",
            id="long_provider_id_case",
        ),
    ],
)
def test_a_record_outside_the_rules_is_refused_with_a_short_reason(record: dict[str, Any], reason: str) -> None:
    # when
    with pytest.raises(ValueError, match="^" + reason.replace("(", r"\(")) as refused:
        check_request_record(record)
    # then
    assert len(str(refused.value)) < 120
