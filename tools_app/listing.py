"""How the admin's lists show long values: every list fits a 1280 px window beside the
navigation sidebar, so a title, an error or a URL is cut to a few dozen characters there."""

from __future__ import annotations

__all__ = ["MAX_LISTED_NAME", "MAX_LISTED_TEXT", "cut"]

MAX_LISTED_TEXT = 80  # a title, a description, an error
MAX_LISTED_NAME = 60  # a file name, a URL


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` - 1 characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
