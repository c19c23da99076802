"""Host pools with real instant-runner children: sharing within max_shared and max_hosts."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from foundation.hostconfig import Harness
from foundation.telemetry import Telemetry
from runners.protocol import OpenParams
from sessions_app.harness.pool import HostPool

INSTANT_RUNNER = str(Path(__file__).resolve().parents[3] / "support" / "instant_runner.py")


class Handler:
    def on_runner_event(self, turn: str, name: str, data: dict[str, Any]) -> None:
        pass

    async def on_tool_call(self, turn: str, params: dict[str, Any]) -> dict[str, object]:
        return {"content": [{"type": "text", "text": "unused"}], "is_error": True}

    def on_host_lost(self, reason: str) -> None:
        pass

    def on_frame_error(self, reason: str) -> None:
        pass


def open_params(directory: Path) -> OpenParams:
    return {
        "session_id": directory.name,
        "dir": str(directory),
        "config": {"model": "openai/test", "tools": []},
        "tools": [],
        "provider": {"api_key": ""},
    }


@pytest.mark.parametrize("max_hosts", [1, 4], ids=["one_host_allowed_case", "more_hosts_allowed_case"])
async def test_sessions_arriving_together_share_the_one_host_starting_for_them(tmp_path: Path, max_hosts: int) -> None:
    # given: hosts shared by four sessions, one host allowed or more
    config = Harness(command=[sys.executable, INSTANT_RUNNER], max_shared=4, max_hosts=max_hosts)
    pool = HostPool("instant", config, workroot=tmp_path / "hosts", telemetry=Telemetry())

    # when: four sessions of one tenant attach at once on a pool with no host yet
    try:
        attachments = await asyncio.wait_for(
            asyncio.gather(*(pool.attach(Handler(), open_params(tmp_path / f"s{n}"), tenant="acme") for n in range(4))),
            timeout=20,
        )

        # then: one host starts and takes all four, at once rather than after the capacity wait,
        # and rather than one host each
        assert len(pool.hosts) == 1
        assert {attachment.host for attachment in attachments} == {pool.hosts[0]}
        assert len(pool.hosts[0].attachments) == 4
    finally:
        await pool.close()


async def test_sessions_of_different_tenants_never_share_a_host(tmp_path: Path) -> None:
    # given: room for four sessions per host
    config = Harness(command=[sys.executable, INSTANT_RUNNER], max_shared=4, max_hosts=4)
    pool = HostPool("instant", config, workroot=tmp_path / "hosts", telemetry=Telemetry())

    # when
    try:
        acme = [await pool.attach(Handler(), open_params(tmp_path / f"a{n}"), tenant="acme") for n in range(2)]
        globex = await pool.attach(Handler(), open_params(tmp_path / "g"), tenant="globex")

        # then
        assert acme[0].host is acme[1].host
        assert globex.host is not acme[0].host
        assert (acme[0].host.tenant, globex.host.tenant) == ("acme", "globex")
    finally:
        await pool.close()
