"""Which requests may bring a body past the API's cap (input_bytes + 16 KiB): only a signed-in
admin's knowledge upload, a POST to a knowledge base's add or change page carrying the admin's
session cookie, up to one document plus its form. Django still authenticates that request (a
forged cookie is sent to the login page); the body is spooled to a temporary file either way.
Used by the Daphne layer (bounded_http) and the ASGI layer (asgi) alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.conf import settings

from tools_app.ingest.documents import MAX_DOCUMENT_BYTES

__all__ = ["ADMIN_UPLOAD_BODY_BYTES", "request_body_limit"]

ADMIN_UPLOAD_PATH = re.compile(rb"^/admin/tools_app/knowledgebase/(?:add|[0-9]{1,19}/change)/$")
FORM_OVERHEAD_BYTES = 64 * 1024  # multipart boundaries and headers, the CSRF token, the base's fields
ADMIN_UPLOAD_BODY_BYTES = MAX_DOCUMENT_BYTES + FORM_OVERHEAD_BYTES  # the README's 20 MiB document


def request_body_limit(method: bytes, target: bytes, cookie_headers: Iterable[bytes], *, default: int) -> int:
    """The body limit of one request: ADMIN_UPLOAD_BODY_BYTES for an admin knowledge upload
    (`target` is the path, with or without its query), `default` for everything else."""
    if method != b"POST" or not ADMIN_UPLOAD_PATH.match(target.split(b"?", 1)[0]):
        return default
    name = settings.SESSION_COOKIE_NAME.encode() + b"="
    for header in cookie_headers:
        if any(part.strip().startswith(name) for part in header.split(b";")):
            return max(default, ADMIN_UPLOAD_BODY_BYTES)
    return default
