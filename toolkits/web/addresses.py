"""Which URLs and addresses `web_fetch` may reach: a URL is parsed strictly into a target (scheme,
ASCII host, port), and every address a host resolves to is checked against the table of
networks that are not the public internet. Pure functions; no I/O.

Refused outright, before any lookup: schemes other than http and https, credentials in the URL
(`user@host`), backslashes, whitespace and control characters, and hosts written as a number in
any form but dotted decimal (`2130706433`, `0x7f.1`, `017700000001`, `127.1`), since resolvers
and browsers read those forms differently and a check must see the address the dial will use.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_PORTS",
    "MAX_URL_CHARS",
    "Target",
    "UrlRefused",
    "address_refusal",
    "parse_target",
]

MAX_URL_CHARS = 2048  # what browsers and CDNs reliably accept; longer URLs are not pages a model reads
MAX_HOST_CHARS = 253  # DNS: a name is at most 253 characters
DEFAULT_PORTS = {"http": 80, "https": 443}  # public web ports only: one per scheme
HOST_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
# a label of digits, or 0x and hex digits: the WHATWG host parser reads a host whose last label is
# such a number as an IPv4 address, in decimal, octal or hex, with 1 to 4 parts
NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"  # 0-255 without leading zeros
DOTTED_DECIMAL = re.compile(rf"^{OCTET}(\.{OCTET}){{3}}$")
FORBIDDEN_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]")

IPv4Net = ipaddress.IPv4Network
IPv6Net = ipaddress.IPv6Network

# Every IPv4 network that is not the public internet (IANA special-purpose registry), by name.
REFUSED_V4: tuple[tuple[IPv4Net, str], ...] = (
    (IPv4Net("169.254.169.254/32"), "the cloud metadata address"),
    (IPv4Net("0.0.0.0/8"), "an unspecified ('this network') address"),
    (IPv4Net("10.0.0.0/8"), "a private address"),
    (IPv4Net("100.64.0.0/10"), "a carrier-grade NAT (shared) address"),
    (IPv4Net("127.0.0.0/8"), "a loopback address"),
    (IPv4Net("169.254.0.0/16"), "a link-local address"),
    (IPv4Net("172.16.0.0/12"), "a private address"),
    (IPv4Net("192.0.0.0/24"), "a reserved (IETF protocol) address"),
    (IPv4Net("192.0.2.0/24"), "a reserved (documentation) address"),
    (IPv4Net("192.88.99.0/24"), "a reserved (6to4 relay) address"),
    (IPv4Net("192.168.0.0/16"), "a private address"),
    (IPv4Net("198.18.0.0/15"), "a reserved (benchmarking) address"),
    (IPv4Net("198.51.100.0/24"), "a reserved (documentation) address"),
    (IPv4Net("203.0.113.0/24"), "a reserved (documentation) address"),
    (IPv4Net("224.0.0.0/4"), "a multicast address"),
    (IPv4Net("240.0.0.0/4"), "a reserved address"),  # 255.255.255.255 (broadcast) among them
)
# IPv6 networks refused whatever they hold; those embedding an IPv4 address are checked below.
REFUSED_V6: tuple[tuple[IPv6Net, str], ...] = (
    (IPv6Net("fd00:ec2::254/128"), "the cloud metadata address"),
    (IPv6Net("::/128"), "an unspecified address"),
    (IPv6Net("::1/128"), "a loopback address"),
    (IPv6Net("::ffff:0:0/96"), "an IPv4-mapped address"),
    (IPv6Net("::/96"), "an IPv4-compatible address"),
    (IPv6Net("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (IPv6Net("100::/64"), "a reserved (discard) address"),
    (IPv6Net("2001::/32"), "a Teredo address"),  # it carries a client's IPv4 address and port
    (IPv6Net("2001::/23"), "a reserved (IETF protocol) address"),
    (IPv6Net("2001:db8::/32"), "a reserved (documentation) address"),
    (IPv6Net("3fff::/20"), "a reserved (documentation) address"),
    (IPv6Net("fc00::/7"), "a unique local (private) address"),
    (IPv6Net("fe80::/10"), "a link-local address"),
    (IPv6Net("fec0::/10"), "a site-local address"),
    (IPv6Net("ff00::/8"), "a multicast address"),
)
NAT64 = IPv6Net("64:ff9b::/96")  # well-known NAT64 prefix: the last 32 bits are an IPv4 address
SIX_TO_FOUR = IPv6Net("2002::/16")  # 6to4: bits 16-47 are an IPv4 address
GLOBAL_UNICAST = IPv6Net("2000::/3")  # the only IPv6 unicast space allocated for the internet


class UrlRefused(ValueError):
    """A URL or address web_fetch will not reach; the message says why (for the model)."""


@dataclass(frozen=True, slots=True)
class Target:
    """One request to make: the URL's parts, the host in ASCII (IDNA) or as an address literal."""

    scheme: str
    host: str  # lower-case ASCII name, or the address of a literal (no brackets)
    port: int
    path: str  # path and query, at least "/"
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None

    @property
    def standard_port(self) -> bool:
        return self.port == DEFAULT_PORTS[self.scheme]

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if isinstance(self.literal, ipaddress.IPv6Address) else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.path}"


