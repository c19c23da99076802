"""The admin's live transcript: a session's SSE stream (the API's, byte for byte: replay after
the cursor or Last-Event-ID, the message in progress, then live events and deltas) for a staff
member logged into the admin, authenticated by the admin's session cookie instead of a bearer
token. Read-only: it opens the stream as a read-only grant of the session's tenant, so no API
token is made, shown or needed. GET only, so CSRF does not apply; it writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from channels.auth import get_user
from channels.db import database_sync_to_async
from django.conf import settings
from django.http.cookie import parse_cookie

from foundation.errors import Forbidden, NotFound
from foundation.session_ids import canonical_session_id

from .consumers import EventStreamConsumer
from .models import Session
from .records import Principal

__all__ = ["CONSOLE_STREAM_PATH", "ConsoleStreamConsumer"]

# The admin URL of the stream (sessions_app.admin names it `sessions_app_session_stream`);
# brainsite.asgi hands a GET of it to ConsoleStreamConsumer.
CONSOLE_STREAM_PATH = r"^/admin/sessions_app/session/([^/]+)/stream/$"
VIEW_PERMISSION = "sessions_app.view_session"
NOT_STAFF = "the live transcript needs a staff member logged into the admin who may view sessions"


class ConsoleStreamConsumer(EventStreamConsumer):
    async def authorize(self, session_id: str) -> Principal:
        tenant = await _staff_tenant(self.header(b"cookie") or "", session_id)
        return Principal(tenant=tenant, read_only=True, label="the admin")

    def track(self, close: Callable[[], None]) -> Callable[[], None]:
        return _untracked  # a logout ends nothing already open, as for any admin page being read


def _untracked() -> None:
    """Nothing to forget: the stream was never tracked."""


async def _staff_tenant(cookie: str, session_id: str) -> str:
    """The session's tenant when the cookie's admin session is an active staff member's who may
    view sessions; Forbidden otherwise, NotFound for an unknown session."""
    key = parse_cookie(cookie).get(settings.SESSION_COOKIE_NAME, "")
    if not key:
        raise Forbidden(NOT_STAFF)
    store = import_module(settings.SESSION_ENGINE).SessionStore(key)
    user = await get_user({"session": store})
    if not (user.is_active and user.is_staff) or not await database_sync_to_async(user.has_perm)(VIEW_PERMISSION):
        raise Forbidden(NOT_STAFF)
    canonical = canonical_session_id(session_id)
    if canonical is None:
        raise NotFound("session not found")
    tenant = await Session.objects.filter(id=canonical).values_list("tenant_id", flat=True).afirst()
    if tenant is None:
        raise NotFound("session not found")
    return str(tenant)
