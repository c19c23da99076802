"""`python -m services.sandbox [--host H] [--port P] [--providers local,modal] [--data-dir DIR]`
`python -m services.sandbox --catalog URL TENANT PROVIDERS`
`python -m services.sandbox live PROVIDER`

Serves sandbox_create, sandbox_exec, sandbox_inspect and sandbox_terminate (127.0.0.1:8091 by
default). Calls carry $TOOL_API_KEY (24+ bytes) as a bearer token; handles are signed with
$SANDBOX_SIGNING_KEY (32+ bytes; keep it stable across restarts). Each provider's settings and
credential come from its environment variables (toolkits/sandbox/registry.py). `--catalog`
prints the descriptors for Brain's host config `tools`; `live` creates a sandbox, runs a
command, inspects and terminates it (in a `finally`), against the real provider
(toolkits/sandbox/live.py), printing its report as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from toolkits.sandbox.backend import SandboxBackend
from toolkits.sandbox.handles import MIN_KEY_BYTES, HandleSigner
from toolkits.sandbox.live import LiveCheckFailed, live_check
from toolkits.sandbox.registry import BACKENDS, build_backend
from toolkits.sandbox.tools import BackendConfig, SandboxTools

from .app import SandboxService, catalog

MIN_API_KEY_BYTES = 24  # spec (tools/sandboxes): TOOL_API_KEY has at least 24 characters


def _key(name: str, minimum: int) -> str:
    value = os.environ.get(name, "")
    if len(value.encode()) < minimum:
        sys.exit(f"set {name} to a random secret of at least {minimum} bytes")
    return value


def _config(name: str) -> BackendConfig:
    """The provider's settings and credential from the environment; exits naming what is missing."""
    if name not in BACKENDS:
        sys.exit(f"unknown sandbox provider {name!r} (known: {', '.join(sorted(BACKENDS))})")
    entry = BACKENDS[name]
    missing = [variable for variable in entry.credential_env.values() if not os.environ.get(variable)]
    if missing:
        sys.exit(f"sandbox provider {name}: set {', '.join(missing)} (no credentials, nothing was run)")
    settings = {key: os.environ[variable] for key, variable in entry.settings_env.items() if os.environ.get(variable)}
    credential = {key: os.environ[variable] for key, variable in entry.credential_env.items()}
    return settings, credential


def _backends(names: list[str], data_dir: Path) -> dict[str, SandboxBackend]:
    backends: dict[str, SandboxBackend] = {}
    for name in names:
        try:
            backends[name] = build_backend(name, data_dir=data_dir / name)
        except ValueError as exc:
            sys.exit(str(exc))
    return backends


def main() -> None:
    if sys.argv[1:2] == ["live"]:
        if len(sys.argv) != 3:
            sys.exit("usage: python -m services.sandbox live PROVIDER")
        name, data_dir = sys.argv[2], Path(os.environ.get("SANDBOX_DATA_DIR", ".sandbox-data")).resolve()
        try:
            report = asyncio.run(live_check(name, os.environ, data_dir=data_dir / name))
        except LiveCheckFailed as exc:
            sys.exit(str(exc))
        print(json.dumps(report, indent=2))
        return
    parser = argparse.ArgumentParser(
        prog="python -m services.sandbox", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8091")))
    parser.add_argument("--providers", default=os.environ.get("SANDBOX_PROVIDERS", "local"))
    parser.add_argument("--data-dir", default=os.environ.get("SANDBOX_DATA_DIR", ".sandbox-data"))
    parser.add_argument("--catalog", nargs=3, metavar=("URL", "TENANT", "PROVIDERS"), help="print descriptors and exit")
    arguments = parser.parse_args()
    if arguments.catalog:
        url, tenant, providers = arguments.catalog
        print(json.dumps(catalog(url, tenant, [name for name in providers.split(",") if name]), indent=2))
        return
    names = [name for name in arguments.providers.split(",") if name]
    api_key = _key("TOOL_API_KEY", MIN_API_KEY_BYTES)
    signer = HandleSigner(_key("SANDBOX_SIGNING_KEY", MIN_KEY_BYTES).encode())
    configs = {name: _config(name) for name in names}
    data_dir = Path(arguments.data_dir).resolve()
    service = SandboxService(SandboxTools(_backends(names, data_dir), signer), configs, api_key=api_key)
    import uvicorn

    print(f"sandbox tools listening on http://{arguments.host}:{arguments.port}", file=sys.stderr, flush=True)
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
