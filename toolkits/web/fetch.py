"""`web_fetch`: one public page as readable text.

Each hop (the URL, then every redirect, at most MAX_REDIRECTS of them) goes through the same
steps: parse the URL strictly (addresses.parse_target), resolve the host here, refuse the hop if
ANY answer is not a public address, and dial the first answer itself: the request goes to the
checked address literal, with the original `Host` header and the TLS server name (SNI, and the
certificate check) of the original host, so nothing resolves the name a second time. Proxy
variables are ignored (a proxy would dial a name of its own choosing), connections are not
reused across fetches, and the body is read through BoundedBody: at most 2 MiB decoded.

AllowList is the only way to reach a refused address: an object built in code (the tests build
one for their loopback servers); no option, variable or flag produces one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from email.message import Message
from urllib.parse import urljoin

import httpx

from .addresses import DEFAULT_PORTS, Target, UrlRefused, address_refusal, parse_target
from .body import BodyError, BoundedBody
from .text import HTML_TYPES, TEXT_TYPES, readable_text

__all__ = [
    "MAX_OUTPUT_BYTES",
    "MAX_REDIRECTS",
    "MAX_UPSTREAM_BYTES",
    "AllowList",
    "FetchFailed",
    "Fetcher",
    "Page",
    "Resolver",
    "UrlRefused",
]

MAX_UPSTREAM_BYTES = 2 << 20  # spec (tools/resources): upstream responses are capped at 2 MiB
MAX_OUTPUT_BYTES = 128 << 10  # spec: returned text is truncated at 128 KiB, with a flag
MAX_REDIRECTS = 5  # hops after the first request; each is checked as the first was
DNS_SECONDS = 5.0  # a resolver that has not answered by then will not
CONNECT_SECONDS = 10.0
READ_SECONDS = 10.0  # between two reads of the body
FETCH_SECONDS = 20.0  # the whole fetch, redirects included: under the service's 25 s per request
MAX_EXTRACTIONS = 2  # HTML extractions at once: CPU-bound threads, one per core of a small host
USER_AGENT = "BrainWebFetch/1.0 (+https://aexhq.github.io/brain/docs/tools/resources)"
REDIRECTS = frozenset({301, 302, 303, 307, 308})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


class FetchFailed(Exception):
    """A fetch that produced no page (network failure, bad body, too many redirects)."""


class AllowList:
    """Loopback addresses and ports a test's servers listen on, admitted despite the rules.
    Only loopback can be admitted, so even a misused AllowList opens no private network."""

    def __init__(self, entries: Iterable[tuple[str, int]]) -> None:
        admitted: set[tuple[IPAddress, int]] = set()
        for host, port in entries:
            address = ipaddress.ip_address(host)
            if not address.is_loopback:
                raise ValueError(f"an AllowList admits loopback addresses only, not {host}")
            admitted.add((address, int(port)))
        self._admitted = frozenset(admitted)

    def __repr__(self) -> str:
        return f"AllowList({sorted((str(address), port) for address, port in self._admitted)})"

    def admits(self, address: IPAddress, port: int) -> bool:
        return (address, port) in self._admitted


@dataclass(frozen=True, slots=True)
class Page:
    url: str  # the URL asked for
    final_url: str  # after redirects
    status: int
    content_type: str
    title: str | None
    text: str  # at most MAX_OUTPUT_BYTES of UTF-8
    truncated: bool  # the text is not the whole page: the body passed 2 MiB or the text 128 KiB


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver answers for `host` (getaddrinfo runs in a thread)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(DNS_SECONDS):
            answers = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError) as exc:
        raise FetchFailed(f"the host {host} could not be resolved") from exc
    return [ipaddress.ip_address(str(answer[4][0]).split("%")[0]) for answer in answers]


def _media_type(header: str) -> tuple[str, str | None]:
    message = Message()
    message["content-type"] = header or "application/octet-stream"
    charset = message.get_param("charset")
    return message.get_content_type(), charset if isinstance(charset, str) else None


def _clip(text: str, limit: int) -> tuple[str, bool]:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text, False
    return encoded[:limit].decode("utf-8", errors="ignore"), True


class Fetcher:
    """Fetches pages under the rules above. `resolver`, `allow` and `transport` are for tests
    (in code only): a resolver's answers, loopback servers admitted, a transport that records
    what would have been sent."""

    def __init__(
        self,
        *,
        resolver: Resolver | None = None,
        allow: AllowList | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._resolver = resolver or system_resolver
        self._allow = allow
        self._transport = transport
        self._ssl = httpx.create_ssl_context()
        self._extractions = asyncio.Semaphore(MAX_EXTRACTIONS)

    async def fetch(self, url: str) -> Page:
        """The page at `url`; UrlRefused for a refused URL or address, FetchFailed otherwise."""
        try:
            async with asyncio.timeout(FETCH_SECONDS):
                return await self._fetch(url)
        except TimeoutError:
            raise FetchFailed(f"the fetch took longer than {FETCH_SECONDS:.0f} s") from None

    async def _fetch(self, url: str) -> Page:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            target = parse_target(current)
            address = await self._checked_address(target)
            status, headers, body = await self._request(target, address)
            if body is None:
                current = urljoin(target.url(), headers["location"])
                continue
            return await self._page(url, target, status, headers, body)
        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")

    async def _checked_address(self, target: Target) -> IPAddress:
        """The address to dial for `target`: every answer checked, the first one pinned."""
        allow = self._allow
        if not target.standard_port and allow is None:
            standard = DEFAULT_PORTS[target.scheme]
            raise UrlRefused(f"only port {standard} is fetched for {target.scheme} URLs, not {target.port}")
        answers = [target.literal] if target.literal is not None else await self._resolver(target.host, target.port)
        if not answers:
            raise FetchFailed(f"the host {target.host} has no address")
        for answer in answers:
            if allow is not None and allow.admits(answer, target.port):
                continue
            if not target.standard_port:
                standard = DEFAULT_PORTS[target.scheme]
                raise UrlRefused(f"only port {standard} is fetched for {target.scheme} URLs, not {target.port}")
            reason = address_refusal(answer)
            if reason is not None:
                raise UrlRefused(f"{target.host} is {reason} ({answer}): only public addresses are fetched")
        return answers[0]

    async def _request(self, target: Target, address: IPAddress) -> tuple[int, httpx.Headers, BoundedBody | None]:
        """One hop: its status, headers and body (None for a redirect, whose body is not read)."""
        literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        headers = {
            "Host": target.host_header,
            "User-Agent": USER_AGENT,
            "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
            "Accept-Encoding": "gzip, deflate",
        }
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        timeout = httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            verify=self._ssl,
            trust_env=False,
            follow_redirects=False,
            timeout=timeout,
            limits=limits,
            transport=self._transport,
        ) as client:
            request = client.build_request(
                "GET", f"{target.scheme}://{literal}:{target.port}{target.path}", headers=headers, extensions=extensions
            )
            try:
                response = await client.send(request, stream=True)
            except (httpx.HTTPError, ssl.SSLError) as exc:
                raise FetchFailed(f"could not fetch {target.url()}: {type(exc).__name__}") from exc
            try:
                if response.status_code in REDIRECTS and response.headers.get("location"):
                    return response.status_code, response.headers, None
                body = BoundedBody(response.headers.get("content-encoding", ""), limit=MAX_UPSTREAM_BYTES)
                async for chunk in response.aiter_raw():
                    full = body.full
                    body.feed(chunk)  # once full, a further chunk only marks the body truncated
                    if full:
                        break
                return response.status_code, response.headers, body
            except BodyError as exc:
                raise FetchFailed(str(exc)) from exc
            except httpx.HTTPError as exc:
                raise FetchFailed(f"the page's body was cut off: {type(exc).__name__}") from exc
            finally:
                await response.aclose()

    async def _page(self, url: str, target: Target, status: int, headers: httpx.Headers, body: BoundedBody) -> Page:
        media_type, charset = _media_type(headers.get("content-type", ""))
        if not (media_type in HTML_TYPES or media_type in TEXT_TYPES or media_type.startswith("text/")):
            raise FetchFailed(f"the page is {media_type}, not text or HTML")
        raw = body.finish()
        async with self._extractions:
            # a cancelled fetch waits for its thread, so no more than MAX_EXTRACTIONS ever run
            job = asyncio.ensure_future(asyncio.to_thread(readable_text, raw, media_type=media_type, charset=charset))
            try:
                readable = await asyncio.shield(job)
            except asyncio.CancelledError:
                await asyncio.wait([job])
                raise
        text, clipped = _clip(readable.text, MAX_OUTPUT_BYTES)
        return Page(
            url=url,
            final_url=target.url(),
            status=status,
            content_type=media_type,
            title=readable.title,
            text=text,
            truncated=clipped or body.truncated,
        )
