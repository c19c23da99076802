"""An ambiguous write is an unknown outcome: the PUT reaches moto's S3 server, which stores the
object, and the answer is lost on the way back (a loopback proxy drops it). The tools report the
failure with `reached` (→ unknown_outcome), never as a plain error, and send it once."""

from __future__ import annotations

import pytest

from tests.fixtures.services import MotoS3
from tests.support.lossy_proxy import LossyProxy
from tests.support.storage import LoopbackAwsS3Provider, fresh_bucket
from toolkits.storage.backends import S3Settings, StorageFailure
from toolkits.storage.keys import tenant_root
from toolkits.storage.tools import StorageTools
from tools_app.providers.base import ProviderCall, ProviderError


async def test_a_write_whose_answer_is_lost_is_reported_as_reached_and_the_object_exists(moto_s3: MotoS3) -> None:
    # given
    proxy = LossyProxy(moto_s3.port)
    bucket = fresh_bucket(moto_s3)
    settings = S3Settings(
        bucket=bucket,
        region=moto_s3.region,
        endpoint=proxy.url,
        access_key=moto_s3.access_key,
        secret_key=moto_s3.secret_key,
    )
    tools = StorageTools()
    root = tenant_root("agents", "acme")
    # when
    with pytest.raises(StorageFailure) as failure:
        await tools.call(settings, root=root, operation="write", arguments={"key": "a.txt", "content": "kept"})
    tools.close()
    proxy.close()
    # then: the failure says it may have happened, and it did (once)
    assert failure.value.reached is True
    assert "answer was lost" in str(failure.value)
    assert proxy.dropped == 1
    stored = moto_s3.client().get_object(Bucket=bucket, Key=root + "a.txt")["Body"].read()
    assert stored == b"kept"


async def test_the_provider_turns_a_lost_answer_into_an_unknown_outcome_and_a_refused_connection_into_an_error(
    moto_s3: MotoS3,
) -> None:
    # given
    proxy = LossyProxy(moto_s3.port)
    bucket = fresh_bucket(moto_s3)
    provider = LoopbackAwsS3Provider("aws_s3", {})
    credential = {"accessKeyId": moto_s3.access_key, "secretAccessKey": moto_s3.secret_key}

    def call(operation: str, endpoint: str, **arguments: object) -> ProviderCall:
        return ProviderCall(
            tenant="acme",
            session_id="5" * 32,
            call_id="c" * 32,
            alias="aws_s3",
            operation=operation,
            arguments=dict(arguments),
            parameters={"bucket": bucket, "region": moto_s3.region, "endpoint": endpoint, "prefix": "p"},
            credential=credential,
            progress=lambda _: None,
        )

    # when
    with pytest.raises(ProviderError) as lost_write:
        await provider.handle(call("write", proxy.url, key="w.txt", content="w"))
    with pytest.raises(ProviderError) as lost_delete:
        await provider.handle(call("delete", proxy.url, key="w.txt"))
    with pytest.raises(ProviderError) as unsent:
        await provider.handle(call("write", "http://127.0.0.1:9", key="x.txt", content="x"))
    await provider.aclose()
    proxy.close()
    # then
    assert lost_write.value.reached is True
    assert lost_delete.value.reached is True  # moto also deleted it: the answer was what got lost
    assert unsent.value.reached is False and "not reached" in str(unsent.value)
    assert moto_s3.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert proxy.dropped == 2
