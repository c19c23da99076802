"""The session id, one rule for every layer: 32 hexadecimal digits in either case, the pattern
the contract publishes for every `id` path parameter, and lowercase once accepted (the form
rows, storage keys, leases and token limits hold and compare)."""

from __future__ import annotations

import re

__all__ = ["SESSION_ID", "SESSION_ID_PATTERN", "canonical_session_id"]

SESSION_ID_PATTERN = "^[a-fA-F0-9]{32}$"  # openapi.json, the `id` path parameter of every session route
SESSION_ID = re.compile(SESSION_ID_PATTERN)


def canonical_session_id(value: str) -> str | None:
    """`value` lowercased when it is a session id; None when it is not one (a trailing newline
    included: the whole text must match)."""
    return value.lower() if SESSION_ID.fullmatch(value) else None
