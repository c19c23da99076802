"""Images on a user message, as Brain accepts them and runners receive them: the item shape
(`{"type", "url"}`), the raster types, and how a `data:` URL is read. Stdlib only: Brain
validates a send with these rules and a runner checks what it is given with the same ones.

    prompt params   {"text": "...", "media": [{"type": "image/png", "url": "data:image/png;base64,..."}]}
    open result     {"media": {"types": ["image/png", ...], "https": true}}   (MediaSupport)

A runner that declares no `media` in its `open` result takes no images: Brain then ends a turn
whose message carries some before the prompt, and refuses later sends with images.
"""

from __future__ import annotations

import base64
import binascii
from typing import TypedDict
from urllib.parse import urlsplit

__all__ = [
    "IMAGE_SIGNATURES",
    "IMAGE_TYPES",
    "MAX_MEDIA_ITEMS",
    "MAX_URL_CHARS",
    "Media",
    "MediaError",
    "MediaSupport",
    "PromptParams",
    "data_url_payload",
    "decode_data_url",
    "is_data_url",
    "media_support",
    "read_media",
    "refusal",
]

# The raster types every image-taking provider the loop speaks accepts (SVG never: it is a
# document that can carry script, not an image a model reads).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# Leading bytes of each type: a data: URL's bytes must be what its type says.
IMAGE_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at offset 8, checked below
}
# Images per message: Anthropic takes up to 20 per request on its smallest plans, Bedrock 20;
# 8 per message leaves room for a few messages with images in one context.
MAX_MEDIA_ITEMS = 8
# An https URL's length: browsers and CDNs handle 2,048 characters everywhere.
MAX_URL_CHARS = 2048
_DATA_PREFIX = "data:"
_BASE64_MARK = ";base64,"


class Media(TypedDict):
    """One image of a user.message (2.3.0's `Media`): a MIME type and a data: or https URL."""

    type: str
    url: str


class MediaSupport(TypedDict):
    """What a runner's `open` result says its session's model takes."""

    types: list[str]
    https: bool  # whether an https URL may be passed to the provider (else data: URLs only)


class PromptParams(TypedDict, total=False):
    text: str
    media: list[Media]


class MediaError(ValueError):
    """An item that breaks the rules; the message names what is wrong (not which item)."""


def is_data_url(url: str) -> bool:
    return url[: len(_DATA_PREFIX)].lower() == _DATA_PREFIX


def data_url_payload(url: str) -> tuple[str, str]:
    """(declared type, base64 text) of a `data:<type>;base64,<payload>` URL, without decoding."""
    head, mark, payload = url[len(_DATA_PREFIX) :].partition(_BASE64_MARK)
    if url[: len(_DATA_PREFIX)].lower() != _DATA_PREFIX or not mark:
        raise MediaError("a data: URL must read data:<type>;base64,<data>")
    return head.lower(), payload


def decode_data_url(url: str, *, expected_type: str) -> bytes:
    """The bytes of a data: URL that declares `expected_type`; MediaError when the URL is not
    strict base64 of an image of that type. Cost: linear in the URL (callers bound its size)."""
    declared, payload = data_url_payload(url)
    if declared != expected_type:
        raise MediaError(f"the data: URL declares {declared or 'no type'!r}, not {expected_type!r}")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("the data: URL is not valid base64") from None
    if not data:
        raise MediaError("the data: URL holds no bytes")
    signatures = IMAGE_SIGNATURES[expected_type]
    if not data.startswith(signatures) or (expected_type == "image/webp" and data[8:12] != b"WEBP"):
        raise MediaError(f"the data: URL's bytes are not an image of type {expected_type}")
    return data


def _check_https(url: str) -> None:
    if len(url) > MAX_URL_CHARS:
        raise MediaError(f"an https URL may have at most {MAX_URL_CHARS} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise MediaError("the URL holds whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise MediaError("the URL is malformed") from None
    if parts.scheme != "https" or not parts.hostname:
        raise MediaError("the URL must be a data: URL or an https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise MediaError("the URL must not carry credentials")


def read_media(items: object, *, decode: bool) -> list[Media]:
    """The checked items of a message's `media` (MediaError names the item). A `type` of
    "image" takes the type a data: URL declares; an https URL needs a full image type. With
    `decode`, data: URLs are decoded to check their bytes (linear in their size)."""
    if not isinstance(items, list):
        raise MediaError("media must be a list")
    if len(items) > MAX_MEDIA_ITEMS:
        raise MediaError(f"media allows at most {MAX_MEDIA_ITEMS} items")
    checked: list[Media] = []
    for index, item in enumerate(items):
        try:
            checked.append(_read_item(item, decode=decode))
        except MediaError as exc:
            raise MediaError(f"media[{index}]: {exc}") from None
    return checked


def _read_item(item: object, *, decode: bool) -> Media:
    if not isinstance(item, dict) or set(item) != {"type", "url"}:
        raise MediaError("each item is an object with exactly type and url")
    kind, url = item["type"], item["url"]
    if not isinstance(kind, str) or not isinstance(url, str):
        raise MediaError("type and url must be strings")
    kind = kind.strip().lower()
    if is_data_url(url):
        declared, _payload = data_url_payload(url)
        if kind == "image":
            kind = declared
        if kind not in IMAGE_TYPES:
            raise MediaError(f"type must be one of {', '.join(IMAGE_TYPES)} (got {kind!r})")
        if decode:
            decode_data_url(url, expected_type=kind)
        elif declared != kind:
            raise MediaError(f"the data: URL declares {declared or 'no type'!r}, not {kind!r}")
        return {"type": kind, "url": url}
    if kind == "image":
        raise MediaError('type "image" needs a data: URL; give an https URL its full type, such as image/png')
    if kind not in IMAGE_TYPES:
        raise MediaError(f"type must be one of {', '.join(IMAGE_TYPES)} (got {kind!r})")
    _check_https(url)
    return {"type": kind, "url": url}


def media_support(value: object) -> MediaSupport | None:
    """The `media` of a runner's open result; None when it declares none (or a malformed one)."""
    if not isinstance(value, dict):
        return None
    types, https = value.get("types"), value.get("https")
    if not isinstance(types, list) or not isinstance(https, bool):
        return None
    return {"types": [kind for kind in types if kind in IMAGE_TYPES], "https": https}


def refusal(media: list[Media], support: MediaSupport | None, *, model: str) -> str:
    """Why the session's model cannot take these images ("" when it can)."""
    if not media:
        return ""
    if support is None or not support["types"]:
        return f"model {model!r} does not take images"
    for index, item in enumerate(media):
        if item["type"] not in support["types"]:
            return f"media[{index}]: model {model!r} does not take {item['type']} images"
        if not is_data_url(item["url"]) and not support["https"]:
            return f"media[{index}]: model {model!r} cannot fetch image URLs; send the image as a data: URL"
    return ""
