"""The latency floor: a bare ASGI app on Daphne that accepts a POST and pushes one SSE event.

Nothing Brain-specific runs here: no auth, no log, no runtime. Brain's turn latency is
reported as a ratio against this.
"""

from __future__ import annotations

import asyncio
from typing import Any

_streams: set[asyncio.Queue[bytes]] = set()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/ping":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if scope["method"] == "POST":
        message = await receive()
        body = message.get("body", b"")
        for stream in _streams:
            stream.put_nowait(b"event: idle\ndata: " + body + b"\n\n")
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"ok":true}'})
        return
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    _streams.add(queue)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"", "more_body": True})

    async def pump() -> None:
        while True:
            await send({"type": "http.response.body", "body": await queue.get(), "more_body": True})

    task = asyncio.get_running_loop().create_task(pump())
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    finally:
        task.cancel()
        _streams.discard(queue)
