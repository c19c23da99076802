"""Benchmark: how long spawning a harness child blocks Brain's event loop, and until its first reply.

    .venv/bin/python bench/spawn_bench.py [--samples 15] [--ballast-mib 0]

Spawns the test instant runner as HarnessHost.start does, under each death-signal wrapper (setpriv,
the Python fallback, none), then sends `open` and waits for the reply. `--ballast-mib` grows this
process first, as a loaded server would be: the fork path a preexec_fn forces copies page tables,
the exec wrapper's spawn does not. Informational only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from sessions_app.harness.launch import launch_command, python_wrapper, setpriv_wrapper  # noqa: E402

INSTANT_RUNNER = PROJECT_ROOT / "tests" / "support" / "instant_runner.py"
PAGE = 4096


async def spawn_once(wrapper: list[str], work: Path) -> tuple[float, float]:
    """Milliseconds the spawn call took (the loop is blocked meanwhile) and until `open` was answered."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "NO_COLOR": "1", "HOME": str(work)}
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *launch_command([sys.executable, str(INSTANT_RUNNER)], env, wrapper=wrapper),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=work,
        env=env,
    )
    spawned = time.perf_counter()
    assert process.stdin is not None and process.stdout is not None
    params = {"session_id": "s", "dir": str(work / "s"), "config": {"model": "x", "tools": []}, "tools": []}
    frame = {"attachment": "a", "id": "r1", "method": "open", "params": {**params, "provider": {"api_key": ""}}}
    process.stdin.write(json.dumps(frame).encode() + b"\n")
    await process.stdin.drain()
    while b'"r1"' not in await process.stdout.readline():
        pass
    answered = time.perf_counter()
    process.stdin.close()
    await process.wait()
    return (spawned - began) * 1000, (answered - began) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--ballast-mib", type=int, default=0)
    options = parser.parse_args()
    ballast = bytearray(options.ballast_mib << 20)
    for offset in range(0, len(ballast), PAGE):
        ballast[offset] = 1  # touched, so the pages are really mapped
    wrappers = {"setpriv": setpriv_wrapper(), "python": python_wrapper(), "none": []}
    with tempfile.TemporaryDirectory() as directory:
        for name, wrapper in wrappers.items():
            if wrapper is None:
                print(f"{name:8s} not installed")
                continue
            await spawn_once(wrapper, Path(directory))  # warm the page cache
            samples = [await spawn_once(wrapper, Path(directory)) for _ in range(options.samples)]
            spawn = statistics.median(sample[0] for sample in samples)
            ready = statistics.median(sample[1] for sample in samples)
            print(
                f"{name:8s} ballast {options.ballast_mib} MiB: spawn call {spawn:6.2f} ms, "
                f"first reply {ready:6.1f} ms (median of {options.samples})"
            )


if __name__ == "__main__":
    asyncio.run(main())
