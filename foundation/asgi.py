"""The ASGI shapes every HTTP layer of the project passes along (ASGI 3.0): one definition, used by
the wiring's middleware, the API handler, CORS and fleet routing. Imports no app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["Message", "Receive", "Scope", "Send"]

Scope = MutableMapping[str, Any]  # a connection's scope; the layers in front add `brain_*` keys
Message = dict[str, Any]  # one ASGI event, received or sent
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
