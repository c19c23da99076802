"""Every URL and address web_fetch refuses, each shown to make no connection.

Forms refused by their shape are aimed at a real loopback page server that the test's AllowList
admits, so only the rule under test stands between the fetch and a connection the server would
count. Address classes are answered by a recording resolver for a test name, and the fetcher
sends through a recording transport that dials loopback only: a refused address shows no
request at all (and a wrong acceptance could still never leave the host).
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support.web_servers import PageServer, RecordingResolver, RecordingTransport, started
from toolkits.web import AllowList, Fetcher, FetchFailed
from toolkits.web.addresses import UrlRefused, address_refusal
from toolkits.web.fetch import MAX_REDIRECTS


@pytest.fixture
def pages() -> Iterator[PageServer]:
    yield from started(PageServer)


@pytest.fixture
def other_pages() -> Iterator[PageServer]:
    yield from started(PageServer)


@pytest.fixture
async def transport() -> AsyncIterator[RecordingTransport]:
    recording = RecordingTransport()
    yield recording
    await recording.close()


def admitting(pages: PageServer) -> AllowList:
    return AllowList([("127.0.0.1", pages.port)])


SHAPES = [
    pytest.param("http://2130706433:{port}/page", id="decimal_ipv4_case"),
    pytest.param("http://0x7f.1:{port}/page", id="hex_short_ipv4_case"),
    pytest.param("http://0x7f000001:{port}/page", id="hex_ipv4_case"),
    pytest.param("http://017700000001:{port}/page", id="octal_ipv4_case"),
    pytest.param("http://0177.0.0.1:{port}/page", id="octal_dotted_ipv4_case"),
    pytest.param("http://127.1:{port}/page", id="short_dotted_ipv4_case"),
    pytest.param("http://127.000.000.001:{port}/page", id="zero_padded_ipv4_case"),
    pytest.param("http://user@127.0.0.1:{port}/page", id="userinfo_case"),
    pytest.param("http://user:secret@127.0.0.1:{port}/page", id="userinfo_password_case"),
    pytest.param("http://example.com@127.0.0.1:{port}/page", id="userinfo_host_lookalike_case"),
    pytest.param("http://127.0.0.1:{port}\\@example.com/page", id="backslash_case"),
    pytest.param("http://127.0.0.1:{port}/pa ge", id="whitespace_case"),
    pytest.param("http://127.0.0.1:{port}/page\r\nX-Injected: 1", id="header_injection_case"),
    pytest.param("ftp://127.0.0.1:{port}/page", id="ftp_scheme_case"),
    pytest.param("gopher://127.0.0.1:{port}/_GET%20/page", id="gopher_scheme_case"),
    pytest.param("file:///etc/passwd", id="file_scheme_case"),
    pytest.param("dict://127.0.0.1:{port}/", id="dict_scheme_case"),
    pytest.param("//127.0.0.1:{port}/page", id="scheme_relative_case"),
    pytest.param("http://[::1:{port}/page", id="broken_ipv6_literal_case"),
    pytest.param("http://127.0.0.1:99999/page", id="port_out_of_range_case"),
]


@pytest.mark.parametrize("form", SHAPES)
async def test_a_url_of_a_refused_shape_makes_no_connection_even_to_an_admitted_server(
    form: str, pages: PageServer
) -> None:
    # given: the page server is admitted, so nothing but the URL's shape stops the fetch
    resolver = RecordingResolver({})
    fetcher = Fetcher(allow=admitting(pages), resolver=resolver)
    # when
    with pytest.raises(UrlRefused):
        await fetcher.fetch(form.format(port=pages.port))
    # then
    assert resolver.lookups == []
    assert pages.accepts == 0


async def test_the_same_server_is_fetched_through_a_plain_url_so_the_shapes_above_were_the_only_obstacle(
    pages: PageServer,
) -> None:
    # when
    page = await Fetcher(allow=admitting(pages)).fetch(f"{pages.url}/page")
    # then
    assert page.status == 200 and "loopback interface" in page.text
    assert pages.accepts == 1


async def test_a_loopback_server_without_the_allow_list_is_refused_and_never_connected(pages: PageServer) -> None:
    # when / then
    for url in (f"{pages.url}/page", f"http://localhost:{pages.port}/page", f"http://[::1]:{pages.port}/page"):
        with pytest.raises(UrlRefused, match="only port 80 is fetched"):
            await Fetcher().fetch(url)
    assert pages.accepts == 0


async def test_a_port_other_than_the_schemes_own_is_refused_before_the_name_is_looked_up() -> None:
    # given
    resolver = RecordingResolver({"public.test": ["93.184.216.34"]})
    # when / then
    for url in ("http://public.test:8080/", "https://public.test:80/", "http://public.test:443/"):
        with pytest.raises(UrlRefused, match="only port"):
            await Fetcher(resolver=resolver).fetch(url)
    assert resolver.lookups == []


REFUSED_ANSWERS = [
    ("127.0.0.1", "a loopback address"),
    ("127.8.9.10", "a loopback address"),
    ("10.1.2.3", "a private address"),
    ("172.16.0.1", "a private address"),
    ("172.31.255.254", "a private address"),
    ("192.168.1.1", "a private address"),
    ("100.64.0.1", "a carrier-grade NAT (shared) address"),
    ("100.100.100.200", "a carrier-grade NAT (shared) address"),
    ("169.254.169.254", "the cloud metadata address"),
    ("169.254.1.1", "a link-local address"),
    ("0.0.0.0", "an unspecified ('this network') address"),
    ("224.0.0.1", "a multicast address"),
    ("239.255.255.250", "a multicast address"),
    ("240.0.0.1", "a reserved address"),
    ("255.255.255.255", "a reserved address"),
    ("192.0.0.8", "a reserved (IETF protocol) address"),
    ("192.0.2.1", "a reserved (documentation) address"),
    ("198.18.0.1", "a reserved (benchmarking) address"),
    ("192.88.99.1", "a reserved (6to4 relay) address"),
    ("::1", "a loopback address"),
    ("::", "an unspecified address"),
    ("fc00::1", "a unique local (private) address"),
    ("fd12:3456::1", "a unique local (private) address"),
    ("fd00:ec2::254", "the cloud metadata address"),
    ("fe80::1", "a link-local address"),
    ("fec0::1", "a site-local address"),
    ("ff02::1", "a multicast address"),
    ("::ffff:127.0.0.1", "an IPv4-mapped address"),
    ("::ffff:169.254.169.254", "an IPv4-mapped address"),
    ("::ffff:8.8.8.8", "an IPv4-mapped address"),
    ("::127.0.0.1", "an IPv4-compatible address"),
    ("64:ff9b::7f00:1", "a NAT64 address of 127.0.0.1, a loopback address"),
    ("64:ff9b::a9fe:a9fe", "a NAT64 address of 169.254.169.254, the cloud metadata address"),
    ("64:ff9b::c0a8:101", "a NAT64 address of 192.168.1.1, a private address"),
    ("64:ff9b:1::a00:1", "a local-use NAT64 address"),
    ("2002:7f00:1::1", "a 6to4 address of 127.0.0.1, a loopback address"),
    ("2002:a9fe:a9fe::1", "a 6to4 address of 169.254.169.254, the cloud metadata address"),
    ("2002:c0a8:101::1", "a 6to4 address of 192.168.1.1, a private address"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "a Teredo address"),  # client 127.0.0.1
    ("2001:db8::1", "a reserved (documentation) address"),
    ("100::1", "a reserved (discard) address"),
    ("4000::1", "a reserved address"),
]


@pytest.mark.parametrize(("answer", "reason"), REFUSED_ANSWERS, ids=[f"{a}_case" for a, _ in REFUSED_ANSWERS])
async def test_a_name_resolving_to_a_refused_address_is_refused_and_nothing_is_sent(
    answer: str, reason: str, transport: RecordingTransport
) -> None:
    # given
    resolver = RecordingResolver({"target.test": [answer]})
    fetcher = Fetcher(resolver=resolver, transport=transport)
    # when
    with pytest.raises(UrlRefused) as refused:
        await fetcher.fetch("http://target.test/latest/meta-data/")
    # then
    assert (
        str(refused.value)
        == f"target.test is {reason} ({ipaddress.ip_address(answer)}): only public addresses are fetched"
    )
    assert resolver.lookups == [("target.test", 80)]
    assert transport.sent == []


@pytest.mark.parametrize(("answer", "reason"), REFUSED_ANSWERS, ids=[f"{a}_case" for a, _ in REFUSED_ANSWERS])
async def test_the_same_address_written_in_the_url_is_refused_without_a_lookup(
    answer: str, reason: str, transport: RecordingTransport
) -> None:
    # given
    address = ipaddress.ip_address(answer)
    host = f"[{address}]" if address.version == 6 else str(address)
    resolver = RecordingResolver({})
    # when
    with pytest.raises(UrlRefused, match="only public addresses are fetched"):
        await Fetcher(resolver=resolver, transport=transport).fetch(f"https://{host}/")
    # then
    assert resolver.lookups == []
    assert transport.sent == []


async def test_one_refused_answer_among_public_ones_refuses_the_name(transport: RecordingTransport) -> None:
    # given: a name that answers a public address first and the metadata address second
    resolver = RecordingResolver({"mixed.test": ["93.184.216.34", "169.254.169.254"]})
    # when / then
    with pytest.raises(UrlRefused, match="the cloud metadata address"):
        await Fetcher(resolver=resolver, transport=transport).fetch("http://mixed.test/")
    assert transport.sent == []


def test_public_addresses_and_embeddings_of_public_ones_are_allowed() -> None:
    for answer in (
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ):
        assert address_refusal(ipaddress.ip_address(answer)) is None, answer


def test_an_allow_list_admits_loopback_only() -> None:
    for host in ("10.0.0.1", "169.254.169.254", "192.168.1.1", "fd00:ec2::254", "8.8.8.8"):
        with pytest.raises(ValueError, match="loopback addresses only"):
            AllowList([(host, 80)])


async def test_the_dial_goes_to_the_checked_address_with_the_original_host_header(pages: PageServer) -> None:
    # given: a name answered with the page server's (admitted) address
    resolver = RecordingResolver({"page.test": ["127.0.0.1"]})
    # when
    page = await Fetcher(allow=admitting(pages), resolver=resolver).fetch(f"http://page.test:{pages.port}/host")
    # then: looked up once, dialled at the answer, the name kept in Host
    assert resolver.lookups == [("page.test", pages.port)]
    assert page.text == f"Host: page.test:{pages.port}"
    assert [request["path"] for request in pages.requests] == ["/host"]


REDIRECT_TARGETS = [
    pytest.param("http://169.254.169.254/latest/meta-data/", id="metadata_case"),
    pytest.param("http://[fd00:ec2::254]/latest/meta-data/", id="ipv6_metadata_case"),
    pytest.param("http://2130706433/", id="decimal_ipv4_case"),
    pytest.param("http://[::ffff:127.0.0.1]/", id="mapped_ipv4_case"),
    pytest.param("http://internal.test/", id="name_of_a_private_address_case"),
    pytest.param("file:///etc/passwd", id="file_scheme_case"),
    pytest.param("http://user@internal.test/", id="userinfo_case"),
]


@pytest.mark.parametrize("location", REDIRECT_TARGETS)
async def test_a_redirect_to_a_refused_url_is_refused_after_the_first_hop(
    location: str, pages: PageServer, transport: RecordingTransport
) -> None:
    # given
    resolver = RecordingResolver({"internal.test": ["10.0.0.5"]})
    fetcher = Fetcher(allow=admitting(pages), resolver=resolver, transport=transport)
    # when
    with pytest.raises(UrlRefused):
        await fetcher.fetch(f"{pages.url}/redirect?to={location}")
    # then: the first hop only
    assert transport.sent == [f"{pages.url}/redirect?to={location}"]
    assert pages.accepts == 1


async def test_a_redirect_to_another_loopback_server_not_admitted_makes_no_connection_to_it(
    pages: PageServer, other_pages: PageServer
) -> None:
    # when
    with pytest.raises(UrlRefused, match="only port 80"):
        await Fetcher(allow=admitting(pages)).fetch(f"{pages.url}/redirect?to={other_pages.url}/page")
    # then
    assert (pages.accepts, other_pages.accepts) == (1, 0)


async def test_redirects_stop_after_the_bound(pages: PageServer) -> None:
    # when
    with pytest.raises(FetchFailed, match=f"more than {MAX_REDIRECTS} redirects"):
        await Fetcher(allow=admitting(pages)).fetch(f"{pages.url}/loop")
    # then
    assert [request["path"] for request in pages.requests] == ["/loop"] * (MAX_REDIRECTS + 1)
