"""Session tool bindings (`config.bindings`): checks.py validates a create request's bindings;
a loaded session's bindings are two kinds of the call path: runtime.py (runtime executor tools)
and providers.py (installed providers' operations)."""

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
from .providers import CredentialSource, ProviderBindings, no_credentials
from .runtime import RUNTIME_CALL_SECONDS, RuntimeTools

__all__ = [
    "ALIAS",
    "RUNTIME_CALL_SECONDS",
    "CheckedBindings",
    "CredentialSource",
    "SavedBinding",
    "ProviderBindings",
    "RuntimeTools",
    "check_bindings",
    "check_runtime_tools",
    "compile_runtime_tools",
    "runtime_descriptors",
    "no_credentials",
]
