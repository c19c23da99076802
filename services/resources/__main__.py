"""`python -m services.resources [--listen HOST:PORT]` serves the resource tools (web_fetch,
web_search when SEARCH_PROVIDER and SEARCH_API_KEY are set) until interrupted; calls must carry
$TOOL_API_KEY (at least 24 characters) as a bearer token.
`python -m services.resources --catalog URL --tenant T` prints the host-config entries of the
tools this environment configures, served at URL, and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from . import ServiceTool, service_tools
from .app import ResourceService

MIN_KEY_CHARS = 24  # spec (tools/resources): TOOL_API_KEY is a random secret of at least 24 characters
TOKEN_ENV = "RESOURCE_TOOL_TOKEN"  # spec: Brain holds the service's TOOL_API_KEY under this name
TIMEOUT_SECONDS = 30  # Brain's deadline for a call: the service's own 25 s, then the answer
MAX_OUTPUT_BYTES = 1 << 20  # a fetch returns at most 128 KiB of text; 1 MiB is Brain's default


def catalog(tools: Sequence[ServiceTool], *, url: str, tenant: str) -> list[dict[str, Any]]:
    base = url.rstrip("/")
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "url": f"{base}/tools/{tool.name}",
            "token_env": TOKEN_ENV,
            "tenants": [tenant],
            "timeout_seconds": TIMEOUT_SECONDS,
            "max_output_bytes": MAX_OUTPUT_BYTES,
        }
        for tool in tools
    ]


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError("must be HOST:PORT")
    return host.strip("[]"), int(port)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m services.resources", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", type=_listen, default=("127.0.0.1", 8092), help="HOST:PORT (127.0.0.1:8092)")
    parser.add_argument("--catalog", metavar="URL", help="print host-config tool entries for the service at URL")
    parser.add_argument("--tenant", default="local", help="the tenant the printed entries allow (--catalog)")
    arguments = parser.parse_args(argv)
    environment = os.environ if environ is None else environ
    try:
        tools = service_tools(environment)
    except ValueError as exc:
        sys.exit(f"services.resources: {exc}")
    if arguments.catalog:
        print(json.dumps(catalog(tools, url=arguments.catalog, tenant=arguments.tenant), indent=2))
        return
    key = environment.get("TOOL_API_KEY", "")
    if len(key) < MIN_KEY_CHARS:
        sys.exit(f"set TOOL_API_KEY to a random secret of at least {MIN_KEY_CHARS} characters")
    import uvicorn

    host, port = arguments.listen
    names = ", ".join(tool.name for tool in tools)
    print(f"resource tools ({names}) listening on http://{host}:{port}", file=sys.stderr, flush=True)
    uvicorn.run(
        ResourceService(tools, key=key),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        http="h11",
        loop="asyncio",
    )


if __name__ == "__main__":
    main()
