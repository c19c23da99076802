"""A session's configuration, checked as `POST /sessions` checks it: by create_session, and by
a session.configure for the configuration a change would make (sessions_app.configuration)."""

from __future__ import annotations

from typing import Any

from foundation.errors import InvalidRequest

from .runtime.engine import Engine

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_MODEL_CHARS",
    "MAX_TOOLS",
    "REASONING_EFFORTS",
    "check_config",
    "unavailable",
]

MAX_MODEL_CHARS = 256  # spec: config.model up to 256 characters
MAX_TOOLS = 128  # spec: up to 128 tools per session
MAX_KEY_BYTES = 128  # spec: idempotency keys up to 128 bytes
REASONING_EFFORTS = frozenset({"off", "minimal", "low", "medium", "high", "xhigh", "max"})
# An unavailable tool's refusal quotes the names the request gave: at most this many, each cut to
# the longest tool name a config may declare (foundation.hostconfig.tools.TOOL_NAME).
MAX_QUOTED_TOOLS = 5
MAX_QUOTED_TOOL_CHARS = 64


def check_config(engine: Engine, config: dict[str, Any]) -> str:
    """The config's model provider; 400 for a model that is not provider/model of a configured
    provider, an unknown reasoning effort, too many or repeated tools, or instructions longer
    than input_bytes. (Tools the tenant may not use are the caller's check: it needs the
    registry, off this function's synchronous path.)"""
    model = str(config["model"])
    provider, _, model_name = model.partition("/")
    if not provider or not model_name or len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest("config.model must be provider/model, up to 256 characters")
    if provider not in engine.config.providers:
        raise InvalidRequest(f"model provider {provider!r} is not configured")
    effort = config.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise InvalidRequest("config.reasoning_effort must be one of " + ", ".join(sorted(REASONING_EFFORTS)))
    tools = config["tools"]
    if len(tools) > MAX_TOOLS:
        raise InvalidRequest("config.tools allows at most 128 tools")
    if len(set(tools)) != len(tools):
        raise InvalidRequest("config.tools lists a tool twice")
    instructions = config.get("instructions")
    if instructions is not None and len(instructions.encode()) > engine.limits.input_bytes:
        raise InvalidRequest("config.instructions exceeds input_bytes")
    return provider


def unavailable(names: list[str]) -> str:
    """`tools 'a', 'b' are not available to this tenant`: the names the request gave (so nothing
    is said of other tenants' tools), the first few, each cut to a tool name's length."""
    quoted = ", ".join(repr(name[:MAX_QUOTED_TOOL_CHARS]) for name in names[:MAX_QUOTED_TOOLS])
    more = f" and {len(names) - MAX_QUOTED_TOOLS} more" if len(names) > MAX_QUOTED_TOOLS else ""
    if not names:  # an admin binding added since the first look
        return "a requested tool is not available to this tenant"
    if len(names) == 1:
        return f"tool {quoted} is not available to this tenant"
    return f"tools {quoted}{more} are not available to this tenant"
