"""Storage providers for tests: the shipped ones with loopback http allowed, which no option of
the shipped classes can turn on (BRAIN_TOOL_PROVIDERS names these classes in tests only)."""

from __future__ import annotations

import secrets
from typing import ClassVar

from toolkits.storage.backends import FilesystemSettings, GCSSettings, S3Settings
from toolkits.storage.endpoints import EndpointPolicy
from tools_app.providers.storage import AwsS3Provider, StorageProvider

__all__ = ["LoopbackAwsS3Provider", "LoopbackStorageProvider", "fresh_bucket"]


class LoopbackAwsS3Provider(AwsS3Provider):
    endpoint_policy: ClassVar[EndpointPolicy] = EndpointPolicy(loopback_http=True)


class LoopbackStorageProvider(StorageProvider):
    endpoint_policy: ClassVar[EndpointPolicy] = EndpointPolicy(private_hosts=True, loopback_http=True)


def fresh_bucket(service: object, stem: str = "tools") -> str:
    """A new bucket on moto or fake-gcs-server."""
    return service.create_bucket(f"{stem}-{secrets.token_hex(4)}")  # type: ignore[attr-defined, no-any-return]


Settings = S3Settings | GCSSettings | FilesystemSettings
