"""What every section of the host config shares: the error, strict models, URL checks."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict

__all__ = ["MAX_CONFIG_BYTES", "ConfigError", "FieldProblem", "StrictModel", "check_url", "split_http_url"]

MAX_CONFIG_BYTES = 4 << 20  # spec: configuration files are limited to 4 MiB


class ConfigError(ValueError):
    """An invalid host config; the message names the offending field."""


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
