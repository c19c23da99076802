"""DELETE /sessions/{id}: stop the session and remove everything Brain keeps of it. Called by
api.py; never sees a request.

1. A running turn stops as a close stops it (its queued inputs and pending approvals are
   cancelled and recorded, so open streams see them); the session's runtime executors close,
   on every instance of a fleet.
2. The session goes out of service (streams end, its harness detaches; requests get 404).
3. The archive's `latest` and discovery-index entry go, then its rows (session, approvals,
   input journal, lease, sealed credentials) and its local directory, all under the lock a
   publish writes `latest` under, so no upload in flight or queued brings it back; then its
   archived objects.

A session that has sub-agent sessions is refused (409) until they are deleted. A session whose
log or checkpoints are damaged (it cannot load) is deleted all the same, steps 2 and 3.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypedDict

from foundation.errors import Conflict, NotFound
from foundation.logs import logger
from tools_app import db as tools_db

from . import db
from .operations import check_session_id
from .records import Principal
from .runtime.actor import SessionActor
from .runtime.engine import Engine, SessionDamaged
from .storage import SessionStorage

__all__ = ["Deleted", "delete_session"]

# a turn gets this long to stop after the close (the runner's interrupt grace twice over, plus
# the checkpoint it may be writing), then it is cancelled
STOP_TURN_SECONDS = 12.0
NAMED_CHILDREN = 8  # sub-agent sessions a refusal names


class Deleted(TypedDict):
    """The answer of DELETE /sessions/{id} (the Deleted schema)."""

    id: str
    deleted: bool


def _remove_local(storage: SessionStorage, session_id: str) -> None:
    """Blocking: the session's rows, then its directories (the rows first: a directory without
    a row is never loaded, a row without its directory would be)."""
    db.delete_session_rows(session_id)
    tools_db.delete_credentials(session_id)
    storage.remove(session_id)


async def delete_session(engine: Engine, principal: Principal, session_id: str) -> Deleted:
    session_id = check_session_id(principal, session_id)
    try:
        actor = await engine.get_actor(principal.tenant, session_id)
    except SessionDamaged:
        # a session whose log or checkpoints do not decode cannot load, but can be deleted
        if await db.aget_session(principal.tenant, session_id) is None:
            raise NotFound("session not found") from None
        actor = None
    engine.ownership.require_writable(session_id)
    children = await db.achild_sessions(session_id, limit=NAMED_CHILDREN)
    if children:
        raise Conflict("the session has sub-agent sessions; delete them first: " + ", ".join(children))
    if actor is not None:
        await _stop(engine, actor)
    async with engine.offline(principal.tenant, session_id, deleting=True):
        await engine.purge(session_id, lambda: _remove_local(engine.storage, session_id))
    await engine.ownership.leases.release(session_id)
    logger.info("session deleted", extra={"session_id": session_id, "tenant": principal.tenant})
    return {"id": session_id, "deleted": True}


async def _stop(engine: Engine, actor: SessionActor) -> None:
    actor.close()  # stops a running turn, cancels queued inputs and pending approvals
    engine.executors.revoke_session(actor.id)
    task = actor.task
    if task is not None:
        await asyncio.wait({task}, timeout=STOP_TURN_SECONDS)
        if not task.done():
            task.cancel(msg="the session is being deleted")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task}, timeout=STOP_TURN_SECONDS)
