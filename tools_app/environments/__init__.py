"""Tool environments: a session binds environments of the host config and places tools in them
(checks.py), calls reach the one placement the harness named (kind.py), implementations emit
committed extension events (events.py), brain environments run WebAssembly components
(components.py). Modules are imported by name: this package imports nothing at load."""

from __future__ import annotations
