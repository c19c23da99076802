"""Spare workers: started ahead with the component loaded, each used for one call only, never
holding anything of an earlier call, and gone with their owner."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.wasm.conftest import COMPONENT, LIMITS, Recorder, worker_processes
from toolkits.wasm import ComponentOutcome, SpareWorkers, WorkspaceGrant, run_component
from toolkits.wasm.frames import encode_frame, read_frame
from toolkits.wasm.spares import spawn_worker


async def _read(spares: SpareWorkers, workspace: Path, path: str) -> ComponentOutcome:
    return await run_component(
        COMPONENT,
        tool="read_file",
        input={"path": path},
        config={},
        limits=LIMITS,
        grants=[WorkspaceGrant(workspace, "read")],
        emit=Recorder(),
        cache_dir=spares.cache_dir,
        spares=spares,
    )


async def _spares_ready(spares: SpareWorkers, count: int) -> list[int]:
    for _ in range(500):
        if len(spares.pids()) == count:
            return spares.pids()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} spares expected, found {spares.pids()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return pid in worker_processes()


async def test_a_call_takes_the_spare_started_for_it_and_a_new_one_waits_behind(
    cache_dir: Path, workspace: Path, tmp_path: Path
) -> None:
    spares = SpareWorkers(1, cache_dir=cache_dir)
    (workspace / "first.txt").write_text("one")
    other = tmp_path / "other"
    other.mkdir()
    (other / "second.txt").write_text("two")
    try:
        # given: a first call (no spare yet) leaves one spare prepared behind it
        assert await _read(spares, workspace, "first.txt") == ComponentOutcome(
            "ok", {"path": "first.txt", "bytes": 3, "text": "one"}, None
        )
        (spare,) = await _spares_ready(spares, 1)
        # when: the next call, granted another workspace, runs
        outcome = await _read(spares, other, "second.txt")
        # then: it ran in that spare, which is gone after its one call, and a new spare waits
        assert outcome == ComponentOutcome("ok", {"path": "second.txt", "bytes": 3, "text": "two"}, None)
        assert not _alive(spare)
        (replacement,) = await _spares_ready(spares, 1)
        assert replacement != spare
        # and a spare holds no grant of an earlier call: the first workspace is not the second's
        refused = await _read(spares, other, "first.txt")
        assert refused.status == "error" and "first.txt" in str(refused.error)
    finally:
        await spares.close()
    assert worker_processes() == []


async def test_spares_stay_within_capacity_and_a_capacity_of_0_keeps_none(cache_dir: Path, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("x")
    kept = SpareWorkers(1, cache_dir=cache_dir)
    none = SpareWorkers(0, cache_dir=cache_dir)
    try:
        await asyncio.gather(*(_read(kept, workspace, "notes.txt") for _ in range(3)))
        await _spares_ready(kept, 1)
        await asyncio.sleep(0.2)  # replacements still starting would show here
        assert len(kept.pids()) == 1
        assert (await _read(none, workspace, "notes.txt")).status == "ok"
        assert none.pids() == []
    finally:
        await kept.close()
    assert worker_processes() == []


async def test_a_spare_exits_by_itself_when_its_owner_goes_away(cache_dir: Path) -> None:
    # given: a spare prepared for the component, never given a call
    process = await spawn_worker()
    assert process.stdin is not None
    process.stdin.write(encode_frame({"type": "prepare", "component": str(COMPONENT), "cache_dir": str(cache_dir)}))
    # when: its stdin closes, as it does when the server exits or is killed
    process.stdin.close()
    # then: it exits cleanly on its own
    assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_a_spare_given_another_components_call_refuses_it(cache_dir: Path, tmp_path: Path) -> None:
    process = await spawn_worker()
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(encode_frame({"type": "prepare", "component": str(COMPONENT), "cache_dir": str(cache_dir)}))
    run = {
        "type": "run",
        "component": str(tmp_path / "other.wasm"),
        "tool": "read_file",
        "input": "{}",
        "config": "{}",
        "limits": {"deadline_s": 10, "memory_bytes": 64 << 20, "fuel": 10**9},
        "remaining_s": 10,
        "grants": [],
    }
    process.stdin.write(encode_frame(run))
    reply = await asyncio.wait_for(read_frame(process.stdout, limit=1 << 20), 30)
    assert reply == {"type": "outcome", "status": "error", "error": "the worker was prepared for another component"}
    assert await asyncio.wait_for(process.wait(), 30) == 0
