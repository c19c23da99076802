"""The host config's `cors` block: the browser origins the API and its streams answer.

Imports only pydantic and the standard library. Each origin is written exactly as a browser sends
it in `Origin` (`scheme://host[:port]`, lowercase, no default port, no path), so matching is one
set lookup; anything else, and `*`, is refused at load naming the entry.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, model_validator

from .base import FieldProblem, StrictModel

__all__ = ["MAX_CORS_ORIGINS", "CorsConfig", "canonical_origin", "origin_problem"]

# A deployment's browser apps are a handful of origins; a longer list is a generated mistake.
MAX_CORS_ORIGINS = 256
MAX_ORIGIN_CHARS = 2048  # as the other URLs of the host config
DEFAULT_PORTS = {"http": 80, "https": 443}


class CorsConfig(StrictModel):
    """`cors`: absent, no response carries a CORS header and preflights reach the API as before."""

    origins: list[str] = Field(min_length=1, max_length=MAX_CORS_ORIGINS)

    @model_validator(mode="after")
    def _exact_origins(self) -> CorsConfig:
        seen: set[str] = set()
        for index, origin in enumerate(self.origins):
            problem = origin_problem(origin)
            if problem is None and origin in seen:
                problem = f"{origin!r} is listed twice"
            if problem is not None:
                raise FieldProblem(f"origins[{index}]", problem)
            seen.add(origin)
        return self


def origin_problem(origin: str) -> str | None:
    """Why `origin` is not an exact browser origin, or None when it is one."""
    if origin == "*":
        return (
            "'*' is refused: requests carry an Authorization header, so list each origin exactly (scheme://host[:port])"
        )
    if origin == "null":
        return "'null' is refused: sandboxed frames and local files send it, and any page can be one"
    if len(origin) > MAX_ORIGIN_CHARS:
        return f"must be at most {MAX_ORIGIN_CHARS} characters"
    canonical = canonical_origin(origin)
    if canonical is None:
        return f"{origin!r} is not an origin: write scheme://host[:port] with scheme http or https"
    if canonical != origin:
        return f"{origin!r} is not written as a browser sends it: write {canonical!r}"
    return None


def canonical_origin(origin: str) -> str | None:
    """`scheme://host[:port]` as a browser serializes it (lowercase, default port dropped), or
    None when `origin` is no http(s) origin at all (credentials, a query, non-ASCII host...)."""
    if not origin.isascii() or any(character.isspace() for character in origin):
        return None  # a browser sends an internationalised host in its punycode (xn--) form
    try:
        parts = urlsplit(origin)
        port = parts.port
        hostname = parts.hostname
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not hostname or "@" in parts.netloc:
        return None
    if parts.query or parts.fragment or "?" in origin or "#" in origin:
        return None
    if parts.path not in ("", "/"):
        return None
    host = f"[{hostname}]" if ":" in hostname else hostname
    suffix = "" if port is None or port == DEFAULT_PORTS[scheme] else f":{port}"
    return f"{scheme}://{host.lower()}{suffix}"
