"""`python deploy/fleet_config.py --instance NAME --address IP [--port 8080] SOURCE DEST`

Writes the host config SOURCE to DEST with its `cluster.instance` and `cluster.url` set for one
fleet member: a Kubernetes pod passes its own name and IP (the downward API), so one ConfigMap
serves every replica. Stdlib only; runbrain validates the result as it validates any config.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def instance_url(address: str, port: int) -> str:
    """http://ADDRESS:PORT, with an IPv6 address in brackets."""
    try:
        host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:  # a DNS name
        host = address
    return f"http://{host}:{port}"


def fleet_config(config: dict[str, Any], *, instance: str, url: str) -> dict[str, Any]:
    """`config` with this member's name and URL in its cluster block (which must exist)."""
    cluster = config.get("cluster")
    if not isinstance(cluster, dict):
        raise ValueError("the config has no cluster block")
    return {**config, "cluster": {**cluster, "instance": instance, "url": url}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python deploy/fleet_config.py", description=__doc__)
    parser.add_argument("--instance", required=True, help="this member's name: a lowercase DNS label")
    parser.add_argument("--address", required=True, help="the address the other members reach it at")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    arguments = parser.parse_args(argv)
    try:
        config = json.loads(arguments.source.read_text())
        result = fleet_config(config, instance=arguments.instance, url=instance_url(arguments.address, arguments.port))
    except (OSError, ValueError) as exc:
        sys.exit(f"fleet_config: {arguments.source}: {exc}")
    arguments.dest.parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all: a container restarted mid-write never reads half a config
    descriptor, temporary = tempfile.mkstemp(dir=arguments.dest.parent, prefix=".fleet-config-")
    with os.fdopen(descriptor, "w") as handle:
        json.dump(result, handle, indent=2)
    Path(temporary).replace(arguments.dest)


if __name__ == "__main__":
    main()
