"""Long-lived forwarded answers: which requests open one, and each tenant's share of them.

A forwarded event stream or executor command stream holds a connection to the owner for its
whole life, so streams travel on a pool of their own (fleet_app.forwarding) and each tenant may
hold at most `limits.tenant_forwarded_streams` of them through one instance; past it the
stream is refused with 429 before it takes a connection, and ordinary forwarded requests of
every tenant keep theirs. No Django.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from foundation.errors import Overloaded

__all__ = [
    "DEFAULT_TENANT_STREAMS",
    "TENANT_HEADER",
    "ShareKey",
    "StreamShares",
    "opens_stream",
]

# The default of limits.tenant_forwarded_streams (foundation.hostconfig.limits says the same).
DEFAULT_TENANT_STREAMS = 256
# An executor's holder names the executor's tenant in this header of a command stream's answer
# to a signed request (the forwarding instance cannot read an executor credential); the
# forwarding instance takes it out before passing the answer on.
TENANT_HEADER = b"brain-fleet-tenant"

_EVENTS = re.compile(r"^/sessions/[^/]+/events$")
_COMMANDS = re.compile(r"^/executors/[^/]+/commands$")


def opens_stream(scope: Mapping[str, Any]) -> bool:
    """Whether the owner answers this request with a stream: a GET of a session's events that
    accepts text/event-stream (as the ASGI entry decides), or of an executor's commands."""
    if scope.get("method") != "GET":
        return False
    path = str(scope.get("path", ""))
    if _COMMANDS.match(path):
        return True
    if not _EVENTS.match(path):
        return False
    return any(name == b"accept" and b"text/event-stream" in value for name, value in scope.get("headers", ()))


# Whose share a stream is counted in: ("tenant", name); ("inspection", session id) for an
# inspection token another instance granted; ("executor", id) when a holder named no tenant.
ShareKey = tuple[str, str]


class StreamShares:
    """The forwarded streams each tenant holds open through this instance."""

    def __init__(self) -> None:
        self._open: dict[ShareKey, int] = {}

    def open(self, tenant: ShareKey) -> int:
        return self._open.get(tenant, 0)

    def take(self, tenant: ShareKey, *, share: int) -> Callable[[], None]:
        """One more stream of `tenant`, or Overloaded when it holds `share` already; returns
        the release, to call once when the stream ends."""
        held = self._open.get(tenant, 0)
        if held >= share:
            raise Overloaded(
                f"the tenant's share of streams forwarded through this instance ({share}, "
                "limits.tenant_forwarded_streams) is in use; close streams it no longer reads or try again later"
            )
        self._open[tenant] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._open[tenant] - 1
            if left:
                self._open[tenant] = left
            else:
                del self._open[tenant]

        return release

    def admit_executor(self, executor_id: str, *, share: int) -> Callable[[str], Callable[[], None]]:
        """What takes an executor's forwarded command stream once its holder answered: the
        holder named the executor's tenant (it checked the credential), whose share it takes;
        a holder that named none, the executor's own."""

        def admit(tenant: str) -> Callable[[], None]:
            key = ("tenant", unquote(tenant)) if tenant else ("executor", executor_id)
            return self.take(key, share=share)

        return admit
