"""What the cloud backends (Modal, E2B, Daytona) share: the spec's lifetime, the time an SDK call
may take beyond a command's deadline, and reading a binding's settings and credential without
ever echoing a secret."""

from __future__ import annotations

from collections.abc import Mapping

from toolkits.sandbox.backend import SandboxFailure

__all__ = [
    "CONTROL_TIMEOUT_SECONDS",
    "CREATE_TIMEOUT_SECONDS",
    "LIFETIME_SECONDS",
    "MAX_SETTING_CHARS",
    "RESULT_GRACE_SECONDS",
    "credential_value",
    "setting_value",
]

LIFETIME_SECONDS = 300  # spec (tools/sandboxes): five minutes, the provider's own expiry bound
# A command's answer crosses the provider's network after the helper's deadline: the SDK call
# may take this much longer before its outcome is declared unknown.
RESULT_GRACE_SECONDS = 15.0
CONTROL_TIMEOUT_SECONDS = 30.0  # inspect, terminate and connect calls: one request each
# Creating includes pulling the image and booting the sandbox (Modal pulls python:3.13-slim).
CREATE_TIMEOUT_SECONDS = 180.0
MAX_SETTING_CHARS = 512  # an app, image, template, target or URL; longer is no such name


def setting_value(settings: Mapping[str, str], key: str, default: str, *, provider: str) -> str:
    """The binding's parameter `key`, or the spec's default when absent or empty."""
    value = settings.get(key)
    if value is None or value == "":
        return default
    if not isinstance(value, str) or len(value) > MAX_SETTING_CHARS or not value.isprintable():
        raise SandboxFailure(f"the {provider} parameter {key!r} is not a valid name", reached=False)
    return value


def credential_value(credential: Mapping[str, str], key: str, *, provider: str) -> str:
    """The binding's private credential `key`; its absence is named, its value never shown."""
    value = credential.get(key)
    if not isinstance(value, str) or not value:
        raise SandboxFailure(f"the {provider} binding has no credential {key!r}", reached=False)
    if len(value) > 4 * MAX_SETTING_CHARS or not value.isprintable():
        raise SandboxFailure(f"the {provider} credential {key!r} is malformed", reached=False)
    return value
