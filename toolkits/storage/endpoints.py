"""Which object-store endpoints the storage tools may dial. A session's binding names its own
endpoint (R2, another S3-compatible store), so the URL is hostile input: https only, no
credentials, path, query or fragment, and no address on the server's own networks.

Plain http to a loopback address exists for tests alone: it is an `EndpointPolicy` built in code
(a test's provider subclass or service builder), never an option, variable or setting a
deployment's configuration can set.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["PRODUCTION", "EndpointPolicy", "EndpointRefused", "check_endpoint"]

MAX_ENDPOINT_CHARS = 512  # a host name is at most 253 characters; a port and scheme add little


class EndpointRefused(ValueError):
    """An endpoint the policy does not allow; the message names the rule, for the client."""


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    """`private_hosts`: addresses that are not globally routable (an operator's own store on a
    private network) may be named; `loopback_http`: plain http to 127.0.0.0/8 or ::1 (tests)."""

    private_hosts: bool = False
    loopback_http: bool = False


PRODUCTION = EndpointPolicy()  # what a session's binding gets


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_endpoint(value: object, policy: EndpointPolicy) -> str:
    """The endpoint as `scheme://host[:port]`; EndpointRefused naming the rule it breaks."""
    if not isinstance(value, str) or not value or len(value) > MAX_ENDPOINT_CHARS:
        raise EndpointRefused(f"endpoint must be a URL of at most {MAX_ENDPOINT_CHARS} characters")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise EndpointRefused(f"endpoint is not a valid URL: {exc}") from None
    host = (parts.hostname or "").lower()
    if not host:
        raise EndpointRefused("endpoint must be an absolute https URL")
    if parts.username is not None or parts.password is not None:
        raise EndpointRefused("endpoint must not contain credentials")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "#" in value or "?" in value:
        raise EndpointRefused("endpoint must be scheme://host[:port] without a path, query or fragment")
    address = _literal(host)
    loopback = address is not None and address.is_loopback
    if parts.scheme == "http" and loopback and policy.loopback_http:
        pass
    elif parts.scheme != "https":
        raise EndpointRefused("endpoint must use https")
    elif not (loopback and policy.loopback_http) and not policy.private_hosts:
        if host == "localhost" or host.endswith(".localhost") or "." not in host and address is None:
            raise EndpointRefused("endpoint must name a public host")
        if address is not None and (not address.is_global or address.is_multicast):
            raise EndpointRefused("endpoint must not be a private, loopback or link-local address")
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None and not mapped.is_global:
            raise EndpointRefused("endpoint must not be a private, loopback or link-local address")
    netloc = f"[{host}]" if address is not None and address.version == 6 else host
    return f"{parts.scheme}://{netloc}{f':{port}' if port is not None else ''}"
