"""Object stores of the checkpoint archive: `open_store` picks one by provider name (the only
place that does). Synchronous: call from worker threads or Celery workers, never the loop.
Imports no Django.
"""

from __future__ import annotations

from collections.abc import Mapping

from foundation.hostconfig import Persistence

from .base import MAX_OBJECT_BYTES, ObjectMissing, ObjectStore, StoreError, validate_key

__all__ = ["MAX_OBJECT_BYTES", "ObjectMissing", "ObjectStore", "StoreError", "open_store", "validate_key"]


def open_store(settings: Persistence, environ: Mapping[str, str]) -> ObjectStore:
    """The store `settings.provider` names. Credentials named by `*_env` fields and
    STORAGE_EMULATOR_HOST / GOOGLE_CLOUD_PROJECT are read from `environ`; a store that cannot
    be built (missing variable, no credentials, bad prefix) raises StoreError(retryable=False)."""
    # Each SDK is imported only when its provider is configured: boto3 and
    # google-cloud-storage are slow to import and a server uses one provider.
    if settings.provider == "filesystem":
        from .filesystem import FilesystemStore

        return FilesystemStore(settings.directory, prefix=settings.prefix)
    if settings.provider in ("s3", "r2"):
        from .s3 import open_s3_store

        return open_s3_store(settings, environ)
    if settings.provider == "gcs":
        from .gcs import open_gcs_store

        return open_gcs_store(settings, environ)
    raise StoreError(f"persistence provider {settings.provider!r} is not built", retryable=False)
