"""Every key form the storage tools refuse, refused before the store is asked: each write leaves
the bucket empty. Endpoints a binding may not name are refused at bind."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fixtures.services import MotoS3
from tests.support.storage import fresh_bucket
from toolkits.storage.backends import S3Settings
from toolkits.storage.endpoints import PRODUCTION, EndpointPolicy, EndpointRefused, check_endpoint
from toolkits.storage.keys import tenant_root
from toolkits.storage.tools import StorageTools
from tools_app.providers.storage import AwsS3Provider

REFUSED = {
    "empty_case": ("", "key must be a non-empty string"),
    "parent_case": ("../x.txt", "key must not contain a '..' segment"),
    "inner_parent_case": ("a/../../x.txt", "key must not contain a '..' segment"),
    "dot_case": ("a/./x.txt", "key must not contain a '.' segment"),
    "leading_slash_case": ("/etc/passwd", "key must be relative (no leading '/')"),
    "trailing_slash_case": ("folder/", "key must name an object, not a folder (no trailing '/')"),
    "double_slash_case": ("a//b.txt", "key must not contain an empty segment ('//')"),
    "backslash_case": ("a\\b.txt", "key must not contain a backslash"),
    "nul_case": ("a\x00b", "key must not contain control or format characters (U+0000)"),
    "newline_case": ("a\nb", "key must not contain control or format characters (U+000A)"),
    "del_case": ("a\x7fb", "key must not contain control or format characters (U+007F)"),
    "c1_case": ("a\x85b", "key must not contain control or format characters (U+0085)"),
    "bidi_override_case": ("a\u202eb", "key must not contain control or format characters (U+202E)"),
    "zero_width_case": ("a\u200bb", "key must not contain control or format characters (U+200B)"),
    "too_long_case": ("a/" * 256 + "b", "key is longer than 512 bytes"),
    "long_segment_case": ("x" * 256, "key has a segment longer than 255 bytes"),
    "not_a_string_case": (42, "key must be a non-empty string"),
}


@pytest.fixture
async def tools() -> AsyncIterator[StorageTools]:
    made = StorageTools()
    yield made
    made.close()


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_refused_key_form_writes_nothing(case: str, tools: StorageTools, moto_s3: MotoS3) -> None:
    # given
    key, message = REFUSED[case]
    settings = S3Settings(
        bucket=fresh_bucket(moto_s3),
        region=moto_s3.region,
        endpoint=moto_s3.endpoint,
        access_key=moto_s3.access_key,
        secret_key=moto_s3.secret_key,
    )
    root = tenant_root("agents", "acme")
    # when
    written = await tools.call(settings, root=root, operation="write", arguments={"key": key, "content": "x"})
    read = await tools.call(settings, root=root, operation="read", arguments={"key": key})
    deleted = await tools.call(settings, root=root, operation="delete", arguments={"key": key})
    # then
    for result in (written, read, deleted):
        assert result == {"content": [{"type": "text", "text": message}], "is_error": True}
    assert moto_s3.client().list_objects_v2(Bucket=settings.bucket).get("KeyCount") == 0


async def test_keys_are_kept_in_nfc_form(tools: StorageTools, moto_s3: MotoS3) -> None:
    # given: "é" composed and decomposed
    settings = S3Settings(
        bucket=fresh_bucket(moto_s3),
        region=moto_s3.region,
        endpoint=moto_s3.endpoint,
        access_key=moto_s3.access_key,
        secret_key=moto_s3.secret_key,
    )
    root = tenant_root("", "acme")
    # when
    await tools.call(settings, root=root, operation="write", arguments={"key": "cafe\u0301.txt", "content": "1"})
    read = await tools.call(settings, root=root, operation="read", arguments={"key": "caf\u00e9.txt"})
    # then
    assert read["structured_content"] == {"key": "caf\u00e9.txt", "bytes": 1}
    keys = [item["Key"] for item in moto_s3.client().list_objects_v2(Bucket=settings.bucket)["Contents"]]
    assert keys == [root + "caf\u00e9.txt"]


def test_cursors_the_tools_did_not_issue_are_refused() -> None:
    from toolkits.storage.keys import KeyRefused, decode_cursor, encode_cursor

    assert decode_cursor(encode_cursor("logs/0099.txt")) == "logs/0099.txt"
    for cursor in ["", "!!", encode_cursor("../x"), "a" * 701, encode_cursor("/abs")]:
        with pytest.raises(KeyRefused, match="cursor is not one this tool returned"):
            decode_cursor(cursor)


ENDPOINTS = {
    "http_case": ("http://s3.example.com", "endpoint must use https"),
    "http_loopback_case": ("http://127.0.0.1:9000", "endpoint must use https"),
    "https_loopback_case": ("https://127.0.0.1", "endpoint must not be a private, loopback or link-local address"),
    "private_case": ("https://10.1.2.3", "endpoint must not be a private, loopback or link-local address"),
    "link_local_case": ("https://169.254.169.254", "endpoint must not be a private, loopback or link-local address"),
    "cgnat_case": ("https://100.64.0.1", "endpoint must not be a private, loopback or link-local address"),
    "ipv6_loopback_case": ("https://[::1]", "endpoint must not be a private, loopback or link-local address"),
    "mapped_case": ("https://[::ffff:127.0.0.1]", "endpoint must not be a private, loopback or link-local address"),
    "localhost_case": ("https://localhost", "endpoint must name a public host"),
    "single_label_case": ("https://minio", "endpoint must name a public host"),
    "credentials_case": ("https://user:pw@s3.example.com", "endpoint must not contain credentials"),
    "path_case": ("https://s3.example.com/bucket", "without a path, query or fragment"),
    "query_case": ("https://s3.example.com?x=1", "without a path, query or fragment"),
    "scheme_case": ("file:///etc/passwd", "endpoint must be an absolute https URL"),
}


@pytest.mark.parametrize("case", list(ENDPOINTS))
async def test_a_binding_cannot_name_an_endpoint_outside_the_policy(case: str) -> None:
    # given
    endpoint, message = ENDPOINTS[case]
    provider = AwsS3Provider("aws_s3", {})
    # when
    with pytest.raises(ValueError) as refused:
        await provider.bind(tenant="acme", operations=["list"], parameters={"bucket": "b-1", "endpoint": endpoint})
    await provider.aclose()
    # then
    assert str(refused.value).startswith("parameters.endpoint: ") and message in str(refused.value)


def test_only_code_allows_loopback_http_and_r2_endpoints_pass() -> None:
    assert (
        check_endpoint("https://acct.r2.cloudflarestorage.com", PRODUCTION) == "https://acct.r2.cloudflarestorage.com"
    )
    assert check_endpoint("http://127.0.0.1:9000", EndpointPolicy(loopback_http=True)) == "http://127.0.0.1:9000"
    with pytest.raises(EndpointRefused):
        check_endpoint("http://10.0.0.1:9000", EndpointPolicy(loopback_http=True, private_hosts=True))
    # the shipped provider has no option for it: an unknown option refuses startup
    with pytest.raises(ValueError, match="unknown option"):
        AwsS3Provider("aws_s3", {"loopback_http": True})
