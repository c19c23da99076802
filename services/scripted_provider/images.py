"""The checks each real API makes of the image parts of a request, so a client that shapes one
wrongly fails here as it would there. The recorded request (`/_requests`) keeps the body as sent.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from . import bedrock, google

__all__ = ["image_error"]

_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_BEDROCK_FORMATS = ("png", "jpeg", "gif", "webp")


def image_error(wire: str, body: dict[str, Any]) -> str | None:
    """The first malformed image part of the body, as the provider words it; None if none."""
    for part in _parts(wire, body):
        error = _check(wire, part)
        if error:
            return error
    return None


def _parts(wire: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    if wire in google.WIRES:
        messages = body.get("contents") or []
        key = "parts"
    elif wire in ("openai-responses", "openai-codex-responses"):
        messages = body.get("input") if isinstance(body.get("input"), list) else []
        key = "content"
    else:
        messages, key = body.get("messages") or [], "content"
    parts: list[dict[str, Any]] = []
    for message in messages:
        content = message.get(key) if isinstance(message, dict) else None
        if isinstance(content, list):
            parts.extend(part for part in content if isinstance(part, dict))
    return parts


def _base64(value: object) -> bool:
    try:
        return isinstance(value, str) and bool(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return False


def _url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(("https://", "data:image/"))


def _check(wire: str, part: dict[str, Any]) -> str | None:
    if wire == "openai-completions" and part.get("type") == "image_url":
        image = part.get("image_url")
        if not isinstance(image, dict) or not _url(image.get("url")):
            return "Invalid image_url: expected an object with a data: or https url."
    elif wire == "mistral-conversations" and part.get("type") == "image_url":
        if not _url(part.get("image_url")):
            return "Invalid image_url: expected a data: or https URL string."
    elif wire in ("openai-responses", "openai-codex-responses") and part.get("type") == "input_image":
        if not _url(part.get("image_url")) or part.get("detail") not in ("low", "high", "auto"):
            return "Invalid input_image: image_url must be a data: or https URL and detail low, high or auto."
    elif wire == "anthropic-messages" and part.get("type") == "image":
        source = part.get("source") or {}
        if source.get("type") == "base64":
            if source.get("media_type") not in _TYPES or not _base64(source.get("data")):
                return "image.source.base64: media_type must be an image type and data valid base64"
        elif source.get("type") != "url" or not str(source.get("url", "")).startswith("https://"):
            return "image.source: expected a base64 or url source"
    elif wire == bedrock.WIRE and "image" in part:
        image = part["image"]
        if image.get("format") not in _BEDROCK_FORMATS or not _base64((image.get("source") or {}).get("bytes")):
            return "The image block needs a format of png, jpeg, gif or webp and source bytes."
    elif wire in google.WIRES:
        inline, file = part.get("inlineData") or part.get("inline_data"), part.get("fileData") or part.get("file_data")
        if inline is not None and (
            (inline.get("mimeType") or inline.get("mime_type")) not in _TYPES or not _base64(inline.get("data"))
        ):
            return "* GenerateContentRequest.contents.parts.inline_data: mime_type and base64 data are required"
        if file is not None and not str(file.get("fileUri") or file.get("file_uri") or "").startswith("https://"):
            return "* GenerateContentRequest.contents.parts.file_data.file_uri: an https URI is required"
    return None