def address_refusal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why `address` is not a public internet address, or None when it is."""
    if isinstance(address, ipaddress.IPv4Address):
        for network, reason in REFUSED_V4:
            if address in network:
                return reason
        return None
    if address.scope_id:
        return "an address with a zone"
    for network6, reason in REFUSED_V6:
        if address in network6:
            return reason
    if address in NAT64:
        embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        inner = address_refusal(embedded)
        return f"a NAT64 address of {embedded}, {inner}" if inner else None
    if address in SIX_TO_FOUR:
        embedded = ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
        inner = address_refusal(embedded)
        return f"a 6to4 address of {embedded}, {inner}" if inner else None
    if address not in GLOBAL_UNICAST:
        return "a reserved address"
    return None


def _numeric_ipv4(host: str) -> bool:
    """Whether the WHATWG URL parser reads `host` as an IPv4 address (its last label is a number)."""
    labels = host.removesuffix(".").split(".")
    return bool(labels) and NUMERIC_LABEL.fullmatch(labels[-1]) is not None


def _ascii_host(raw: str) -> str:
    host = raw.lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise UrlRefused("the host is not a valid internationalized name") from None
    host = host.removesuffix(".")
    if not host or len(host) > MAX_HOST_CHARS or not all(HOST_LABEL.fullmatch(label) for label in host.split(".")):
        raise UrlRefused("the host is not a valid DNS name")
    return host


def parse_target(url: str) -> Target:
    """The request `url` asks for, or UrlRefused saying why it may not be fetched. The port is
    not judged here: the fetcher refuses a port other than the scheme's (`standard_port`)
    unless a test's AllowList admits the address and port."""
    if not isinstance(url, str) or not url:
        raise UrlRefused("the URL must be a non-empty string")
    if len(url) > MAX_URL_CHARS:
        raise UrlRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    if FORBIDDEN_CHARACTERS.search(url):
        raise UrlRefused("the URL contains whitespace, a control character or a backslash")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"the URL is not valid: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UrlRefused(f"only http and https URLs can be fetched, not {scheme or 'a relative URL'!r}")
    if "@" in parts.netloc:
        raise UrlRefused("URLs with credentials (user@host) are not fetched")
    raw_host = parts.hostname or ""
    if not raw_host:
        raise UrlRefused("the URL has no host")
    port = DEFAULT_PORTS[scheme] if port is None else port
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.netloc.startswith("[") or ":" in raw_host:
        try:
            literal6 = ipaddress.IPv6Address(raw_host)
        except ValueError:
            raise UrlRefused("the host is not a valid IPv6 address") from None
        return Target(scheme, str(literal6), port, path, literal6)
    host = _ascii_host(raw_host)
    if _numeric_ipv4(host):
        if not DOTTED_DECIMAL.fullmatch(host):
            raise UrlRefused(
                f"the host {host!r} is a number that is not a dotted-decimal IPv4 address "
                "(decimal, octal, hex and short forms are refused)"
            )
        literal4 = ipaddress.IPv4Address(host)
        return Target(scheme, host, port, path, literal4)
    return Target(scheme, host, port, path, None)
