"""Component call latency: the first call of a component (compiled, then cached) against calls
from the compile cache, each in a worker process started for it, and calls taken by a spare worker
started ahead with the component loaded (one call each, spaced as calls of a session are, so a
replacement spare is ready). Prints medians and the ratio of the spare path to the cached one.

    .venv/bin/python bench/wasm_bench.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkits.wasm import (  # noqa: E402
    ComponentLimits,
    SpareWorkers,
    WorkspaceGrant,
    check_component,
    run_component,
)

COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"
LIMITS = ComponentLimits(deadline_s=120.0, memory_bytes=128 * 1024 * 1024, fuel=2_000_000_000)


async def _committed(kind: str, data: dict[str, Any]) -> None:
    return None


async def _call(cache_dir: Path, workspace: Path, spares: SpareWorkers | None = None) -> float:
    started = time.perf_counter()
    outcome = await run_component(
        COMPONENT,
        tool="read_file",
        input={"path": "notes.txt"},
        config={},
        limits=LIMITS,
        grants=[WorkspaceGrant(workspace, "read")],
        emit=_committed,
        cache_dir=cache_dir,
        spares=spares,
    )
    assert outcome.status == "ok", outcome
    return time.perf_counter() - started


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch) / "workspace"
        workspace.mkdir()
        (workspace / "notes.txt").write_text("hello\n")
        first, checks = [], []
        for index in range(min(rounds, 3)):  # a cold cache each time
            cache_dir = Path(scratch) / f"cold-{index}"
            first.append(await _call(cache_dir, workspace))
        cache_dir = Path(scratch) / "warm"
        started = time.perf_counter()
        check_component(COMPONENT, cache_dir=cache_dir)
        checks.append(time.perf_counter() - started)
        cached = [await _call(cache_dir, workspace) for _ in range(rounds)]
        spares = SpareWorkers(1, cache_dir=cache_dir)
        await _call(cache_dir, workspace, spares)  # starts the first spare
        from_spare = []
        for _ in range(rounds):
            await asyncio.sleep(1.0)  # the replacement loads while the session thinks
            from_spare.append(await _call(cache_dir, workspace, spares))
        await spares.close()
        print(f"component {COMPONENT.name}: {COMPONENT.stat().st_size / 1e6:.1f} MB")
        print(f"first call (compile + cache) median {statistics.median(first):.3f} s over {len(first)}")
        print(f"check_component (compile + cache)  {checks[0]:.3f} s")
        print(f"cached call (fresh worker)   median {statistics.median(cached):.3f} s over {len(cached)}")
        spare_median = statistics.median(from_spare)
        print(f"call from a spare worker     median {spare_median:.3f} s over {len(from_spare)}")
        print(f"spare / fresh worker: {spare_median / statistics.median(cached):.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
