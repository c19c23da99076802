"""The host config's approval rules: which tools, of any kind, wait for a person's decision.

A config tool may say `require_approval` itself; a rule in `approvals` reaches every kind the
call path serves (config tools, session provider bindings, runtime executor tools) by the name
the model sees, the kind, the installed provider and the tenant.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import Field, field_validator

from .base import StrictModel
from .tools import MAX_APPROVAL_SECONDS

__all__ = ["APPROVAL_KINDS", "MAX_APPROVAL_RULES", "ApprovalRule", "ToolKindName"]

# The kinds a call resolves to: the host config's and the admin's tools (http, mcp, rest and
# provider-backed), a session's provider bindings (`<alias>_<operation>`), a session's runtime
# executor tools (`<alias>_<name>`), a session's placed tools run as WebAssembly components (a
# placed tool in a host environment is "runtime", in a service environment "config").
ToolKindName = Literal["config", "provider", "runtime", "component"]
APPROVAL_KINDS: tuple[ToolKindName, ...] = ("config", "provider", "runtime", "component")
MAX_APPROVAL_RULES = 256  # every call of every session is matched against them, in order
MAX_PATTERNS = 64  # per rule
# A tool name pattern: a tool name's characters with `*` (any run) and `?` (one character);
# no `[` classes, so a pattern is read the same way by everyone who reads the config.
PATTERN = re.compile(r"^[a-zA-Z0-9_*?]{1,64}$")


class ApprovalRule(StrictModel):
    """Calls that match every condition given wait for a decision (`approval_timeout_seconds`).

    `tools`: patterns on the name the model sees (default: every name); `kinds`: of
    APPROVAL_KINDS (default: all); `providers`: installed providers whose bindings and
    provider-backed tools match (default: any tool, provider-backed or not); `tenants`
    (default: every tenant)."""

    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1, max_length=MAX_PATTERNS)
    kinds: list[ToolKindName] = Field(default_factory=lambda: list(APPROVAL_KINDS), min_length=1)
    providers: list[str] | None = Field(default=None, min_length=1)
    tenants: list[str] | None = Field(default=None, min_length=1)
    approval_timeout_seconds: int = Field(default=600, ge=1, le=MAX_APPROVAL_SECONDS)

    @field_validator("tools")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not PATTERN.fullmatch(pattern):
                raise ValueError(
                    f"tool pattern {pattern!r} must be 1-64 of letters, digits, '_', '*' (any run) and '?' (one)"
                )
        return value

    def matches(self, *, tenant: str, name: str, kind: ToolKindName, provider: str) -> bool:
        """Whether a call of `name` (of `kind`, served by `provider` or "" for none) by
        `tenant` falls under this rule."""
        if kind not in self.kinds:
            return False
        if self.tenants is not None and tenant not in self.tenants:
            return False
        if self.providers is not None and provider not in self.providers:
            return False
        return any(fnmatchcase(name, pattern) for pattern in self.tools)
