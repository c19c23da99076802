"""RFC 3339 times as the server writes them: UTC, microseconds, a `Z` suffix
(`2026-01-02T03:04:05.000006Z`). Events, session rows, approvals and archive manifests all use
this one format; no Django, no app."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["TIME_FORMAT", "format_time", "now_rfc3339", "parse_time"]

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime(TIME_FORMAT)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime(TIME_FORMAT)


def parse_time(value: str) -> datetime:
    """The aware UTC datetime of a time this module wrote; ValueError for any other text."""
    return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC)
