"""Stands in for Brain: starts one harness host as Brain does, reports its child, waits to be killed.

    host_parent.py WORKDIR

Prints one JSON line: {"pid": <the harness child's pid>, "wrapper": <argv[0] of the exec
wrapper, or null>}. Needs the project on PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from sessions_app.harness.host import HarnessHost
from sessions_app.harness.launch import death_signal_wrapper

DEAF_RUNNER = str(Path(__file__).resolve().with_name("deaf_runner.py"))
WAIT_SECONDS = 120  # the test kills this process long before


async def main(workdir: Path) -> None:
    host = HarnessHost(
        harness="deaf",
        tenant="acme",
        command=[sys.executable, DEAF_RUNNER],
        workdir=workdir,
        max_shared=1,
        max_active_turns=1,
        on_exit=lambda host: None,
    )
    await host.start()
    wrapper = death_signal_wrapper()
    print(json.dumps({"pid": host.pid, "wrapper": wrapper[0] if wrapper else None}), flush=True)
    await asyncio.sleep(WAIT_SECONDS)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
