"""Session tool bindings (`config.bindings`): checks.py validates a create request's bindings;
session.py serves a loaded session's binding tools as a kind of the call path."""

from __future__ import annotations

from .checks import (
    ALIAS,
    CheckedBindings,
    SavedBinding,
    check_bindings,
    check_runtime_tools,
    compile_runtime_tools,
    runtime_descriptors,
)
from .session import RUNTIME_CALL_SECONDS, CredentialSource, SessionBindings, no_credentials

__all__ = [
    "ALIAS",
    "RUNTIME_CALL_SECONDS",
    "CheckedBindings",
    "CredentialSource",
    "SavedBinding",
    "SessionBindings",
    "check_bindings",
    "check_runtime_tools",
    "compile_runtime_tools",
    "runtime_descriptors",
    "no_credentials",
]
