"""The `model.request` runner event: one record per model request a harness made, and its checks.

A runner sends the record without `harness` and `boundary`; Brain checks it (`check_request_record`,
exact types, bounded sizes, closed vocabularies, no other fields) and adds both
(`complete_request_record`) before it is appended to the session's log. The shape is aex-brain
2.3.0's `ModelRequest` / `ModelUsage`. Stdlib only: runners import this.

    usage counts      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens
    unmeasured        the counts the provider does not report for this request (never present in usage)
    availability      "reported"     every count not named in unmeasured is present
                      "partial"      some counts arrived, the rest never will (the request failed or
                                     was interrupted after the provider reported part of its usage)
                      "unavailable"  no count arrived
    input_cache       "included"     input_tokens counts the cached tokens (read and written) too
                      "separate"     input_tokens counts only uncached input; the cache counts come on top
                      "unreported"   the provider says nothing about caching (both cache counts unmeasured)
    output_reasoning  "included"     output_tokens counts the reasoning tokens too
                      "separate"     reasoning_tokens come on top of output_tokens
                      "unreported"   the provider says nothing about reasoning (reasoning_tokens unmeasured)
"""

from __future__ import annotations

import re
from typing import NotRequired, TypedDict

__all__ = [
    "AVAILABILITIES",
    "COUNT_FIELDS",
    "MODEL_REQUEST",
    "PURPOSES",
    "RELATIONS",
    "STATES",
    "RequestRecord",
    "RequestUsage",
    "check_request_record",
    "complete_request_record",
]

MODEL_REQUEST = "model.request"  # the runner event and the retained event type
# What the request was for: a generation of the agent loop answering the turn's input (after the
# user's text, a tool result or a steer), summarising older turns, or anything else a harness asks.
PURPOSES = frozenset({"turn", "compaction", "other"})
# How the request ended: a whole response arrived; the provider refused it or the stream broke
# (after any retries); the turn was interrupted while it was in flight.
STATES = frozenset({"completed", "failed", "interrupted"})
AVAILABILITIES = frozenset({"reported", "partial", "unavailable"})
RELATIONS = frozenset({"included", "separate", "unreported"})  # input_cache and output_reasoning
COUNT_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
# Counts above 2**53 - 1 would lose precision in JavaScript clients; no request comes near it.
MAX_TOKENS = (1 << 53) - 1
# At most this many HTTP attempts per request: far above any harness's retry budget.
MAX_ATTEMPTS = 100
# Ids a harness or provider gives: letters, digits and `._:-`; longer ids are refused, not cut.
_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
# A provider's name as the model catalog spells it (`openai`, `amazon-bedrock`).
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9._\-]{0,63}")
# A model id or a provider's request id: printable ASCII without spaces.
_PRINTABLE = re.compile(r"[\x21-\x7e]{1,256}")
# The wire whose usage fields were mapped (`openai-responses`, `bedrock-converse-stream`, ...).
_SEMANTICS = re.compile(r"[a-z0-9][a-z0-9.\-]{0,63}")
# "<made>/<allowed>": HTTP attempts sent for this request, and the most the harness would send.
_ATTEMPTS = re.compile(r"([1-9][0-9]{0,2})/([1-9][0-9]{0,2})")
_RUNNER_FIELDS = frozenset(
    {"request_id", "attempt_id", "purpose", "state", "provider", "model", "attempts"}
    | {"provider_request_id", "unmeasured", "usage"}
)
_USAGE_FIELDS = frozenset({"availability", "semantics", "input_cache", "output_reasoning", *COUNT_FIELDS})


class RequestUsage(TypedDict):
    availability: str
    semantics: str
    input_tokens: NotRequired[int]
    output_tokens: NotRequired[int]
    cache_read_tokens: NotRequired[int]
    cache_write_tokens: NotRequired[int]
    reasoning_tokens: NotRequired[int]
    input_cache: str
    output_reasoning: str


class RequestRecord(TypedDict):
    """`model.request` data (2.3.0 `ModelRequest`); `harness` and `boundary` are Brain's to add."""

    request_id: str
    attempt_id: NotRequired[str]
    purpose: str
    boundary: NotRequired[str]
    unmeasured: NotRequired[list[str]]
    state: str
    harness: NotRequired[str]
    provider: str
    model: str
    provider_request_id: NotRequired[str]
    attempts: str
    usage: RequestUsage


def _string(record: dict[str, object], name: str, pattern: re.Pattern[str] | frozenset[str]) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    if isinstance(pattern, frozenset):
        if value not in pattern:
            raise ValueError(f"{name} must be one of {', '.join(sorted(pattern))}")
    elif len(value) > 256 or not pattern.fullmatch(value):
        raise ValueError(f"{name} is not a valid value")
    return value


