"""The host config's `cluster` block and the checks that a fleet's shared parts are configured.

Imports only pydantic and the standard library, never Django or an app. `resolve_secrets` calls
`check_cluster`, so `check_brain_config` and `runbrain` refuse a block without its shared parts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .base import ConfigError, split_http_url
from .persistence import Persistence

__all__ = [
    "DATABASE_URL_ENV",
    "FLEET_SECRET_ENV",
    "MIN_FLEET_SECRET_BYTES",
    "ClusterConfig",
    "FleetSecret",
    "check_cluster",
]

# An instance's name goes into lease rows, signed headers and metric labels: a DNS label.
INSTANCE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
DEFAULT_LEASE_SECONDS = 10
# Below 3 s a renewal every lease/3 leaves no room for one slow statement; above 5 minutes a
# dead instance's sessions wait too long for a successor.
MIN_LEASE_SECONDS = 3
MAX_LEASE_SECONDS = 300
MAX_URL_CHARS = 2048
DATABASE_URL_ENV = "BRAIN_DATABASE_URL"
FLEET_SECRET_ENV = "BRAIN_FLEET_SECRET"
# HMAC-SHA256 keys shorter than its block's output add no strength to guess against.
MIN_FLEET_SECRET_BYTES = 32
# A secret from `openssl rand -hex 32` (or -base64) uses 14 or more distinct characters; one
# with fewer than this is typed or patterned ("0000...", "abab..."), not random.
MIN_FLEET_SECRET_DISTINCT = 8
# Words of the placeholders in examples and templates (deploy/kubernetes/secrets.example.yaml
# says `replace-with-at-least-32-random-bytes-...`): a secret containing one was never replaced.
PLACEHOLDER_WORDS = ("replace", "change-me", "changeme", "change_me", "placeholder", "example")


class ClusterConfig(BaseModel):
    """`cluster`: this instance's place in a fleet. Absent, Brain runs as one instance."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    instance: str  # unique in the fleet: a lowercase DNS label
    url: str  # how the other instances reach this one (http, no path beyond `/`)
    lease_seconds: int = Field(default=DEFAULT_LEASE_SECONDS, ge=MIN_LEASE_SECONDS, le=MAX_LEASE_SECONDS)
    # The operator's statement that a `filesystem` archive's directory is one directory every
    # instance mounts at the same path (NFS, a cluster file system), with atomic rename and
    # advisory locks. Without it a filesystem archive is refused: each instance would write its
    # own copy and a successor would load nothing.
    shared_directory: bool = False

    @field_validator("instance")
    @classmethod
    def _instance(cls, value: str) -> str:
        if not INSTANCE_NAME.fullmatch(value):
            raise ValueError(
                "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            )
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if len(value) > MAX_URL_CHARS:
            raise ValueError(f"must be at most {MAX_URL_CHARS} characters")
        parts = split_http_url(value)
        if parts.scheme == "https":
            raise ValueError(
                "must be an http:// URL: instances forward requests to each other over plain HTTP "
                "(each one signed with BRAIN_FLEET_SECRET); an https URL would make every forward fail"
            )
        if parts.query or parts.fragment or "?" in value or "#" in value:
            raise ValueError("must not contain a query or a fragment")
        if parts.path not in ("", "/"):
            raise ValueError("must not contain a path: requests are forwarded to the same path on the owner")
        return value.rstrip("/")


@dataclass(frozen=True, slots=True)
class FleetSecret:
    """The key that signs instance-to-instance requests. Never logged."""

    key: bytes

    def __repr__(self) -> str:
        return "FleetSecret(<redacted>)"


def _config_error(message: str) -> ConfigError:
    return ConfigError(message)


def _env_secret(name: str, environ: Mapping[str, str]) -> str | None:
    """NAME, else the contents of the file named by NAME_FILE (as brainsite.settings reads secrets)."""
    if environ.get(name):
        return environ[name]
    path = environ.get(f"{name}_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise _config_error(f"cluster: cannot read {name}_FILE: {getattr(exc, 'strerror', None) or exc}") from exc


def check_cluster(
    cluster: ClusterConfig, *, persistence: Persistence | None, environ: Mapping[str, str] | None = None
) -> FleetSecret:
    """Refuse a `cluster` block whose shared parts are missing; return the fleet secret.

    A fleet needs (1) Django's database on PostgreSQL, where leases and the input journal live;
    (2) a shared archive, the only way a successor gets a session's checkpoints: `s3`, `r2`,
    `gcs`, or `filesystem` with `cluster.shared_directory`; (3) BRAIN_FLEET_SECRET (or
    BRAIN_FLEET_SECRET_FILE) of at least 32 bytes that is not a placeholder (`_check_random`).
    The first problem found raises ConfigError
    naming its field, as the rest of the host config's checks do.
    """
    environ = os.environ if environ is None else environ
    database_url = _env_secret(DATABASE_URL_ENV, environ) or ""
    if urlsplit(database_url).scheme not in ("postgres", "postgresql"):
        raise _config_error(
            f"cluster: {DATABASE_URL_ENV} must name a PostgreSQL database (postgres://...): "
            "leases and the input journal live there"
        )
    if persistence is None:
        raise _config_error(
            "cluster: a persistence block is required: the archive is how another instance takes a session"
        )
    if persistence.provider == "filesystem" and not cluster.shared_directory:
        raise _config_error(
            "cluster.shared_directory: a filesystem archive must be a directory every instance shares; "
            "set shared_directory to true if it is, or use s3, r2 or gcs"
        )
    secret = _env_secret(FLEET_SECRET_ENV, environ)
    if not secret:
        raise _config_error(f"cluster: environment variable {FLEET_SECRET_ENV} is not set")
    key = secret.encode()
    if len(key) < MIN_FLEET_SECRET_BYTES:
        raise _config_error(f"cluster: {FLEET_SECRET_ENV} must hold at least {MIN_FLEET_SECRET_BYTES} bytes")
    _check_random(secret)
    return FleetSecret(key)


def _check_random(secret: str) -> None:
    """Refuse a secret that is obviously not random: an example's placeholder, or one made of a
    few characters. The message never quotes the secret."""
    lowered = secret.lower()
    word = next((word for word in PLACEHOLDER_WORDS if word in lowered), None)
    if word is not None:
        raise _config_error(
            f"cluster: {FLEET_SECRET_ENV} is a placeholder (it contains {word!r}): "
            "set it to random bytes, e.g. `openssl rand -hex 32`"
        )
    if len(set(secret)) < MIN_FLEET_SECRET_DISTINCT:
        raise _config_error(
            f"cluster: {FLEET_SECRET_ENV} is not random (fewer than {MIN_FLEET_SECRET_DISTINCT} distinct characters): "
            "set it to random bytes, e.g. `openssl rand -hex 32`"
        )
