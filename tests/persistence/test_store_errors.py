"""Which provider failures a store reports as retryable: faults injected at the transport
(botocore's Stubber on a real S3 client, a requests adapter under a real GCS client)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.stub import Stubber
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from persistence_app.stores import ObjectMissing, StoreError
from persistence_app.stores.gcs import GCSStore
from persistence_app.stores.s3 import S3Store

# --- S3 --------------------------------------------------------------------------------------


@pytest.fixture
def s3_client() -> Iterator[Any]:
    session = boto3.session.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
    client = session.client("s3", endpoint_url="http://127.0.0.1:9", config=Config(retries={"max_attempts": 1}))
    yield client
    client.close()


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        ("SlowDown", 503, True),
        ("InternalError", 500, True),
        ("ServiceUnavailable", 503, True),
        ("ConditionalRequestConflict", 409, True),
        ("RequestTimeout", 400, True),
        ("AccessDenied", 403, False),
        ("InvalidAccessKeyId", 403, False),
        ("SignatureDoesNotMatch", 403, False),
        ("NoSuchBucket", 404, False),
        ("InvalidArgument", 400, False),
    ],
    ids=lambda value: f"{value}_case" if isinstance(value, str) else str(value),
)
def test_an_s3_put_failure_is_retryable_only_when_transient(
    s3_client: Any, code: str, status: int, retryable: bool
) -> None:
    # given
    store = S3Store(s3_client, bucket="brain-archive", prefix="p")
    with Stubber(s3_client) as stubber:
        stubber.add_client_error("put_object", service_error_code=code, http_status_code=status)

        # when
        with pytest.raises(StoreError) as raised:
            store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

    # then
    assert raised.value.retryable is retryable
    assert not isinstance(raised.value, ObjectMissing)
    assert code in str(raised.value)


def test_an_s3_immutable_put_that_meets_an_existing_object_succeeds(s3_client: Any) -> None:
    # given
    store = S3Store(s3_client, bucket="brain-archive")
    with Stubber(s3_client) as stubber:
        stubber.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)

        # when
        store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

        # then
        stubber.assert_no_pending_responses()


def test_an_s3_mutable_put_does_not_swallow_a_412(s3_client: Any) -> None:
    # given
    store = S3Store(s3_client, bucket="brain-archive")
    with Stubber(s3_client) as stubber:
        stubber.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)

        # when
        with pytest.raises(StoreError) as raised:
            store.put("sessions/abc/latest", b"c1", immutable=False)

    # then
    assert raised.value.retryable is False


def test_an_s3_put_sends_the_condition_only_when_immutable(s3_client: Any) -> None:
    # given
    store = S3Store(s3_client, bucket="brain-archive", prefix="p")
    digest = base64.b64encode(hashlib.md5(b"x").digest()).decode()
    common = {"Bucket": "brain-archive", "Body": b"x", "ContentMD5": digest}
    with Stubber(s3_client) as stubber:
        stubber.add_response("put_object", {}, {**common, "Key": "p/a/blocks/0", "IfNoneMatch": "*"})
        stubber.add_response("put_object", {}, {**common, "Key": "p/a/latest"})

        # when
        store.put("a/blocks/0", b"x", immutable=True)
        store.put("a/latest", b"x", immutable=False)

        # then
        stubber.assert_no_pending_responses()


def test_an_s3_get_of_a_missing_key_is_object_missing(s3_client: Any) -> None:
    # given
    store = S3Store(s3_client, bucket="brain-archive")
    with Stubber(s3_client) as stubber:
        stubber.add_client_error("get_object", service_error_code="NoSuchKey", http_status_code=404)

        # when
        with pytest.raises(ObjectMissing) as raised:
            store.get("sessions/abc/latest")

    # then
    assert raised.value.retryable is False


# --- GCS -------------------------------------------------------------------------------------


class _FaultAdapter(requests.adapters.BaseAdapter):
    """Answers every request with one status and a JSON API error body; counts object requests
    (the library also fetches bucket metadata once, in a background thread)."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status
        self.requests = 0

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        if "/o?" in str(request.url) or "/o/" in str(request.url):
            self.requests += 1
        response = requests.Response()
        response.status_code = self.status
        response._content = json.dumps({"error": {"code": self.status, "message": "injected"}}).encode()
        response.headers["Content-Type"] = "application/json"
        response.url = str(request.url)
        response.request = request
        return response

    def close(self) -> None:
        pass


def _gcs_store(status: int) -> tuple[GCSStore, _FaultAdapter]:
    adapter = _FaultAdapter(status)
    http = requests.Session()
    http.mount("http://", adapter)
    client = storage.Client(
        project="test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": "http://127.0.0.1:9"},
        _http=http,
    )
    return GCSStore(client, bucket="brain-archive"), adapter


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(401, False), (403, False), (404, False), (400, False), (503, True), (429, True)],
    ids=lambda value: f"{value}_case" if isinstance(value, int) else str(value),
)
def test_a_gcs_put_failure_is_retryable_only_when_transient(status: int, retryable: bool) -> None:
    # given
    store, adapter = _gcs_store(status)

    # when
    with pytest.raises(StoreError) as raised:
        store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

    # then
    assert raised.value.retryable is retryable
    assert not isinstance(raised.value, ObjectMissing)
    assert (adapter.requests > 1) is retryable  # the library retried only transient failures
    store.close()


def test_a_gcs_immutable_put_that_meets_an_existing_object_succeeds() -> None:
    # given
    store, adapter = _gcs_store(412)

    # when
    store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

    # then
    assert adapter.requests == 1
    store.close()


@pytest.mark.parametrize(("status", "retryable"), [(403, False), (401, False)])
def test_a_gcs_get_failure_is_not_object_missing(status: int, retryable: bool) -> None:
    # given
    store, _ = _gcs_store(status)

    # when
    with pytest.raises(StoreError) as raised:
        store.get("sessions/abc/latest")

    # then
    assert raised.value.retryable is retryable
    assert not isinstance(raised.value, ObjectMissing)
    store.close()
