"""What every section of the host config shares: the error, strict models, URL checks."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_REPORTED_PROBLEMS",
    "ConfigError",
    "FieldProblem",
    "StrictModel",
    "check_url",
    "split_http_url",
]

MAX_CONFIG_BYTES = 4 << 20  # spec: configuration files are limited to 4 MiB
# A 4 MiB file can hold a hundred thousand mistakes: a report lists this many, then counts the rest.
MAX_REPORTED_PROBLEMS = 50


class ConfigError(ValueError):
    """An invalid host config; the message names the offending field (the first problem found),
    `problems` every problem found in the same pass, each naming its field."""

    def __init__(self, message: str, *, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)

    @classmethod
    def of(cls, problems: Sequence[str]) -> ConfigError:
        """One error for several problems (at least one)."""
        return cls(problems[0], problems=problems)

    def report(self, path: object) -> str:
        """One line per problem, each starting `invalid config PATH:`, at most
        MAX_REPORTED_PROBLEMS of them and a count of the rest."""
        shown = [f"invalid config {path}: {problem}" for problem in self.problems[:MAX_REPORTED_PROBLEMS]]
        hidden = len(self.problems) - len(shown)
        if hidden:
            shown.append(f"invalid config {path}: and {hidden} more problems")
        return "\n".join(shown)


class FieldProblem(ValueError):
    """Raised by a model-level check to name the field at fault (pydantic locates it at the model)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def split_http_url(value: str) -> SplitResult:
    """The parts of an absolute http(s) URL without credentials; ValueError otherwise. The
    caller's field location names the URL, so the messages don't repeat it."""
    try:
        parts = urlsplit(value)
        hostname = parts.hostname
        parts.port  # noqa: B018  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"must be a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not hostname:
        raise ValueError("must be an absolute http or https URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain credentials")
    return parts


def check_url(value: str, *, allow_query: bool = True) -> str:
    """The caller's field location names the URL, so the messages don't repeat it."""
    parts = split_http_url(value)
    if parts.fragment or "#" in value:
        raise ValueError("must not contain a fragment")
    if not allow_query and (parts.query or "?" in value):
        raise ValueError("must not contain query parameters")
    return value
