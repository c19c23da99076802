"""A tiny MCP server over stdio (the mcp SDK) for the mcp_stdio provider tests.

Tools: `where` reports its working directory (and its mode), its pid and process group, the
names of its environment variables, and starts a grandchild that would sleep for minutes (its
pid reported, so a test can check the whole tree is gone after the call); `whoami` reports the
call's `_meta` scope and binding; `echo` echoes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("brain-test-stdio")


@server.tool(description="Report where and how this server runs.")
def where() -> str:
    cwd = Path.cwd()
    (cwd / "scratch.txt").write_text("left behind")  # must vanish with the directory
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return json.dumps(
        {
            "cwd": str(cwd),
            "mode": stat.S_IMODE(cwd.stat().st_mode),
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "sid": os.getsid(0),
            "grandchild": sleeper.pid,
            "env": sorted(os.environ),
            "greeting": os.environ.get("TEST_STDIO_GREETING", ""),
        }
    )


@server.tool(description="Report the metadata Brain sent with the call.")
def whoami(ctx: Context) -> str:
    meta = ctx.request_context.meta
    dumped = meta if isinstance(meta, dict) else (meta.model_dump(by_alias=True) if meta is not None else {})
    return json.dumps({"scope": dumped.get("brain.dev/scope"), "binding": dumped.get("brain.dev/binding")})


@server.tool(description="Echo text back.")
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run("stdio")
