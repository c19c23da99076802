"""Who is calling: the grant of one bearer token, and the permission checks every app's routes
share. Authentication itself (token -> Principal) belongs to sessions_app.auth."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.http import HttpRequest

from foundation.errors import Forbidden

__all__ = ["Principal", "principal_of", "require_manage", "require_write"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The grant of one bearer token."""

    tenant: str
    manage: bool = False
    read_only: bool = False
    session: str = ""  # non-empty: limited to this one session
    # who the token is, for records of what it did (an approval's decided_by): its label, or
    # the start of its digest; never the token itself. Not part of the grant's identity.
    label: str = field(default="", compare=False)


def principal_of(request: HttpRequest) -> Principal:
    """The grant the API's bearer auth attached to the request."""
    principal: Principal = request.auth  # type: ignore[attr-defined]  # set by ninja's auth
    return principal


def require_write(principal: Principal) -> None:
    if principal.read_only:
        raise Forbidden("token is read-only")


def require_manage(principal: Principal) -> None:
    if principal.read_only or not principal.manage:
        raise Forbidden("token lacks manage permission")
