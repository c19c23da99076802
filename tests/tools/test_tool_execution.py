"""Sequential or parallel tool execution, chosen per harness: a turn's calls run one at a time
in the model's order, or all at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from brain import RuntimeTool

from tests.fixtures.server import INSTANT_RUNNER, BrainServer, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"


class Probe:
    """A runtime tool that notes how many calls run at once and in which order they start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.started: list[int] = []

    def run(self, arguments: Any, context: Any) -> dict[str, int]:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.started.append(arguments["n"])
        time.sleep(0.3)
        with self.lock:
            self.active -= 1
        return {"n": arguments["n"]}


@pytest.mark.parametrize(("mode", "most"), [("sequential", 1), ("parallel", 3)])
def test_a_turns_calls_run_as_the_harness_is_configured(
    brain_factory: Callable[..., BrainServer], mode: str, most: int
) -> None:
    server = brain_factory(harnesses={"instant": {"command": INSTANT_RUNNER, "tool_execution": mode}})
    probe = Probe()
    tool = RuntimeTool("probe", "probe", {"type": "object"}, probe.run)
    client = server.sdk()
    try:
        session = client.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[tool])
        accepted = send_ok(server, session["id"], 'tools:3 runtime_probe {"n": 1}')
        events = wait_for_turn_end(server, session["id"], accepted["id"])
    finally:
        client.dispose()
    results = [event["data"] for event in events if event["type"] == "tool.result"]
    assert [result["outcome"] for result in results] == ["ok"] * 3
    assert probe.most == most
    # sequential: each call starts once the previous one has its result (0.3 s apart)
    times = [_seconds(event["time"]) for event in events if event["type"] == "tool.result"]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    if mode == "sequential":
        assert min(gaps) >= 0.25, gaps
    else:
        assert max(gaps) < 0.25, gaps


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def test_an_interrupt_cancels_the_calls_still_waiting_their_turn(brain_factory: Callable[..., BrainServer]) -> None:
    server = brain_factory(harnesses={"instant": {"command": INSTANT_RUNNER, "tool_execution": "sequential"}})
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def slow(arguments: Any, context: Any) -> dict[str, bool]:
        ran.append(1)
        started.set()
        release.wait(20)
        return {"done": True}

    client = server.sdk()
    try:
        tool = RuntimeTool("slow", "slow", {"type": "object"}, slow)
        session = client.create({"harness": "instant", "config": {"model": MODEL, "tools": []}}, runtime_tools=[tool])
        accepted = send_ok(server, session["id"], "tools:3 runtime_slow {}")
        assert started.wait(20)
        client.interrupt(session["id"])
        events = wait_for_turn_end(server, session["id"], accepted["id"])
        release.set()
    finally:
        release.set()
        client.dispose()
    outcomes = sorted(event["data"]["outcome"] for event in events if event["type"] == "tool.result")
    assert outcomes == ["cancelled", "cancelled", "cancelled"]
    assert len(ran) == 1  # the two waiting calls never reached the client
    assert events[-1]["data"]["status"] == "interrupted"
