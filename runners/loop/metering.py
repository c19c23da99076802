"""What one model request cost and how it went: the `model.request` record the loop reports.

A `RequestMeter` lives as long as one `Provider.generate` call. The transport names its usage
profile first (`expect`: which wire's counts, how they relate, which it never reports) and then
reports counts as they arrive (`report`, the latest report wins). HTTP attempts and the provider's
request-id header are counted by hooks on the shared httpx client (`count_attempt`,
`note_response`), which find the meter of the request in flight through a context variable, so
the SDKs' own retries are seen; Bedrock (boto3, not httpx) sets both from its response metadata.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runners.accounting import COUNT_FIELDS, MAX_TOKENS, RequestRecord, RequestUsage

if TYPE_CHECKING:
    import httpx

__all__ = ["CURRENT_METER", "RequestMeter", "UsageProfile", "count_attempt", "note_response", "token_count"]

# Response headers that carry the provider's id of a request: OpenAI and Azure, Anthropic.
REQUEST_ID_HEADERS = ("x-request-id", "request-id")
# What a provider may send as its request id: printable ASCII without spaces (anything else is left out).
_PROVIDER_ID = re.compile(r"[\x21-\x7e]{1,256}")

CURRENT_METER: ContextVar[RequestMeter | None] = ContextVar("current_meter", default=None)


@dataclass(frozen=True, slots=True)
class UsageProfile:
    """How one wire reports usage (runners/accounting.py defines the vocabulary)."""

    semantics: str
    input_cache: str
    output_reasoning: str
    unmeasured: tuple[str, ...]  # counts the wire never carries


@dataclass(slots=True)
class RequestMeter:
    allowed_attempts: int
    attempts: int = 0
    provider_request_id: str | None = None
    profile: UsageProfile | None = None
    counts: dict[str, int] = field(default_factory=dict)
    unreported: set[str] = field(default_factory=set)  # counts this response left out

    def expect(self, profile: UsageProfile) -> None:
        self.profile = profile

    def report(self, counts: dict[str, int | None], *, unreported: tuple[str, ...] = ()) -> None:
        """The usage as the provider has reported it so far; None counts were not reported."""
        self.counts = {name: value for name, value in counts.items() if value is not None}
        self.unreported = set(unreported) | {name for name, value in counts.items() if value is None}

    def note_provider_id(self, value: object) -> None:
        if isinstance(value, str) and _PROVIDER_ID.fullmatch(value):
            self.provider_request_id = value

    def record(self, *, purpose: str, state: str, provider: str, model: str) -> RequestRecord | None:
        """The runner's `model.request` data; None when no attempt reached the wire."""
        profile = self.profile
        if profile is None or self.attempts == 0:
            return None
        unmeasured = [
            name
            for name in COUNT_FIELDS
            if name in profile.unmeasured or (name in self.unreported and name not in self.counts)
        ]
        counts = {name: value for name, value in self.counts.items() if name not in unmeasured}
        expected = [name for name in COUNT_FIELDS if name not in unmeasured]
        if state == "completed" and any(name not in counts for name in expected):
            counts = {}  # a completed request's usage is whole or absent (the final report never came)
        present = [name for name in expected if name in counts]
        availability = "reported" if present == expected else "unavailable" if not present else "partial"
        usage: RequestUsage = {
            "availability": availability,
            "semantics": profile.semantics,
            "input_cache": profile.input_cache,
            "output_reasoning": profile.output_reasoning,
        }
        for name in COUNT_FIELDS:
            if name in counts:
                usage[name] = counts[name]  # type: ignore[literal-required]  # name is one of COUNT_FIELDS
        record: RequestRecord = {
            "request_id": uuid.uuid4().hex,
            "purpose": purpose,
            "state": state,
            "provider": provider,
            "model": model,
            "attempts": f"{min(self.attempts, self.allowed_attempts)}/{self.allowed_attempts}",
            "usage": usage,
        }
        if self.provider_request_id is not None:
            record["provider_request_id"] = self.provider_request_id
        if unmeasured:
            record["unmeasured"] = unmeasured
        return record


def token_count(value: object) -> int | None:
    """A provider's count as reported, or None when it is absent or not a usable count."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


async def count_attempt(request: httpx.Request) -> None:
    """httpx request hook: one more HTTP attempt of the request in flight in this task."""
    meter = CURRENT_METER.get()
    if meter is not None:
        meter.attempts += 1


async def note_response(response: httpx.Response) -> None:
    """httpx response hook: the provider's request id of the latest attempt."""
    meter = CURRENT_METER.get()
    if meter is not None:
        for name in REQUEST_ID_HEADERS:
            if name in response.headers:
                meter.note_provider_id(response.headers[name])
                return
