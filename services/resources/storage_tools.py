"""`storage_list`, `storage_read`, `storage_write`, `storage_delete` for the resource tool
service, configured from the environment (tools-resources): STORAGE_BUCKET, STORAGE_REGION,
STORAGE_PREFIX, STORAGE_ENDPOINT (R2: https://ACCOUNT.r2.cloudflarestorage.com, region auto),
STORAGE_ACCESS_KEY and STORAGE_SECRET_KEY (else boto3's default chain), STORAGE_ALLOW_WRITE=true
for write and delete. The tenant is the envelope's `tenant_id` (Brain's authenticated scope),
never the model's arguments.

The resources service registers them with one line in its SOURCES (`storage_tools.tools`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkits.storage.backends import S3Settings, StorageFailure
from toolkits.storage.endpoints import EndpointPolicy, EndpointRefused, check_endpoint
from toolkits.storage.keys import KeyRefused, check_root_prefix, tenant_root
from toolkits.storage.tools import MUTATIONS, OPERATIONS, StorageTools, descriptors, error_result

from .registry import Call, Handler, ServiceTool

__all__ = ["TOOL_PREFIX", "StorageHandlers", "build_storage_handlers", "tools"]

TOOL_PREFIX = "storage_"
MAX_BODY_BYTES = 256 << 10  # a write's 128 KiB of text, JSON-escaped, in Brain's envelope
MAX_TENANT_CHARS = 256
SERVICE_POLICY = EndpointPolicy(private_hosts=True)  # the operator's endpoint; https always


class BadEnvelope(ValueError):
    """A request that is not Brain's tool envelope (answered 400)."""


def _env_bool(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in ("", "false", "0", "no"):
        return False
    if value in ("true", "1", "yes"):
        return True
    raise ValueError(f"{name} must be true or false, not {value!r}")


def ensure_django_settings() -> None:
    """Django's storage API reads settings: a service without Django configures empty ones."""
    from django.conf import settings

    if not settings.configured:
        settings.configure()


class StorageHandlers:
    def __init__(self, settings: S3Settings, *, prefix: str, allow_write: bool) -> None:
        self.settings = settings
        self.prefix = prefix
        self.operations = tuple(op for op in OPERATIONS if allow_write or op not in MUTATIONS)
        self._tools = StorageTools()

    def __repr__(self) -> str:
        return f"StorageHandlers(bucket={self.settings.bucket!r}, operations={self.operations!r})"

    def descriptors(self) -> list[dict[str, object]]:
        """The tools this configuration serves (write and delete only with STORAGE_ALLOW_WRITE)."""
        return descriptors(list(self.operations), prefix=TOOL_PREFIX)

    def catalog(
        self, base_url: str, *, tenants: list[str], token_env: str = "RESOURCE_TOOL_TOKEN"
    ) -> list[dict[str, object]]:
        """Host-config `tools` entries for Brain."""
        return [
            {**item, "url": f"{base_url.rstrip('/')}/tools/{item['name']}", "token_env": token_env, "tenants": tenants}
            for item in self.descriptors()
        ]

    def serves(self, name: str) -> bool:
        return name.startswith(TOOL_PREFIX) and name.removeprefix(TOOL_PREFIX) in self.operations

    async def handle(self, name: str, envelope: Mapping[str, object]) -> dict[str, object]:
        """The result object of one call (a failure is a result; an ambiguous write or delete
        carries unknown_outcome). BadEnvelope when the body is not Brain's envelope."""
        tenant, arguments = envelope.get("tenant_id"), envelope.get("arguments")
        if not isinstance(tenant, str) or not tenant or len(tenant) > MAX_TENANT_CHARS:
            raise BadEnvelope("tenant_id is required")
        if not isinstance(arguments, dict):
            raise BadEnvelope("arguments must be an object")
        if not self.serves(name):
            return error_result(f"{name} is not served here (writes need STORAGE_ALLOW_WRITE=true)")
        operation = name.removeprefix(TOOL_PREFIX)
        try:
            return await self._tools.call(
                self.settings, root=tenant_root(self.prefix, tenant), operation=operation, arguments=arguments
            )
        except StorageFailure as exc:
            return error_result(f"{name} failed: {exc}", unknown_outcome=exc.reached)

    def close(self) -> None:
        self._tools.close()


def build_storage_handlers(
    environ: Mapping[str, str], *, endpoint_policy: EndpointPolicy = SERVICE_POLICY
) -> StorageHandlers | None:
    """The storage handlers `environ` configures, or None without STORAGE_BUCKET; ValueError
    naming the variable at fault. `endpoint_policy` is for tests (loopback http) only."""
    bucket = environ.get("STORAGE_BUCKET", "")
    if not bucket:
        return None
    try:
        prefix = check_root_prefix(environ.get("STORAGE_PREFIX", ""))
    except KeyRefused as exc:
        raise ValueError(f"STORAGE_PREFIX: {exc}") from None
    endpoint = environ.get("STORAGE_ENDPOINT") or None
    if endpoint is not None:
        try:
            endpoint = check_endpoint(endpoint, endpoint_policy)
        except EndpointRefused as exc:
            raise ValueError(f"STORAGE_ENDPOINT: {exc}") from None
    access_key, secret_key = environ.get("STORAGE_ACCESS_KEY") or None, environ.get("STORAGE_SECRET_KEY") or None
    if (access_key is None) != (secret_key is None):
        raise ValueError("STORAGE_ACCESS_KEY and STORAGE_SECRET_KEY: set both or neither")
    ensure_django_settings()
    settings = S3Settings(
        bucket=bucket,
        region=environ.get("STORAGE_REGION") or "us-east-1",
        endpoint=endpoint,
        access_key=access_key,
        secret_key=secret_key,
    )
    return StorageHandlers(settings, prefix=prefix, allow_write=_env_bool(environ, "STORAGE_ALLOW_WRITE"))


def tools(environ: Mapping[str, str], *, endpoint_policy: EndpointPolicy = SERVICE_POLICY) -> list[ServiceTool]:
    """The storage tools as the resources service serves them (none without STORAGE_BUCKET);
    write and delete are `mutates`: a failure after dispatch is an unknown outcome."""
    handlers = build_storage_handlers(environ, endpoint_policy=endpoint_policy)
    if handlers is None:
        return []

    def handler(name: str) -> Handler:
        async def handle(call: Call) -> dict[str, Any]:
            return dict(await handlers.handle(name, {"tenant_id": call.tenant_id, "arguments": call.arguments}))

        return handle

    return [
        ServiceTool(
            name=str(descriptor["name"]),
            description=str(descriptor["description"]),
            input_schema=dict(descriptor["input_schema"]),  # type: ignore[call-overload]
            handler=handler(str(descriptor["name"])),
            mutates=str(descriptor["name"]).removeprefix(TOOL_PREFIX) in MUTATIONS,
        )
        for descriptor in handlers.descriptors()
    ]
