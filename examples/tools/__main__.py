"""`python -m examples.tools [--host H] [--port P] [--print-config]`

Serves the example tools until interrupted. Tool calls must carry $BRAIN_TOOLS_KEY as a bearer
token and operators answer approvals with $BRAIN_APPROVAL_KEY (each at least 24 bytes).
`--print-config` prints a ready Brain host config binding the three tools, and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .app import APPROVAL_SECONDS, ToolService, tool_bindings

MIN_KEY_BYTES = 24  # the same floor Brain applies to its own tokens


def host_config(*, tools_url: str, listen: str, tenant: str) -> dict[str, object]:
    return {
        "listen": listen,
        "public_url": f"http://{listen}",
        "data_dir": ".brain",
        "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": tenant, "manage": True}],
        "harnesses": {"loop": {"command": ["python", "-m", "runners.loop"], "steering": True}},
        "providers": {"openai": {"api_key_env": "OPENAI_API_KEY"}},
        "tools": tool_bindings(tools_url, tenant=tenant),
        "persistence": {"provider": "filesystem", "directory": ".brain-archive"},
    }


def _key(name: str) -> str:
    value = os.environ.get(name, "")
    if len(value.encode()) < MIN_KEY_BYTES:
        sys.exit(f"set {name} to a random token of at least {MIN_KEY_BYTES} bytes")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.tools", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--print-config", action="store_true", help="print a Brain host config and exit")
    parser.add_argument("--brain-listen", default="127.0.0.1:8080", help="Brain's listen address (--print-config)")
    parser.add_argument("--tenant", default="local", help="tenant allowed to use the tools (--print-config)")
    parser.add_argument("--approval-seconds", type=float, default=APPROVAL_SECONDS, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.print_config:
        config = host_config(
            tools_url=f"http://{arguments.host}:{arguments.port}",
            listen=arguments.brain_listen,
            tenant=arguments.tenant,
        )
        print(json.dumps(config, indent=2))
        return
    service = ToolService(
        tools_key=_key("BRAIN_TOOLS_KEY"),
        approval_key=_key("BRAIN_APPROVAL_KEY"),
        approval_seconds=arguments.approval_seconds,
    )
    import uvicorn

    print(f"example tools listening on http://{arguments.host}:{arguments.port}", file=sys.stderr, flush=True)
    uvicorn.run(
        service,
        host=arguments.host,
        port=arguments.port,
        log_level="warning",
        lifespan="on",
        http="h11",
        loop="asyncio",
    )


if __name__ == "__main__":
    main()
