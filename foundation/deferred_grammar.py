"""jsonschema's `iri` and `iri-reference` format checks come from `rfc3987_syntax`, which builds
its Lark grammar when imported: about 1.9 s of CPU in every process that imports jsonschema (the
server, each management command, each worker), more than the rest of startup together. This
puts a stand-in module in its place whose `is_valid_syntax` imports the real one on first use,
so only a process that meets an IRI format pays for the grammar, once (on the schema pool, never
on the event loop: tenant schemas are compiled and validated there).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Callable

__all__ = ["defer_rfc3987_grammar"]

MODULE = "rfc3987_syntax"


def defer_rfc3987_grammar() -> None:
    """Install the stand-in unless the real module (or the stand-in) is already imported."""
    if MODULE in sys.modules or importlib.util.find_spec(MODULE) is None:
        return  # already loaded, or not installed: jsonschema then leaves the IRI formats unchecked
    lock = threading.Lock()
    real: list[Callable[[str, str], bool]] = []

    def is_valid_syntax(syntax: str, value: str) -> bool:
        if not real:
            with lock:
                if not real:
                    real.append(_import_real())
        return real[0](syntax, value)

    stand_in = types.ModuleType(MODULE, "a stand-in that imports rfc3987_syntax on first use")
    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    sys.modules[MODULE] = stand_in


def _import_real() -> Callable[[str, str], bool]:
    stand_in = sys.modules.pop(MODULE)
    try:
        module = importlib.import_module(MODULE)
    finally:
        sys.modules[MODULE] = stand_in  # later importers keep the stand-in, which now delegates
    checker: Callable[[str, str], bool] = module.is_valid_syntax
    return checker
