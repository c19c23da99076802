"""Object keys of the storage tools: the model's relative keys validated and normalized, each
tenant's root (`<prefix>/<base64url tenant>/`) and the list cursor. Pure functions; the tenant
always comes from the trusted call identity, never from the model's arguments."""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata

__all__ = [
    "MAX_CURSOR_CHARS",
    "MAX_KEY_BYTES",
    "MAX_SEGMENT_BYTES",
    "KeyRefused",
    "check_key",
    "check_list_prefix",
    "check_root_prefix",
    "decode_cursor",
    "encode_cursor",
    "tenant_root",
]

# S3 and GCS keys are at most 1024 bytes: the relative key leaves room for the operator's prefix
# and the encoded tenant in front of it.
MAX_KEY_BYTES = 512
MAX_SEGMENT_BYTES = 255  # NAME_MAX: each segment is a directory entry on the filesystem backend
MAX_PREFIX_BYTES = 256  # the operator's or binding's own prefix in front of every tenant root
MAX_CURSOR_CHARS = 700  # a base64url key of MAX_KEY_BYTES, with room to spare
# Unicode categories refused anywhere in a key: controls (C0, DEL, C1), format characters
# (bidirectional overrides, zero-width joiners: keys that display as another key), surrogates.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
BASE64URL = re.compile(r"^[A-Za-z0-9_-]*$")


class KeyRefused(ValueError):
    """A key, prefix or cursor the tools do not accept; the message is for the model."""


def _check_characters(value: str, what: str) -> str:
    if "\\" in value:
        raise KeyRefused(f"{what} must not contain a backslash")
    for character in value:
        if unicodedata.category(character) in REFUSED_CATEGORIES:
            raise KeyRefused(f"{what} must not contain control or format characters (U+{ord(character):04X})")
    return unicodedata.normalize("NFC", value)


def _check_segments(segments: list[str], what: str) -> None:
    for segment in segments:
        if segment == "":
            raise KeyRefused(f"{what} must not contain an empty segment ('//')")
        if segment in (".", ".."):
            raise KeyRefused(f"{what} must not contain a {segment!r} segment")
        if len(segment.encode()) > MAX_SEGMENT_BYTES:
            raise KeyRefused(f"{what} has a segment longer than {MAX_SEGMENT_BYTES} bytes")


def check_key(value: object, *, what: str = "key") -> str:
    """The key in NFC form: a relative path of non-empty segments, without a leading or trailing
    '/', '.' or '..' segments, backslashes, control or format characters; at most MAX_KEY_BYTES."""
    if not isinstance(value, str) or not value:
        raise KeyRefused(f"{what} must be a non-empty string")
    if value.startswith("/"):
        raise KeyRefused(f"{what} must be relative (no leading '/')")
    if value.endswith("/"):
        raise KeyRefused(f"{what} must name an object, not a folder (no trailing '/')")
    key = _check_characters(value, what)
    if len(key.encode()) > MAX_KEY_BYTES:
        raise KeyRefused(f"{what} is longer than {MAX_KEY_BYTES} bytes")
    _check_segments(key.split("/"), what)
    return key


def check_list_prefix(value: object) -> str:
    """A list filter: empty, or the start of a key (it may end with '/')."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise KeyRefused("prefix must be a string")
    if value.endswith("/"):
        return check_key(value[:-1], what="prefix") + "/"
    return check_key(value, what="prefix")


def check_root_prefix(value: object) -> str:
    """The operator's or binding's prefix in front of every tenant root, without its trailing
    '/' (empty: the tenants' roots are at the top of the bucket)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise KeyRefused("prefix must be a string")
    prefix = check_key(value.removesuffix("/"), what="prefix")
    if len(prefix.encode()) > MAX_PREFIX_BYTES:
        raise KeyRefused(f"prefix is longer than {MAX_PREFIX_BYTES} bytes")
    return prefix


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def tenant_root(prefix: str, tenant: str) -> str:
    """`<prefix>/<base64url tenant>/` (unpadded base64url of the tenant's UTF-8 name), or
    `<base64url tenant>/` without a prefix. Distinct tenants never share a root, nor is one
    root the start of another: the encoded name ends at a '/' it cannot contain."""
    if not tenant:
        raise ValueError("a tenant is required")
    encoded = _b64(tenant.encode())
    return f"{prefix}/{encoded}/" if prefix else f"{encoded}/"


def encode_cursor(last_key: str) -> str:
    return _b64(last_key.encode())


def decode_cursor(value: object) -> str:
    """The key a cursor continues after; KeyRefused for anything these tools did not issue."""
    if not isinstance(value, str) or not value or len(value) > MAX_CURSOR_CHARS or not BASE64URL.match(value):
        raise KeyRefused("cursor is not one this tool returned")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        return check_key(raw.decode(), what="cursor")
    except (binascii.Error, UnicodeDecodeError, KeyRefused):
        raise KeyRefused("cursor is not one this tool returned") from None
