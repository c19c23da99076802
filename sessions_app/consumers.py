"""SSE stream of a session's events (Channels): replay after the cursor, then the text of the
message in progress (one assistant.delta with its offset), then live, no gap and no duplicate.

Reads only the actor's log (replay) and its bounded subscriber queue (live); never writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from django.conf import settings
from django.http.cookie import parse_cookie

from foundation.errors import BrainError, Forbidden
from foundation.session_ids import canonical_session_id
from foundation.streaming import SSE_HEADERS, StreamingConsumer, wait_for_room

from . import db, operations
from .app_object import brain_of
from .records import Principal, SessionStatus

if TYPE_CHECKING:
    from .records import Principal
    from .runtime.pubsub import Subscriber

__all__ = ["CONSOLE_STREAM_PATH", "ConsoleStreamConsumer", "EventStreamConsumer"]

KEEPALIVE_SECONDS = 15.0  # spec: a keepalive comment every 15 s while idle
REPLAY_BATCH = 100  # spec: replay in batches of 100
KEEPALIVE = b": keepalive\n\n"
# The admin's live transcript (sessions_app.admin names it `sessions_app_session_stream`):
# brainsite.asgi hands a GET of it to ConsoleStreamConsumer.
CONSOLE_STREAM_PATH = r"^/admin/sessions_app/session/([^/]+)/stream/$"
NOT_STAFF = "the live transcript needs a staff member logged into the admin who may view sessions"


class EventStreamConsumer(StreamingConsumer):
    async def stream(self) -> None:
        session_id = self.scope["url_route"]["kwargs"]["id"]
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        after = query["after"][0] if "after" in query else (self.header(b"last-event-id") or "")
        try:
            engine = brain_of(self.scope).engine
            principal = await self.authorize(session_id)
            opened = await operations.open_stream(engine, principal, session_id, after=after)
            actor, subscriber, start, end, partial = opened
        except BrainError as error:
            await self.send_error(error)
            return
        untrack = self.track(subscriber.close)
        try:
            await self.send_headers(status=200, headers=SSE_HEADERS)
            await self.send_body(b"", more_body=True)
            position = start
            while position < end:
                events = await asyncio.to_thread(actor.log.read, position, end=end, limit=REPLAY_BATCH)
                if not events:
                    break
                await self._write(b"".join(event.sse_frame() for event in events), subscriber)
                position = events[-1].offset + len(events[-1].line) + 1
            if partial:  # the message in progress, after the retained events and before live ones
                await self._write(partial, subscriber)
            if actor.status == SessionStatus.CLOSED:
                subscriber.close()
            while True:
                if not await subscriber.wait(KEEPALIVE_SECONDS):
                    await self._write(KEEPALIVE, subscriber)
                    continue
                frames = subscriber.drain()
                if frames:
                    await self._write(b"".join(frames), subscriber)
                if subscriber.closed:
                    break
            if subscriber.overflowed:
                self._abort()
            else:
                await self.send_body(b"", more_body=False)
        except TimeoutError:
            self._abort()  # spec: the write deadline passed; drop the client
        finally:
            untrack()
            operations.close_stream(engine, actor, subscriber)

    async def authorize(self, session_id: str) -> Principal:
        """Whose stream it is: the bearer token's grant. BrainError refuses it."""
        return await brain_of(self.scope).tokens.authenticate(self.header(b"authorization"))

    def track(self, close: Callable[[], None]) -> Callable[[], None]:
        """Register `close` to end the stream when its grant goes (a revoked token); returns the
        call that forgets it."""
        return brain_of(self.scope).tokens.track_stream(self.header(b"authorization"), close)

    def _abort(self) -> None:
        # base_send is the middleware's wrapper; only the server's own send reaches the socket
        abort = self.scope.get("brain_abort_connection")
        if abort is not None:
            abort()

    async def _write(self, data: bytes, subscriber: Subscriber | None = None) -> None:
        """Send once the transport has room. A client stuck past the deadline is dropped, and so
        is one whose live buffer overflowed meanwhile (spec: slow clients are disconnected)."""
        await wait_for_room(self.scope, give_up=lambda: subscriber is not None and subscriber.overflowed)
        await self.send_body(data, more_body=True)


class ConsoleStreamConsumer(EventStreamConsumer):
    """The admin's live transcript: the session's SSE stream, byte for byte the API's, for a staff
    member logged into the admin, authenticated by the admin's session cookie instead of a bearer
    token. It opens the stream as a read-only grant of the session's tenant, so no API token is
    made, shown or needed; GET only, it writes nothing (CSRF does not apply)."""

    async def authorize(self, session_id: str) -> Principal:
        key = parse_cookie(self.header(b"cookie") or "").get(settings.SESSION_COOKIE_NAME, "")
        canonical = canonical_session_id(session_id)
        tenant = await db.aconsole_tenant(key, canonical) if key and canonical else None
        if tenant is None:  # an unknown session is refused alike: nothing is told to who may not look
            raise Forbidden(NOT_STAFF)
        return Principal(tenant=tenant, read_only=True, label="the admin")

    def track(self, close: Callable[[], None]) -> Callable[[], None]:
        return _untracked  # a logout ends nothing already open, as for any admin page being read


def _untracked() -> None:
    """Nothing to forget: the stream was never tracked."""
