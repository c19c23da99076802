"""Sync state for external persistence (filled in by the persistence work)."""

from __future__ import annotations
