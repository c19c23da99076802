"""The published client's methods that not every supported version has: a test calls them here
and gets the same behaviour under aex-brain 2.3.0 (the method) and 2.0.0 (raw HTTP)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from brain import BrainError

__all__ = ["delete_session"]


def delete_session(client_or_server: Any, session_id: str, *, name: str = "alice") -> None:
    """`Brain.delete(session_id)` (2.3.0), or its request (`DELETE /sessions/{id}`) where the
    client lacks it (2.0.0), raising BrainError from the error envelope as the client does.
    `client_or_server`: a `brain.Brain`, or a test server (its client for token `name`)."""
    client = client_or_server.sdk(name) if hasattr(client_or_server, "sdk") else client_or_server
    if hasattr(client, "delete"):
        client.delete(session_id)
        return
    response = httpx.delete(
        f"{client.url}/sessions/{quote(session_id, safe='')}",
        headers={"Authorization": f"Bearer {client.token}"},
        timeout=client.timeout,
    )
    if response.status_code >= 400:
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        detail = payload.get("error", {})
        code, message = detail.get("code", "http_error"), detail.get("message", response.text)
        raise BrainError(response.status_code, code, message, payload.get("request_id"))
    response.json()  # a JSON answer, as 2.3.0 reads it
