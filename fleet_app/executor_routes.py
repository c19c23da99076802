"""Where a runtime executor's own HTTP routes are served in a fleet: what fleet_app.routing needs
of the executor relay (tools_app.relay.ExecutorRelay), seen through narrow protocols so this app
imports no other. No Django.
"""

from __future__ import annotations

import logging
import re
from typing import Protocol

__all__ = ["EXECUTOR_PATH", "ExecutorLocator", "HolderView", "holder_alive", "still_held"]

logger = logging.getLogger("brain.fleet")

# An executor's HTTP routes (its WebSocket RPC is not HTTP and is served where it lands).
EXECUTOR_PATH = re.compile(r"^/executors/([0-9a-fA-F]{32})/(?:responses|close|commands)$")


class HolderView(Protocol):
    @property
    def instance(self) -> str: ...
    @property
    def incarnation(self) -> str: ...
    @property
    def url(self) -> str: ...


class ExecutorLocator(Protocol):
    """What routing needs of tools_app.relay.ExecutorRelay: where an executor is held."""

    def holds(self, executor_id: str) -> bool: ...
    async def holder_of(self, executor_id: str) -> HolderView | None: ...
    async def holder_alive(self, instance: str, incarnation: str) -> bool: ...


async def holder_alive(locator: ExecutorLocator, holder: HolderView) -> bool | None:
    """Whether the instance holding an executor is still a live member of the fleet; None when
    the database cannot tell."""
    try:
        return await locator.holder_alive(holder.instance, holder.incarnation)
    except Exception:
        logger.warning("fleet executor holder check failed", exc_info=True, extra={"holder": holder.instance})
        return None


async def still_held(locator: ExecutorLocator, holder: HolderView) -> bool:
    """While a forwarded request waits for its answer: the holder is still alive (a failed
    check cannot tell, so it says no)."""
    return bool(await holder_alive(locator, holder))
