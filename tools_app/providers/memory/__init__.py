"""The built-in `memory` tool: the provider (provider.py) and its queries (db.py). Operators
install it as `tools_app.providers.memory.MemoryProvider`; the Memory model stays in
tools_app.models, the app's one models module."""

from __future__ import annotations

from .provider import MAX_MEMORY_BYTES, MAX_RECALL, MemoryOptions, MemoryProvider

__all__ = ["MAX_MEMORY_BYTES", "MAX_RECALL", "MemoryOptions", "MemoryProvider"]
