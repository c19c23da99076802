"""The standalone storage handlers (services/resources/storage_tools.py) built from an environment
mapping, on moto's S3 server: called directly and over HTTP; write and delete exist only with
STORAGE_ALLOW_WRITE=true. And the operator's storage provider refuses write tools in the host
config unless its options allow writes."""

from __future__ import annotations

import httpx
import pytest

from foundation.hostconfig import ToolBindingConfig
from tests.fixtures.services import MotoS3
from tests.support.storage import fresh_bucket
from tests.tools.servers import LoopbackServer
from toolkits.storage.endpoints import EndpointPolicy
from toolkits.storage.keys import tenant_root
from tools_app.provider_tools import bind_provider_tool
from tools_app.providers.storage import StorageProvider

LOOPBACK = EndpointPolicy(private_hosts=True, loopback_http=True)  # tests only: no variable sets it
TOKEN = "resource-tool-token-0123456789abcdef"


def _environ(moto: MotoS3, bucket: str, **extra: str) -> dict[str, str]:
    return {
        "STORAGE_BUCKET": bucket,
        "STORAGE_REGION": moto.region,
        "STORAGE_ENDPOINT": moto.endpoint,
        "STORAGE_PREFIX": "tools",
        "STORAGE_ACCESS_KEY": moto.access_key,
        "STORAGE_SECRET_KEY": moto.secret_key,
        **extra,
    }


def _envelope(tenant: str, **arguments: object) -> dict[str, object]:
    return {"tenant_id": tenant, "session_id": "5" * 32, "call_id": "c" * 32, "arguments": arguments}


