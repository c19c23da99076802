"""How many response bytes a connection still holds unsent, for SSE backpressure.

ASGI has no backpressure signal, and Daphne's send() never blocks: bytes pile up in the Twisted
transport. Daphne's `send` is `partial(Server.handle_reply, protocol)`, which leads to that
transport; other servers report 0 and rely on the subscriber bounds alone.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["abort_connection", "pending_bytes_probe"]


def _transport(send: object) -> object:
    args = getattr(send, "args", ())
    protocol = args[0] if args else None
    channel = getattr(protocol, "channel", None)
    return getattr(channel, "transport", None)


def pending_bytes_probe(send: object) -> Callable[[], int]:
    transport = _transport(send)

    def pending() -> int:
        if transport is None:
            return 0
        buffered = len(getattr(transport, "dataBuffer", b"")) - getattr(transport, "offset", 0)
        return buffered + getattr(transport, "_tempDataLen", 0)

    return pending


def abort_connection(send: object) -> None:
    abort = getattr(_transport(send), "abortConnection", None)
    if callable(abort):
        abort()
