"""The host config's persistence block: the checkpoint archive's store and sync cadence."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import FieldProblem, StrictModel, check_url

__all__ = ["Persistence"]


class Persistence(StrictModel):
    provider: Literal["filesystem", "s3", "r2", "gcs"]
    directory: str = ""
    bucket: str = ""
    region: str = ""
    endpoint: str = ""
    prefix: str = ""
    access_key_env: str = ""
    secret_key_env: str = ""
    postgres_env: str = ""
    interval_seconds: int = Field(default=5, ge=1, le=3600)
    queue: int = Field(default=128, ge=1, le=10000)
    # first delay before a permanently failed publish is tried again; it doubles up to 30 times this
    retry_seconds: int = Field(default=60, ge=1, le=3600)
    # a publish gives up after this long plus one second per MiB it sends (a hung archive)
    publish_timeout_seconds: int = Field(default=60, ge=1, le=3600)
    # `<id>-replaced-<ID>` directories a restore keeps per session, newest first
    keep_replaced: int = Field(default=3, ge=1, le=100)

    @model_validator(mode="after")
    def _provider_fields(self) -> Persistence:
        if self.provider == "filesystem" and not self.directory:
            raise FieldProblem("directory", "is required for the filesystem provider")
        if self.provider != "filesystem" and not self.bucket:
            raise FieldProblem("bucket", f"is required for the {self.provider} provider")
        if self.provider == "gcs":
            for key in ("region", "endpoint", "access_key_env", "secret_key_env"):
                if getattr(self, key):
                    raise FieldProblem(key, "is not allowed for the gcs provider")
        if self.provider == "r2":
            for key in ("endpoint", "access_key_env", "secret_key_env"):
                if not getattr(self, key):
                    raise FieldProblem(key, "is required for the r2 provider")
        if bool(self.access_key_env) != bool(self.secret_key_env):
            missing = "secret_key_env" if self.access_key_env else "access_key_env"
            raise FieldProblem(missing, "access_key_env and secret_key_env must be set together")
        if self.endpoint:
            try:
                check_url(self.endpoint)
            except ValueError as exc:
                raise FieldProblem("endpoint", str(exc)) from exc
        if self.prefix.startswith("/") or "\\" in self.prefix or ".." in self.prefix.split("/"):
            raise FieldProblem("prefix", "must be relative without '\\' or '..'")
        return self
