"""The decision of fleet routing, pure: from what a request is (`Request`: its route, whether
another instance signed it), what this instance is and holds (`Here`) and what the lookups found
(`Found`: the session's live owner, a draining instance's successor, an executor's holder),
`decide` returns ServeHere, ForwardTo(an instance) or Refuse(an error). No I/O: the router
(fleet_app.routing) looks up, then acts on the decision. No Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from foundation.asgi import Scope
from foundation.errors import BrainError, Unavailable
from foundation.session_ids import canonical_session_id

from .executor_routes import EXECUTOR_PATH, HolderView
from .owners import LeaseOwnerView
from .signing import SIGNATURE_HEADER
from .streams import opens_stream

__all__ = [
    "CONSOLE_PATH",
    "NOTHING_FOUND",
    "SESSION_PATH",
    "Decision",
    "ForwardTo",
    "Found",
    "Here",
    "Refuse",
    "Request",
    "ServeHere",
    "decide",
    "needs_lookup",
    "needs_successor",
    "read_request",
]

# `/sessions/{id}` and everything under it; `/sessions` itself (create, list) is served locally.
SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/|$)")
# The admin's routes that act on a live session (its live transcript, interrupt, resume and
# close, a pending approval's decision): forwarded to the owner like the API's, and authenticated
# there by the admin's session cookie (forwarded, signed) instead of a bearer token.
CONSOLE_PATH = re.compile(
    r"^/admin/sessions_app/session/([^/]+)/(stream|interrupt|resume|close|approvals/[0-9a-fA-F]{1,64}/decide)/$"
)
SIGNATURE = SIGNATURE_HEADER.encode()
MOVING = "the session is moving to another instance"


@dataclass(frozen=True, slots=True)
class Request:
    """What routing reads of a request before its body."""

    route: Literal["session", "executor", "other"]  # executor: one of its routes, in a fleet with a relay
    key: str  # the session's or the executor's id; "" for other routes
    signed: bool  # from another instance (its signature is verified before anything is decided)
    stream: bool  # answered with a stream (fleet_app.streams.opens_stream)
    console: bool = False  # one of the admin's CONSOLE_PATH routes: no bearer token to check


@dataclass(frozen=True, slots=True)
class Here:
    """What this instance is and holds, as the decision sees it."""

    instance: str
    incarnation: str
    draining: bool
    holds: bool  # the request's session lease, or its executor


@dataclass(frozen=True, slots=True)
class Found:
    """What the lookups found: the session's live owner or the executor's holder (None: nobody),
    the instance a draining one hands a free session to, or the error of a lookup that could
    not tell."""

    owner: LeaseOwnerView | HolderView | None = None
    successor: LeaseOwnerView | None = None
    error: BrainError | None = None


@dataclass(frozen=True, slots=True)
class ServeHere:
    pass


@dataclass(frozen=True, slots=True)
class ForwardTo:
    """Forward to `peer`, the session's `owner`, a draining instance's `successor` or the
    executor's `holder`; `unreachable` is the answer when it does not answer."""

    peer: LeaseOwnerView | HolderView
    role: Literal["owner", "successor", "holder"]
    unreachable: BrainError


@dataclass(frozen=True, slots=True)
class Refuse:
    error: BrainError


Decision = ServeHere | ForwardTo | Refuse
SERVE_HERE = ServeHere()
NOTHING_FOUND = Found()


def read_request(scope: Scope, *, executors: bool) -> Request:
    """The request's route, as routing tells them apart (`executors`: the app object has an
    executor relay; without one an executor's routes are served where they land)."""
    path = str(scope.get("path", ""))
    signed = any(name == SIGNATURE for name, _ in scope.get("headers", ()))
    stream = opens_stream(scope)
    if session := SESSION_PATH.match(path):
        # the owner's lease names the lowercase id the session routes accept in either case
        return Request("session", canonical_session_id(session.group(1)) or session.group(1), signed, stream)
    if console := CONSOLE_PATH.match(path):
        live = console.group(2) == "stream" and scope.get("method") == "GET"
        return Request("session", canonical_session_id(console.group(1)) or console.group(1), signed, live, True)
    if executors and (executor := EXECUTOR_PATH.match(path)):
        return Request("executor", executor.group(1), signed, stream)
    return Request("other", "", signed, stream)


def needs_lookup(request: Request, here: Here) -> bool:
    """Whether deciding needs to know who owns the request's session or holds its executor:
    not for another route, one this instance holds, or a signed executor route (another
    instance found it held here)."""
    return request.route != "other" and not here.holds and not (request.signed and request.route == "executor")


def needs_successor(request: Request, here: Here, owner: LeaseOwnerView | None) -> bool:
    """A draining instance hands a session nobody owns to a successor (unless the request is
    already forwarded: it is never forwarded again)."""
    return owner is None and here.draining and not request.signed


def decide(request: Request, here: Here, found: Found) -> Decision:
    """Serve the request here, forward it, or refuse it."""
    if not needs_lookup(request, here):
        return SERVE_HERE
    if found.error is not None:
        return Refuse(found.error)
    owner = found.owner
    if request.route == "executor":  # an executor nobody is known to hold is answered here
        if owner is None:
            return SERVE_HERE
        return ForwardTo(owner, "holder", Unavailable("the runtime executor's instance is not answering"))
    if owner is None or (owner.instance, owner.incarnation) == (here.instance, here.incarnation):
        if not here.draining:
            return SERVE_HERE
        # draining: a session given up here is never taken again here; a free one goes to an
        # instance that stays, one still lapsing here waits (retry) until it expires
        if found.successor is None:
            return Refuse(Unavailable(MOVING))
        return ForwardTo(found.successor, "successor", Unavailable(MOVING))
    if request.signed:  # a second hop could loop between two instances that disagree: the first retries
        return Refuse(Unavailable(MOVING))
    return ForwardTo(owner, "owner", Unavailable("the session's instance is not answering"))