def _usage(value: object, unmeasured: list[str]) -> RequestUsage:
    if not isinstance(value, dict):
        raise ValueError("usage must be an object")
    unknown = value.keys() - _USAGE_FIELDS
    if unknown:
        raise ValueError(f"unknown usage field {sorted(unknown, key=str)[0][:64]!r}")
    usage: RequestUsage = {
        "availability": _string(value, "availability", AVAILABILITIES),
        "semantics": _string(value, "semantics", _SEMANTICS),
        "input_cache": _string(value, "input_cache", RELATIONS),
        "output_reasoning": _string(value, "output_reasoning", RELATIONS),
    }
    present = []
    for name in COUNT_FIELDS:
        if name not in value:
            continue
        count = value[name]
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_TOKENS:
            raise ValueError(f"usage.{name} must be an integer from 0 to {MAX_TOKENS}")
        if name in unmeasured:
            raise ValueError(f"usage.{name} is named in unmeasured")
        usage[name] = count  # type: ignore[literal-required]  # name is one of COUNT_FIELDS
        present.append(name)
    expected = [name for name in COUNT_FIELDS if name not in unmeasured]
    availability = "reported" if present == expected else "unavailable" if not present else "partial"
    if usage["availability"] != availability:
        raise ValueError(f"usage.availability must be {availability!r} for the counts present")
    if usage["input_cache"] == "unreported" and not {"cache_read_tokens", "cache_write_tokens"} <= set(unmeasured):
        raise ValueError("input_cache 'unreported' needs both cache counts in unmeasured")
    if usage["output_reasoning"] == "unreported" and "reasoning_tokens" not in unmeasured:
        raise ValueError("output_reasoning 'unreported' needs reasoning_tokens in unmeasured")
    return usage


def check_request_record(value: object) -> RequestRecord:
    """A runner's `model.request` data, rebuilt from its checked fields; ValueError (a short
    reason, never echoing a long value) for anything else."""
    if not isinstance(value, dict):
        raise ValueError("data must be an object")
    unknown = value.keys() - _RUNNER_FIELDS
    if unknown:
        raise ValueError(f"unknown field {sorted(unknown, key=str)[0][:64]!r}")
    raw_unmeasured = value.get("unmeasured", [])
    if not isinstance(raw_unmeasured, list) or len(raw_unmeasured) > len(COUNT_FIELDS):
        raise ValueError("unmeasured must be a list of usage count names")
    if any(name not in COUNT_FIELDS for name in raw_unmeasured) or len(set(raw_unmeasured)) != len(raw_unmeasured):
        raise ValueError("unmeasured must name distinct usage counts")
    unmeasured: list[str] = [name for name in COUNT_FIELDS if name in raw_unmeasured]
    attempts = _string(value, "attempts", _ATTEMPTS)
    made, allowed = (int(part) for part in attempts.split("/"))
    if made > allowed or allowed > MAX_ATTEMPTS:
        raise ValueError(f"attempts must be <made>/<allowed> with made <= allowed <= {MAX_ATTEMPTS}")
    record: RequestRecord = {
        "request_id": _string(value, "request_id", _ID),
        "purpose": _string(value, "purpose", PURPOSES),
        "state": _string(value, "state", STATES),
        "provider": _string(value, "provider", _PROVIDER),
        "model": _string(value, "model", _PRINTABLE),
        "attempts": attempts,
        "usage": _usage(value.get("usage"), unmeasured),
    }
    if "attempt_id" in value:
        record["attempt_id"] = _string(value, "attempt_id", _ID)
    if "provider_request_id" in value:
        record["provider_request_id"] = _string(value, "provider_request_id", _PRINTABLE)
    if unmeasured:
        record["unmeasured"] = unmeasured
    if record["state"] == "completed" and record["usage"]["availability"] == "partial":
        raise ValueError("a completed request's usage is reported or unavailable, never partial")
    return record


def complete_request_record(record: RequestRecord, *, harness: str, boundary: str) -> RequestRecord:
    """The record as Brain retains it: the session's harness and the turn's input id added."""
    completed: RequestRecord = {
        "request_id": record["request_id"],
        "purpose": record["purpose"],
        "boundary": boundary,
        "state": record["state"],
        "harness": harness,
        "provider": record["provider"],
        "model": record["model"],
        "attempts": record["attempts"],
        "usage": record["usage"],
    }
    for name in ("attempt_id", "provider_request_id", "unmeasured"):
        if name in record:
            completed[name] = record[name]
    return completed
