"""Pieces every wire renderer shares: paced steps, deterministic ids, SSE framing, split arguments."""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["IdSource", "Step", "pieces", "signature", "sse"]

# Tool call arguments stream in this many pieces, so clients must accumulate them.
ARGUMENT_PIECES = 2


@dataclass(frozen=True, slots=True)
class Step:
    data: bytes
    is_text_delta: bool = False


class IdSource:
    """Deterministic, process-unique ids (`call_1`, `msg_2`, ...) for one server run."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def next(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter)}"


def sse(data: dict[str, Any], *, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, separators=(",", ":")) + "\n\n").encode()


def pieces(text: str) -> list[str]:
    size = max(1, -(-len(text) // ARGUMENT_PIECES))
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


def signature(text: str) -> str:
    """Stands in for the provider's opaque signature / encrypted reasoning blob."""
    return "sig:" + base64.b64encode(text.encode()).decode()
