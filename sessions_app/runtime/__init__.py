"""The session runtime of this process: one Engine, created when the server starts serving."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["current_engine", "install_engine"]

_engine: Engine | None = None


def install_engine(engine: Engine | None) -> None:
    global _engine
    _engine = engine


def current_engine() -> Engine:
    if _engine is None:
        raise RuntimeError("the session runtime is not running")
    return _engine
