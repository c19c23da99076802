"""The host config's `model_credentials`: model keys the operator declares by name, which a
session selects with `model_credential: {"reference": NAME}` instead of its provider's key."""

from __future__ import annotations

import re

from pydantic import Field

from .base import StrictModel

__all__ = ["MAX_REFERENCE_CHARS", "REFERENCE_NAME", "ModelCredentialConfig"]

MAX_REFERENCE_CHARS = 64  # a name an operator types; a create body quotes it back in errors
# used with fullmatch: a name, never a path, a URL or a key
REFERENCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class ModelCredentialConfig(StrictModel):
    """One declared model key: the provider (a `providers` entry) whose sessions may use it, and
    the variable holding it (or `NAME_FILE`, followed while running, as for provider keys)."""

    provider: str = Field(min_length=1)
    api_key_env: str = Field(min_length=1)
