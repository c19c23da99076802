"""Writes to a harness child's stdin share the request's deadline; a child that stops reading
cannot hang a turn or grow Brain's memory. Real child processes that never read their stdin."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from runners.protocol import MAX_FRAME
from sessions_app.harness import host as host_module
from sessions_app.harness.host import UNREAD_STDIN_REASON, HarnessHost, HostLost

DEAF_RUNNER = str(Path(__file__).resolve().parents[3] / "support" / "deaf_runner.py")
BIG_TEXT = "x" * (MAX_FRAME - 1024)  # just under the frame cap: far more than a pipe buffers
DEADLINE = 1.0
SLACK = 1.5  # scheduling on a busy machine; a hang would last until the test's own timeout


class Handler:
    def __init__(self) -> None:
        self.lost: list[str] = []

    def on_runner_event(self, turn: str, name: str, data: dict[str, Any]) -> None:
        pass

    async def on_tool_call(self, turn: str, params: dict[str, Any]) -> dict[str, object]:
        return {"content": [{"type": "text", "text": "unused"}], "is_error": True}

    def on_host_lost(self, reason: str) -> None:
        self.lost.append(reason)

    def on_frame_error(self, reason: str) -> None:
        pass


StartHost = Callable[..., Awaitable[HarnessHost]]


@pytest.fixture
async def start_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StartHost]:
    """Starts deaf runners (extra arguments go to the runner); each is stopped after the test."""
    monkeypatch.setattr(host_module, "STOP_GRACE_SECONDS", 0.2)  # the runner ignores stdin EOF
    hosts: list[HarnessHost] = []

    async def starter(*arguments: str) -> HarnessHost:
        host = HarnessHost(
            harness="deaf",
            tenant="acme",
            command=[sys.executable, DEAF_RUNNER, *arguments],
            workdir=tmp_path / f"host-{len(hosts)}",
            max_shared=4,
            max_active_turns=4,
            on_exit=lambda host: None,
        )
        await host.start()
        hosts.append(host)
        return host

    yield starter
    for host in hosts:
        await host.stop()


async def test_a_request_to_a_child_that_stops_reading_times_out_within_its_deadline(start_host: StartHost) -> None:
    # given
    host = await start_host()
    host.attachments["a"] = Handler()
    started = time.monotonic()

    # when: the frame cannot fit in the pipe, so writing it waits on the child
    with pytest.raises(TimeoutError):
        await host.request("a", "prompt", {"text": BIG_TEXT}, turn="t1", timeout=DEADLINE)

    # then: like a late reply, the request failed at its deadline and the host lives on
    assert DEADLINE <= time.monotonic() - started < DEADLINE + SLACK
    assert host.lost is False


async def test_a_request_queued_behind_a_stuck_write_also_times_out(start_host: StartHost) -> None:
    # given: a first request whose write is stuck in the pipe
    host = await start_host()
    host.attachments["a"] = Handler()
    with pytest.raises(TimeoutError):
        await host.request("a", "prompt", {"text": BIG_TEXT}, turn="t1", timeout=DEADLINE)
    started = time.monotonic()

    # when: a small request (an interrupt) follows it
    with pytest.raises(TimeoutError):
        await host.request("a", "interrupt", None, turn="t1", timeout=DEADLINE)

    # then
    assert time.monotonic() - started < DEADLINE + SLACK


async def test_a_child_that_leaves_too_much_unread_is_lost(
    start_host: StartHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a limit below one big frame
    monkeypatch.setattr(host_module, "MAX_UNREAD_STDIN", MAX_FRAME // 2)
    host = await start_host()
    handler = host.attachments["a"] = Handler()

    # when
    with pytest.raises(HostLost, match=UNREAD_STDIN_REASON):
        await host.request("a", "prompt", {"text": BIG_TEXT}, turn="t1", timeout=DEADLINE)

    # then: its sessions learn why, and later requests fail at once
    assert host.lost is True
    assert handler.lost == [UNREAD_STDIN_REASON]
    with pytest.raises(HostLost):
        await host.request("a", "interrupt", None, turn="t1", timeout=DEADLINE)


async def test_refusals_a_flooding_child_never_reads_cannot_grow_without_bound(
    start_host: StartHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a child that sends malformed tool calls and never reads the refusals
    monkeypatch.setattr(host_module, "MAX_UNREAD_STDIN", 256 * 1024)
    handler = Handler()

    # when
    host = await start_host("--flood", "20000")
    host.attachments["a"] = handler
    deadline = time.monotonic() + 10
    while not host.lost and time.monotonic() < deadline:
        await asyncio.sleep(0.05)

    # then
    assert host.lost is True
    assert handler.lost == [UNREAD_STDIN_REASON]
