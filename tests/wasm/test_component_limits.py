"""A component cannot outrun its limits: an endless loop runs out of fuel or meets the deadline,
a memory bomb meets the memory cap, events and output are bounded, a cancelled call kills its
worker. Each ends with its outcome and one readable line, no worker behind, the next call fine."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.wasm.conftest import LIMITS, Recorder, assert_the_next_call_works, call, worker_processes
from toolkits.events import MAX_EVENT_BYTES, MAX_EVENTS_PER_CALL
from toolkits.wasm import (
    ComponentError,
    ComponentLimits,
    ComponentOutcome,
    WorkspaceGrant,
    check_component,
    run_component,
)

MIB = 1024 * 1024


async def test_an_endless_loop_runs_out_of_fuel(cache_dir: Path, workspace: Path) -> None:
    limits = ComponentLimits(deadline_s=30.0, memory_bytes=128 * MIB, fuel=200_000_000)
    outcome = await call("spin", {}, cache_dir=cache_dir, grants=[], limits=limits)
    assert outcome == ComponentOutcome("error", None, "fuel exhausted")
    await assert_the_next_call_works(cache_dir, workspace)


async def test_an_endless_loop_with_fuel_to_spare_meets_the_deadline(cache_dir: Path, workspace: Path) -> None:
    limits = ComponentLimits(deadline_s=1.5, memory_bytes=128 * MIB, fuel=10**15)
    started = time.monotonic()
    outcome = await call("spin", {}, cache_dir=cache_dir, grants=[], limits=limits)
    print(f"deadline 1.5 s: outcome after {time.monotonic() - started:.2f} s")
    assert outcome == ComponentOutcome("timeout", None, "deadline 1.5 s passed")
    await assert_the_next_call_works(cache_dir, workspace)


async def test_a_commit_that_hangs_past_the_deadline_ends_the_call_as_timeout(cache_dir: Path, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("never read")
    limits = ComponentLimits(deadline_s=1.5, memory_bytes=128 * MIB, fuel=LIMITS.fuel)
    recorder = Recorder(delay_s=3600.0)
    grants = [WorkspaceGrant(workspace, "read")]
    outcome = await call(
        "read_file", {"path": "notes.txt"}, cache_dir=cache_dir, grants=grants, limits=limits, emit=recorder
    )
    assert outcome == ComponentOutcome("timeout", None, "deadline 1.5 s passed")
    assert recorder.events == []
    await assert_the_next_call_works(cache_dir, workspace)


async def test_a_memory_bomb_meets_the_memory_cap(cache_dir: Path, workspace: Path) -> None:
    limits = ComponentLimits(deadline_s=30.0, memory_bytes=64 * MIB, fuel=LIMITS.fuel)
    outcome = await call("hog_memory", {}, cache_dir=cache_dir, grants=[], limits=limits)
    assert outcome == ComponentOutcome("error", None, "memory limit 64 MiB exceeded")
    await assert_the_next_call_works(cache_dir, workspace)


async def test_a_cancelled_call_kills_its_worker_and_reports_cancelled(cache_dir: Path, workspace: Path) -> None:
    limits = ComponentLimits(deadline_s=60.0, memory_bytes=128 * MIB, fuel=10**15)
    task = asyncio.ensure_future(call("spin", {}, cache_dir=cache_dir, grants=[], limits=limits))
    for _ in range(500):  # until the worker runs
        await asyncio.sleep(0.01)
        if worker_processes():
            break
    assert len(worker_processes()) == 1
    await asyncio.sleep(0.3)
    task.cancel()
    assert await task == ComponentOutcome("cancelled", None, "the call was cancelled")
    await assert_the_next_call_works(cache_dir, workspace)


async def test_an_output_over_the_limit_is_an_error(cache_dir: Path, workspace: Path) -> None:
    outcome = await call("big_output", {"bytes": 2_000_000}, cache_dir=cache_dir, grants=[])
    assert outcome == ComponentOutcome("error", None, "output of 2000012 bytes exceeds 1024 KiB")
    await assert_the_next_call_works(cache_dir, workspace)


async def test_events_past_the_per_call_count_are_refused_and_not_committed(cache_dir: Path, workspace: Path) -> None:
    recorder = Recorder()
    outcome = await call("flood_events", {"count": 100}, cache_dir=cache_dir, grants=[], emit=recorder)
    refusal = f"a call emits at most {MAX_EVENTS_PER_CALL} events"
    assert outcome == ComponentOutcome("ok", {"committed": MAX_EVENTS_PER_CALL, "refusal": refusal}, None)
    assert [data["index"] for _kind, data in recorder.events] == list(range(MAX_EVENTS_PER_CALL))
    await assert_the_next_call_works(cache_dir, workspace)


async def test_an_event_over_the_commits_size_is_refused_and_not_committed(cache_dir: Path, workspace: Path) -> None:
    # the rule of toolkits.events, as Brain's commit applies it: the encoded data, at most 16 KiB
    recorder = Recorder()
    pad = MAX_EVENT_BYTES - len('{"index":0,"pad":""}')
    outcome = await call("flood_events", {"count": 2, "size": pad}, cache_dir=cache_dir, grants=[], emit=recorder)
    assert outcome == ComponentOutcome("ok", {"committed": 2, "refusal": None}, None)
    refusal = f"event data of {MAX_EVENT_BYTES + 1} bytes exceeds {MAX_EVENT_BYTES}"
    recorder = Recorder()
    outcome = await call("flood_events", {"count": 2, "size": pad + 1}, cache_dir=cache_dir, grants=[], emit=recorder)
    assert outcome == ComponentOutcome("ok", {"committed": 0, "refusal": refusal}, None)
    assert recorder.events == []
    await assert_the_next_call_works(cache_dir, workspace)


async def test_an_event_the_commit_refuses_reaches_the_component_as_its_error(cache_dir: Path, workspace: Path) -> None:
    def refuse(kind: str, data: dict[str, Any]) -> None:
        raise ValueError(f"kind {kind} is not accepted")

    (workspace / "notes.txt").write_text("x")
    grants = [WorkspaceGrant(workspace, "read")]
    outcome = await call(
        "read_file", {"path": "notes.txt"}, cache_dir=cache_dir, grants=grants, emit=Recorder(on_commit=refuse)
    )
    assert outcome == ComponentOutcome("error", None, "event read_started refused: kind read_started is not accepted")
    await assert_the_next_call_works(cache_dir, workspace)


def test_a_file_that_is_not_a_component_is_refused_with_a_clear_error(tmp_path: Path, cache_dir: Path) -> None:
    garbage = tmp_path / "garbage.wasm"
    garbage.write_bytes(b"not wasm at all")
    core = tmp_path / "core.wasm"
    core.write_bytes(b"\0asm\x01\0\0\0")  # an empty core module: WebAssembly, but no component
    refusals = {garbage: "it has no WebAssembly header", core: "it is a core module"}
    for path, reason in refusals.items():
        with pytest.raises(ComponentError) as refused:
            check_component(path, cache_dir=cache_dir)
        assert str(refused.value) == f"{path} is not a WebAssembly component: {reason}"
    with pytest.raises(ComponentError, match="is not a file"):
        check_component(tmp_path / "missing.wasm", cache_dir=cache_dir)
    assert worker_processes() == []


async def test_a_call_to_a_file_that_is_not_a_component_is_an_error_outcome(tmp_path: Path, cache_dir: Path) -> None:
    garbage = tmp_path / "garbage.wasm"
    garbage.write_bytes(b"not wasm at all")
    outcome = await run_component(
        garbage, tool="read_file", input={}, config={}, limits=LIMITS, grants=[], emit=Recorder(), cache_dir=cache_dir
    )
    reason = "it has no WebAssembly header"
    assert outcome == ComponentOutcome("error", None, f"{garbage} is not a WebAssembly component: {reason}")
