"""Host pools with real instant-runner children: sharing within max_shared and max_hosts."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

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


async def test_attaches_waiting_for_a_starting_host_share_it_at_once(tmp_path: Path) -> None:
    # given: one host allowed, shared by four sessions
    config = Harness(command=[sys.executable, INSTANT_RUNNER], max_shared=4, max_hosts=1)
    pool = HostPool("instant", config, workroot=tmp_path / "hosts", telemetry=Telemetry())

    # when: four sessions attach at once; three find the only host still starting
    try:
        attachments = await asyncio.wait_for(
            asyncio.gather(*(pool.attach(Handler(), open_params(tmp_path / f"s{n}"), tenant="acme") for n in range(4))),
            timeout=20,
        )

        # then: all four share the one host, without waiting for the capacity timeout
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


async def test_sessions_arriving_together_share_one_starting_host_when_more_are_allowed(tmp_path: Path) -> None:
    # given: room for four hosts, each shared by four sessions
    config = Harness(command=[sys.executable, INSTANT_RUNNER], max_shared=4, max_hosts=4)
    pool = HostPool("instant", config, workroot=tmp_path / "hosts", telemetry=Telemetry())

    # when: four sessions of one tenant attach at once on a pool with no host yet
    try:
        attachments = await asyncio.wait_for(
            asyncio.gather(*(pool.attach(Handler(), open_params(tmp_path / f"s{n}"), tenant="acme") for n in range(4))),
            timeout=20,
        )

        # then: one host starts and takes all four, rather than one host each
        assert len(pool.hosts) == 1
        assert {attachment.host for attachment in attachments} == {pool.hosts[0]}
        assert len(pool.hosts[0].attachments) == 4
    finally:
        await pool.close()
