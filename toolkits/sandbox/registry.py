"""The sandbox backends by name: the one place a backend plugs in.

Each entry names the backend's class (built once; a backend on this machine as
`Class(data_dir=PATH)`, PATH a directory it may keep private files in, a cloud one as `Class()`),
the binding parameters it takes with the environment variables the standalone service reads
them from, and the same for its credential's keys (the names the published client lowers to).
A new backend is one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from .backend import SandboxBackend

__all__ = ["BACKENDS", "BackendEntry", "build_backend"]


@dataclass(frozen=True, slots=True)
class BackendEntry:
    path: str  # dotted path of a class implementing SandboxBackend
    settings_env: Mapping[str, str]  # binding parameter -> the service's environment variable
    credential_env: Mapping[str, str]  # credential key -> the service's environment variable
    on_this_machine: bool = False  # built with data_dir (its sandboxes' private directories)


BACKENDS: Mapping[str, BackendEntry] = {
    "local": BackendEntry("toolkits.sandbox.local.LocalBackend", {}, {}, on_this_machine=True),
    "modal": BackendEntry(
        "toolkits.sandbox.modal.ModalBackend",
        {"app": "MODAL_APP", "image": "MODAL_IMAGE"},
        {"tokenId": "MODAL_TOKEN_ID", "tokenSecret": "MODAL_TOKEN_SECRET"},
    ),
    "e2b": BackendEntry("toolkits.sandbox.e2b.E2BBackend", {"template": "E2B_TEMPLATE"}, {"apiKey": "E2B_API_KEY"}),
    "daytona": BackendEntry(
        "toolkits.sandbox.daytona.DaytonaBackend",
        {"apiUrl": "DAYTONA_API_URL", "target": "DAYTONA_TARGET"},
        {"apiKey": "DAYTONA_API_KEY"},
    ),
}


def build_backend(name: str, *, data_dir: Path, connection: Mapping[str, object] | None = None) -> SandboxBackend:
    """The backend `name`, built; ValueError (one line) when it is not known or not usable
    here (for `local`: no working bubblewrap). `connection`: keywords for the backend's
    constructor, given only in code (the tests point a cloud backend at a loopback fake)."""
    entry = BACKENDS.get(name)
    if entry is None:
        raise ValueError(f"unknown sandbox backend {name!r} (known: {', '.join(sorted(BACKENDS))})")
    module_name, _, class_name = entry.path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"sandbox backend {name!r} is not installed: {type(exc).__name__}: {exc}") from exc
    keywords = dict(connection or {})
    if entry.on_this_machine:
        keywords["data_dir"] = data_dir
    return cast(SandboxBackend, cls(**keywords))
