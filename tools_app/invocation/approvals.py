"""Which calls wait for a person's decision, whatever their kind: the host config's `approvals`
rules, then the admin's, the first that matches deciding the wait (a config tool's own
`require_approval` comes before both). Imports no runtime or API modules."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from foundation.hostconfig import ApprovalRule, ToolKindName
from foundation.logs import logger

__all__ = ["ADMIN_RULES_CACHE_SECONDS", "ApprovalPolicy", "RuleLoader", "RulesUnavailable"]

# Admin saves clear the cache at once; this bounds drift across processes (as for admin tools).
ADMIN_RULES_CACHE_SECONDS = 30.0
# After a failed read of the admin's rules, the rules read last serve this long before the next try.
ADMIN_RULES_RETRY_SECONDS = 1.0


class RulesUnavailable(Exception):
    """The admin's rules were never read and cannot be now: no call may run ungated by them."""


RuleLoader = Callable[[], Awaitable[Sequence[ApprovalRule]]]


class ApprovalPolicy:
    """The approval rules of this process: `rules` from the host config, `admin_loader` reading
    the admin's (None: the config's alone)."""

    def __init__(self, rules: Sequence[ApprovalRule] = (), *, admin_loader: RuleLoader | None = None) -> None:
        self._rules = tuple(rules)
        self._admin_loader = admin_loader
        self._admin: tuple[ApprovalRule, ...] | None = None  # None: never read
        self._admin_expires = 0.0

    def forget_rules(self) -> None:
        """Reload the admin's rules on next use (one was created, changed or deleted)."""
        self._admin_expires = 0.0

    async def _all(self) -> tuple[ApprovalRule, ...]:
        if self._admin_loader is None:
            return self._rules
        now = time.monotonic()
        if now >= self._admin_expires:
            try:  # the database: whatever fails, calls stay gated by what was read, or none runs
                self._admin = tuple(await self._admin_loader())
                self._admin_expires = now + ADMIN_RULES_CACHE_SECONDS
            except Exception as exc:
                if self._admin is None:
                    raise RulesUnavailable(str(exc)) from exc
                logger.warning("approval rules not reloaded", extra={"error": str(exc)[:300]})
                self._admin_expires = now + ADMIN_RULES_RETRY_SECONDS
        return self._rules + (self._admin or ())

    async def timeout_for(self, *, tenant: str, name: str, kind: ToolKindName, provider: str) -> int | None:
        """The approval timeout of the first rule a call matches; None when none does. Raises
        RulesUnavailable when the admin's rules cannot be read."""
        for rule in await self._all():
            if rule.matches(tenant=tenant, name=name, kind=kind, provider=provider):
                return rule.approval_timeout_seconds
        return None
