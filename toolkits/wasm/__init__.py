"""WebAssembly components for Brain's "brain" environment: a component implementing the tool
world (wit/tool.wit) runs one call in a worker process, within a wall-clock deadline, a linear
memory cap and instruction fuel, with WASI holding nothing but the workspace grants of its
binding, and emits extension events that the caller commits before the component continues.

`check_component(path)` loads a component at startup (compiling and caching it) and returns its
tool names; `run_component(path, tool=..., ...)` runs one call and returns its ComponentOutcome,
in a worker started for it or a spare of `SpareWorkers` started ahead for its component.
"""

from __future__ import annotations

from toolkits.wasm.runner import check_component, default_cache_dir, run_component
from toolkits.wasm.spares import SpareWorkers
from toolkits.wasm.types import (
    GUEST_WORKSPACE,
    MAX_OUTPUT_BYTES,
    ComponentError,
    ComponentLimits,
    ComponentOutcome,
    EmitCallback,
    WorkspaceGrant,
)

__all__ = [
    "GUEST_WORKSPACE",
    "MAX_OUTPUT_BYTES",
    "ComponentError",
    "ComponentLimits",
    "ComponentOutcome",
    "EmitCallback",
    "SpareWorkers",
    "WorkspaceGrant",
    "check_component",
    "default_cache_dir",
    "run_component",
]
