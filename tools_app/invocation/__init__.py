"""The one path of a tool call (path.py) for every kind of tool, what it ends in (results.py),
and the dispatch of config tools (config_tools.py) and installed providers (provider_calls.py).
Session bindings plug in from tools_app.bindings."""

from __future__ import annotations

from .path import ApprovalGate, CallContext, Target, ToolKind, invoke_tool
from .results import CallCancelled, CallResult, Invocation, Outcome, error_result

__all__ = [
    "ApprovalGate",
    "CallCancelled",
    "CallContext",
    "CallResult",
    "Invocation",
    "Outcome",
    "Target",
    "ToolKind",
    "error_result",
    "invoke_tool",
]
