"""Storage tools as installed providers, over toolkits.storage.

- `AwsS3Provider` is what the published client's `AwsS3(...)` binds (provider `aws_s3`): the
  binding's parameters name the bucket, region, endpoint (R2 and other S3-compatible stores,
  https on a public host) and prefix; its sealed credential holds `accessKeyId`,
  `secretAccessKey` and optionally `sessionToken`. Operations `list` and `read` unless the
  binding names `write` or `delete`.
- `StorageProvider` serves the spec's `storage_list/read/write/delete` from a backend the
  operator configures in its options (S3, R2, GCS or a directory); `write` and `delete` are
  served only with `allow_write: true`.

Keys live under `<prefix>/<base64url tenant>/`, the tenant taken from the call's identity.
Imports no Django model and nothing of sessions_app.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Literal, cast

from runners.protocol import ToolDescriptor
from toolkits.storage.backends import FilesystemSettings, GCSSettings, S3Settings, StorageFailure
from toolkits.storage.endpoints import PRODUCTION, EndpointPolicy, EndpointRefused, check_endpoint
from toolkits.storage.keys import KeyRefused, check_root_prefix, tenant_root
from toolkits.storage.tools import MUTATIONS, OPERATIONS, BackendSettings, StorageTools, descriptors

from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, ParameterCheck, UnknownOperation, parse_options, select_operations

__all__ = ["AwsS3Provider", "StorageOptions", "StorageProvider"]

BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")  # S3's (and R2's) bucket naming rules
REGION_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")  # us-east-1, eu-central-1, R2's "auto"
DEFAULT_OPERATIONS = ("list", "read")  # as the client's AwsS3(): writes only when asked for
MAX_SECRET_CHARS = 4096  # STS session tokens run to about 2 KB
CREDENTIAL_KEYS = frozenset({"accessKeyId", "secretAccessKey", "sessionToken"})
SERVED: dict[str, ToolDescriptor] = {
    cast(str, item["name"]): cast(ToolDescriptor, item) for item in descriptors(list(OPERATIONS))
}


def _bucket(value: object, where: str) -> str:
    if not isinstance(value, str) or not BUCKET_NAME.fullmatch(value):
        raise ValueError(f"{where}: must be a bucket name (3-63 of a-z 0-9 . -)")
    return value


def _region(value: object, where: str) -> str:
    if value is None:
        return "us-east-1"
    if not isinstance(value, str) or not REGION_NAME.fullmatch(value):
        raise ValueError(f"{where}: must be a region name such as us-east-1 or auto")
    return value


def _root_prefix(value: object, where: str) -> str:
    try:
        return check_root_prefix(value)
    except KeyRefused as exc:
        raise ValueError(f"{where}: {exc}") from None


def _endpoint(value: object, policy: EndpointPolicy, where: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        return check_endpoint(value, policy)
    except EndpointRefused as exc:
        raise ValueError(f"{where}: {exc}") from None


async def _run(tools: StorageTools, settings: BackendSettings, call: ProviderCall, prefix: str) -> object:
    try:
        return await tools.call(
            settings, root=tenant_root(prefix, call.tenant), operation=call.operation, arguments=call.arguments
        )
    except StorageFailure as exc:
        raise ProviderError(str(exc), reached=exc.reached) from exc


class AwsS3Provider(ToolProvider):
    """Provider `aws_s3`. Options: the common ones (`parameters_schema` may narrow the
    parameters further, e.g. to an enum of buckets)."""

    # Which endpoints bindings may name. Only code sets this (a test's subclass allows loopback
    # http); no option or variable reaches it.
    endpoint_policy: ClassVar[EndpointPolicy] = PRODUCTION

    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_options(CommonOptions, options)
        self._narrowing = ParameterCheck(self.settings.parameters_schema) if self.settings.parameters_schema else None
        self._tools = StorageTools()

    def _parameters(self, parameters: object) -> tuple[str, str, str | None, str]:
        """(bucket, region, endpoint, prefix) of a binding; ValueError for the client."""
        if not isinstance(parameters, dict):
            raise ValueError("parameters: must be an object with bucket (and region, endpoint, prefix)")
        unknown = sorted(set(parameters) - {"bucket", "region", "endpoint", "prefix"})
        if unknown:
            raise ValueError(f"parameters.{str(unknown[0])[:64]}: unknown parameter")
        if self._narrowing is not None:
            self._narrowing.check(parameters)
        return (
            _bucket(parameters.get("bucket"), "parameters.bucket"),
            _region(parameters.get("region"), "parameters.region"),
            _endpoint(parameters.get("endpoint"), self.endpoint_policy, "parameters.endpoint"),
            _root_prefix(parameters.get("prefix"), "parameters.prefix"),
        )

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        self._parameters(parameters)
        return select_operations(SERVED, operations or DEFAULT_OPERATIONS)

    async def handle(self, call: ProviderCall) -> object:
        try:
            bucket, region, endpoint, prefix = self._parameters(call.parameters)
        except ValueError as exc:
            raise ProviderError(f"the binding's parameters are refused: {exc}", reached=False) from None
        credential = call.credential
        if (
            not isinstance(credential, dict)
            or not credential.keys() <= CREDENTIAL_KEYS
            or not all(
                isinstance(credential.get(key), str) and credential[key] for key in ("accessKeyId", "secretAccessKey")
            )
            or not all(isinstance(value, str) and len(value) <= MAX_SECRET_CHARS for value in credential.values())
        ):
            # never the server's own AWS identity: a binding without its keys is refused unsent
            raise ProviderError(
                "the binding's credential must hold accessKeyId and secretAccessKey (and optionally sessionToken)",
                reached=False,
            )
        settings = S3Settings(
            bucket=bucket,
            region=region,
            endpoint=endpoint,
            access_key=credential["accessKeyId"],
            secret_key=credential["secretAccessKey"],
            session_token=credential.get("sessionToken") or None,
        )
        return await _run(self._tools, settings, call, prefix)

    async def aclose(self) -> None:
        self._tools.close()


class StorageOptions(CommonOptions):
    backend: Literal["s3", "gcs", "filesystem"]
    bucket: str | None = None
    region: str | None = None
    endpoint: str | None = None
    prefix: str = ""
    access_key_env: str | None = None
    secret_key_env: str | None = None
    session_token_env: str | None = None
    project: str | None = None  # gcs
    root: str | None = None  # filesystem: a directory (relative: under the data directory)
    allow_write: bool = False  # as STORAGE_ALLOW_WRITE: write and delete are served only when true


class StorageProvider(ToolProvider):
    """The operator's storage (`storage_list`, `storage_read`, `storage_write`, `storage_delete`
    in the host config's tools). Bindings take no parameters."""

    # As AwsS3Provider's; the operator's own endpoint may be on a private network (https).
    endpoint_policy: ClassVar[EndpointPolicy] = EndpointPolicy(private_hosts=True)

    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        config = parse_options(StorageOptions, options)
        if config.parameters_schema is not None:
            raise ValueError("parameters_schema: storage bindings take no parameters")
        self._prefix = _root_prefix(config.prefix, "prefix")
        self._backend = self._settings(config)
        self._tools = StorageTools()
        served = [op for op in OPERATIONS if config.allow_write or op not in MUTATIONS]
        self._served = {op: SERVED[op] for op in served}

    def _settings(self, config: StorageOptions) -> BackendSettings:
        if config.backend == "filesystem":
            if not config.root:
                raise ValueError("root: the filesystem backend needs a directory")
            root = Path(config.root)
            return FilesystemSettings(root if root.is_absolute() else self.environment.data_dir / root)
        bucket = _bucket(config.bucket, "bucket") if config.backend == "s3" else config.bucket
        if not bucket:
            raise ValueError("bucket: required")
        endpoint = _endpoint(config.endpoint, self.endpoint_policy, "endpoint")
        if config.backend == "gcs":
            return GCSSettings(bucket=bucket, project=config.project, endpoint=endpoint)
        if (config.access_key_env is None) != (config.secret_key_env is None):
            raise ValueError("access_key_env: name both access_key_env and secret_key_env, or neither")
        secret = self.environment.secret
        return S3Settings(
            bucket=bucket,
            region=_region(config.region, "region"),
            endpoint=endpoint,
            access_key=secret(config.access_key_env) if config.access_key_env else None,
            secret_key=secret(config.secret_key_env) if config.secret_key_env else None,
            session_token=secret(config.session_token_env) if config.session_token_env else None,
        )

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        if parameters not in (None, {}):
            raise ValueError("parameters: storage bindings take no parameters")
        for operation in operations:
            if operation in MUTATIONS and operation not in self._served:
                raise UnknownOperation(f"operation {operation!r} is off: the provider's options do not set allow_write")
        return select_operations(self._served, operations)

    async def handle(self, call: ProviderCall) -> object:
        if call.operation not in self._served:
            raise ProviderError(f"operation {call.operation!r} is not served here", reached=False)
        return await _run(self._tools, self._backend, call, self._prefix)

    async def aclose(self) -> None:
        self._tools.close()
