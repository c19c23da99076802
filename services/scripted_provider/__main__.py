"""`python -m services.scripted_provider --port P [--script FILE]`: serve until interrupted.

Prints `scripted provider listening on http://HOST:PORT` to stderr once the socket is bound
(`--port 0` picks a free port, which the line reports).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from .script import load_script
from .server import ScriptedProvider, serve

# The demo conversation used when no --script is given.
DEFAULT_SCRIPT = Path(__file__).with_name("default_script.json")


async def _main(host: str, port: int, script_path: str) -> None:
    provider = ScriptedProvider(load_script(script_path))
    server = await serve(provider, host=host, port=port)
    bound_port = server.sockets[0].getsockname()[1]
    print(f"scripted provider listening on http://{host}:{bound_port}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
        server.close()
        await provider.close_connections()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.scripted_provider", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--script", default=str(DEFAULT_SCRIPT), help="JSON rule script")
    arguments = parser.parse_args()
    asyncio.run(_main(arguments.host, arguments.port, arguments.script))


if __name__ == "__main__":
    main()
