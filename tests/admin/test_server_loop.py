"""Admin views run in a worker thread; what they ask of the runtime runs on the server's loop, in a
context of its own, so the tasks it starts outlive the view (as under Django's ASGI handler)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async

from foundation.errors import Conflict
from sessions_app.admin import on_server_loop


async def test_a_task_the_runtime_starts_for_an_admin_view_outlives_the_view() -> None:
    # given: an operation that leaves a task behind, which later uses a thread-sensitive unit (as a
    # status write does)
    loop = asyncio.get_running_loop()
    left: list[asyncio.Task[int]] = []

    async def operation() -> str:
        assert asyncio.get_running_loop() is loop  # the server's loop, not one of the view's own

        async def later() -> int:
            await asyncio.sleep(0.05)
            return await sync_to_async(threading.get_ident)()

        left.append(loop.create_task(later()))
        return "done"

    def view() -> str:
        return on_server_loop(operation)

    # when: the view runs as Django's ASGI handler runs it, and returns
    async with ThreadSensitiveContext():
        result = await sync_to_async(view)()

    # then: in the view's context it would fail ("CurrentThreadExecutor already quit or is broken")
    assert result == "done"
    assert isinstance(await asyncio.wait_for(left[0], 5), int)


async def test_a_refusal_of_the_runtime_reaches_the_view() -> None:
    # given
    async def operation() -> None:
        raise Conflict("session is closed")

    # when / then
    with pytest.raises(Conflict, match="session is closed"):
        async with ThreadSensitiveContext():
            await sync_to_async(on_server_loop)(operation)
