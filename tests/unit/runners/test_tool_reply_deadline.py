"""The loop runner waits for Brain's reply to a tool.call with a deadline, never forever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runners.loop.errors import BrainFailure
from runners.loop.host import TOOL_REPLY_SECONDS, Host
from runners.loop.messages import ToolCall


class RecordingWriter:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    async def send(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)


async def test_a_tool_call_without_a_reply_fails_at_the_deadline() -> None:
    # given
    writer = RecordingWriter()
    host = Host(writer, tool_reply_seconds=0.05)  # type: ignore[arg-type]  # a FrameWriter stand-in

    # when
    with pytest.raises(BrainFailure, match="got no reply from Brain within 0.05 s"):
        await host.call_tool("a1", "t1", ToolCall("c1", "echo", {}))

    # then: the call was sent once, and a reply arriving now is dropped, not misrouted
    assert [frame["method"] for frame in writer.frames] == ["tool.call"]
    host._resolve_call({"attachment": "a1", "id": writer.frames[0]["id"], "result": {}})


async def test_a_reply_before_the_deadline_is_the_result() -> None:
    # given
    writer = RecordingWriter()
    host = Host(writer, tool_reply_seconds=5)  # type: ignore[arg-type]  # a FrameWriter stand-in
    call = asyncio.ensure_future(host.call_tool("a1", "t1", ToolCall("c1", "echo", {})))
    await asyncio.sleep(0)

    # when
    host._resolve_call(
        {"attachment": "a1", "id": writer.frames[0]["id"], "result": {"content": [{"type": "text", "text": "hi"}]}}
    )

    # then
    assert (await call).text == "hi"


def test_the_default_deadline_outlasts_the_longest_binding_timeout() -> None:
    assert TOOL_REPLY_SECONDS > 86_400