async def test_the_handlers_write_list_and_read_per_tenant_and_only_with_allow_write(moto_s3: MotoS3) -> None:
    # given
    from services.resources.storage_tools import build_storage_handlers

    bucket = fresh_bucket(moto_s3)
    writable = build_storage_handlers(_environ(moto_s3, bucket, STORAGE_ALLOW_WRITE="true"), endpoint_policy=LOOPBACK)
    readonly = build_storage_handlers(_environ(moto_s3, bucket), endpoint_policy=LOOPBACK)
    assert writable is not None and readonly is not None
    # when
    wrote = await writable.handle("storage_write", _envelope("acme", key="a.txt", content="alpha"))
    listed = await writable.handle("storage_list", _envelope("acme"))
    read = await readonly.handle("storage_read", _envelope("acme", key="a.txt"))
    foreign = await readonly.handle("storage_read", _envelope("globex", key="a.txt"))
    refused = await readonly.handle("storage_write", _envelope("acme", key="b.txt", content="beta"))
    writable.close()
    readonly.close()
    # then
    assert [item["name"] for item in writable.descriptors()] == [
        "storage_list",
        "storage_read",
        "storage_write",
        "storage_delete",
    ]
    assert [item["name"] for item in readonly.descriptors()] == ["storage_list", "storage_read"]
    assert wrote["structured_content"] == {"key": "a.txt", "bytes": 5}
    assert listed["structured_content"] == {"keys": [{"key": "a.txt", "size": 5}], "next_cursor": None}
    assert read["content"] == [{"type": "text", "text": "alpha"}]
    assert foreign["is_error"] is True
    assert refused == {
        "content": [
            {"type": "text", "text": "storage_write is not served here (writes need STORAGE_ALLOW_WRITE=true)"}
        ],
        "is_error": True,
    }
    keys = [item["Key"] for item in moto_s3.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == [tenant_root("tools", "acme") + "a.txt"]


def test_the_environment_is_checked_strictly(moto_s3: MotoS3) -> None:
    from services.resources.storage_tools import build_storage_handlers

    assert build_storage_handlers({}) is None
    with pytest.raises(ValueError, match="STORAGE_ENDPOINT: endpoint must use https"):
        build_storage_handlers(_environ(moto_s3, "b-1"))  # production policy: no loopback http
    with pytest.raises(ValueError, match="STORAGE_ALLOW_WRITE must be true or false"):
        build_storage_handlers(_environ(moto_s3, "b-1", STORAGE_ALLOW_WRITE="sure"), endpoint_policy=LOOPBACK)
    with pytest.raises(ValueError, match="STORAGE_PREFIX: prefix must not contain a '..' segment"):
        build_storage_handlers(_environ(moto_s3, "b-1", STORAGE_PREFIX="../x"), endpoint_policy=LOOPBACK)


def test_the_resources_service_serves_the_storage_tools_over_http(moto_s3: MotoS3) -> None:
    # given: the service with its storage family as STORAGE_* configure it (no web search)
    from services.resources import web_tools
    from services.resources.app import ResourceService
    from services.resources.storage_tools import build_storage_handlers, tools

    bucket = fresh_bucket(moto_s3)
    environ = _environ(moto_s3, bucket, STORAGE_ALLOW_WRITE="true")
    served = [*web_tools.tools({}), *tools(environ, endpoint_policy=LOOPBACK)]
    server = LoopbackServer(ResourceService(served, key=TOKEN)).start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        # when
        wrote = httpx.post(
            f"{server.url}/tools/storage_write", json=_envelope("acme", key="n.md", content="x"), headers=auth
        )
        read = httpx.post(f"{server.url}/tools/storage_read", json=_envelope("acme", key="n.md"), headers=auth)
        bad_key = httpx.post(f"{server.url}/tools/storage_read", json=_envelope("acme", key="../n.md"), headers=auth)
        no_token = httpx.post(f"{server.url}/tools/storage_read", json=_envelope("acme", key="n.md"))
        no_tenant = httpx.post(f"{server.url}/tools/storage_read", json={"arguments": {"key": "n.md"}}, headers=auth)
    finally:
        server.stop()
    # then
    assert wrote.status_code == 200 and wrote.json()["structured_content"] == {"key": "n.md", "bytes": 1}
    assert read.status_code == 200 and read.json()["content"] == [{"type": "text", "text": "x"}]
    assert bad_key.status_code == 200 and bad_key.json()["is_error"] is True
    assert no_token.status_code == 401
    assert no_tenant.status_code == 400 and no_tenant.json() == {"error": "tenant_id must be a non-empty string"}
    assert [tool.name for tool in served if tool.mutates] == ["storage_write", "storage_delete"]
    handlers = build_storage_handlers(environ, endpoint_policy=LOOPBACK)
    assert handlers is not None
    catalog = handlers.catalog("http://127.0.0.1:8092", tenants=["local"])
    handlers.close()
    assert catalog[2]["url"] == "http://127.0.0.1:8092/tools/storage_write"
    assert catalog[2]["token_env"] == "RESOURCE_TOOL_TOKEN"


async def test_write_tools_refuse_to_be_configured_unless_the_provider_allows_writes(tmp_path: object) -> None:
    # given
    readonly = StorageProvider("storage", {"backend": "filesystem", "root": "/tmp/storage-tools-readonly"})
    writable = StorageProvider(
        "storage", {"backend": "filesystem", "root": "/tmp/storage-tools-rw", "allow_write": True}
    )

    def tool(name: str) -> ToolBindingConfig:
        return ToolBindingConfig.model_validate(
            {
                "name": name,
                "transport": "provider",
                "provider": "storage",
                "operation": name.removeprefix("storage_"),
                "tenants": ["acme"],
            }
        )

    # when
    with pytest.raises(ValueError) as refused:
        await bind_provider_tool(tool("storage_write"), {"storage": readonly})
    with pytest.raises(ValueError) as refused_delete:
        await bind_provider_tool(tool("storage_delete"), {"storage": readonly})
    read = await bind_provider_tool(tool("storage_read"), {"storage": readonly})
    write = await bind_provider_tool(tool("storage_write"), {"storage": writable})
    # then
    assert str(refused.value) == (
        "operation: tool provider 'storage' refused it: operation 'write' is off: "
        "the provider's options do not set allow_write"
    )
    assert "operation 'delete' is off" in str(refused_delete.value)
    assert read.description == "Read a stored UTF-8 text object (at most 128 KiB)."
    assert write.input_schema is not None and write.input_schema["required"] == ["key", "content"]
