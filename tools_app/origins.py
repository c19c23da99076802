"""Which origins a tool token variable may be sent to: those of the host config's tools that
declare it. An admin binding may reuse a declared variable only for a URL of the same origin, so
whoever may add bindings cannot send the operator's secret to a server of their choosing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from foundation.hostconfig import ToolBindingConfig

__all__ = ["token_origins", "url_origin"]

DEFAULT_PORTS = {"http": 80, "https": 443}


def url_origin(url: str) -> str:
    """scheme://host:port, lowercased, with the scheme's default port made explicit; "" when the
    URL has no host (nothing to compare)."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower(), 0)
    except ValueError:
        return ""
    if not parts.hostname:
        return ""
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"


def token_origins(bindings: Iterable[ToolBindingConfig]) -> Mapping[str, frozenset[str]]:
    """Each declared token variable -> the origins of the config tools that name it."""
    origins: dict[str, set[str]] = {}
    for binding in bindings:
        if binding.token_env and binding.url:
            origins.setdefault(binding.token_env, set()).add(url_origin(binding.url))
    return {name: frozenset(found - {""}) for name, found in origins.items()}
