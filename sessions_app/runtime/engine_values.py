"""Values the session runtime's engine hands out: its load figures and the error of a session
that cannot load. No imports of the engine."""

from __future__ import annotations

from dataclasses import dataclass

from foundation.errors import BrainError

__all__ = ["SessionDamaged", "Stats"]


class SessionDamaged(BrainError):
    """A session whose log or checkpoint journal does not decode: it alone cannot load (500)."""


@dataclass(frozen=True, slots=True)
class Stats:
    loaded: int
    running: int
    attached: int
    hosts: int
