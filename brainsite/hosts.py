"""The Host names and the CSRF origin the Django stack accepts, derived from the host config's
`listen` and `public_url` plus the BRAIN_ALLOWED_HOSTS override. Imports no Django: settings use it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = [
    "ANY_HOST",
    "LOOPBACK_HOSTS",
    "WILDCARD_LISTEN_HOSTS",
    "derive_allowed_hosts",
    "is_loopback_host",
    "public_origin",
]

ANY_HOST = "*"
# The names a browser or a local proxy uses for this machine's loopback interface.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
WILDCARD_LISTEN_HOSTS = frozenset({"0.0.0.0", "::"})


def derive_allowed_hosts(*, listen_host: str, public_url: str, override: str | None) -> list[str]:
    """ALLOWED_HOSTS for a listen host (brackets stripped), the public URL and the raw override.

    1. A set override (comma-separated names) is the whole answer.
    2. A wildcard listen (0.0.0.0, ::) is reached by names Brain cannot know: any Host (`*`).
       A deploy check and runbrain's startup log say so; BRAIN_ALLOWED_HOSTS narrows it.
    3. Otherwise the listen host, the loopback names when it is a loopback address, and the
       public URL's host (a proxy that keeps the client's Host header sends that one).

    Raises ValueError for an override that names no host.
    """
    if override is not None:
        names = [name.strip() for name in override.split(",") if name.strip()]
        if not names:
            raise ValueError("must name at least one host")
        return names
    if listen_host in WILDCARD_LISTEN_HOSTS:
        return [ANY_HOST]
    hosts = list(LOOPBACK_HOSTS) if is_loopback_host(listen_host) else []
    public_host = urlsplit(public_url).hostname or ""
    for name in (listen_host, public_host):
        for spelling in _spellings(name.lower()):
            if spelling and spelling not in hosts:
                hosts.append(spelling)
    return hosts


def public_origin(public_url: str) -> str:
    """`scheme://host[:port]` of the public URL: the Origin a browser sends for the admin."""
    parts = urlsplit(public_url)
    return f"{parts.scheme}://{parts.netloc.lower()}"


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: a host (brackets stripped) only this machine reaches."""
    return host in ("localhost", "::1") or host.startswith("127.")


def _spellings(host: str) -> tuple[str, ...]:
    """Django compares ALLOWED_HOSTS with the Host header's domain, which brackets IPv6."""
    return (host, f"[{host}]") if ":" in host else (host,)
