"""Whether the `pi` harness can start here: Node 20.6 or later, its script, and the Pi packages.

A harness runs Pi when it is named `pi` or its command runs `runners/pi/src/main.mjs`. Its script
(node's first argument that is not an option) must exist, a relative path resolved as the host
resolves it: from Brain's working directory, else from the project's root.
runbrain refuses to start and check_brain_config reports the problem, one line each, instead of
every session of that harness failing its first turn. Imports no Django.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from foundation.hostconfig import Harness

__all__ = ["MINIMUM_NODE", "PI_ENTRY", "PI_PACKAGES", "pi_harness_problems", "runs_pi"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PI_DIRECTORY = PROJECT_ROOT / "runners" / "pi"
PI_ENTRY = PI_DIRECTORY / "src" / "main.mjs"
PI_NAME = "pi"
# Pi's packages declare `engines: node >= 20.6`.
MINIMUM_NODE = (20, 6)
# The packages the runner imports, each installed at the version package.json pins.
PI_PACKAGES = ("@mariozechner/pi-agent-core", "@mariozechner/pi-ai", "@smithy/node-http-handler")
# `node --version` answers in milliseconds; a node that hangs is as good as missing.
NODE_VERSION_SECONDS = 10.0
_VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")
# node options whose value is the next argument, not the script.
_OPTIONS_WITH_VALUE = frozenset(
    {"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions"}
)
# node options that run code instead of a script file.
_INLINE_CODE = frozenset({"-e", "--eval", "-p", "--print"})


def runs_pi(name: str, harness: Harness) -> bool:
    entry = str(PI_ENTRY.relative_to(PROJECT_ROOT))
    return name == PI_NAME or any(argument.endswith(entry) for argument in harness.command[1:])


def pi_harness_problems(harnesses: Mapping[str, Harness]) -> list[str]:
    """One line per problem of each configured Pi harness; [] when every one can start."""
    problems: list[str] = []
    for name, harness in harnesses.items():
        if runs_pi(name, harness):
            problems.extend(f"harness {name!r}: {problem}" for problem in _problems(harness))
    return problems


def _problems(harness: Harness) -> list[str]:
    program = harness.command[0]
    node = shutil.which(program)
    if node is None:
        return [f"{program!r} is not on PATH: Pi needs Node {'.'.join(map(str, MINIMUM_NODE))} or later"]
    try:
        completed = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=NODE_VERSION_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{program!r} does not run ({exc}): Pi needs Node {'.'.join(map(str, MINIMUM_NODE))} or later"]
    match = _VERSION.match(completed.stdout.strip())
    if match is None:
        return [f"{program!r} --version printed {completed.stdout.strip()[:40]!r}, not a Node version"]
    if (int(match.group(1)), int(match.group(2))) < MINIMUM_NODE:
        wanted = ".".join(map(str, MINIMUM_NODE))
        return [f"Node {match.group(0)[1:]} is older than {wanted}, which Pi needs"]
    return _script_problems(harness.command[1:]) or _package_problems()


def _script_problems(arguments: list[str]) -> list[str]:
    """The script node is to run, when it is missing (the host would only see the child exit)."""
    script = _script_argument(arguments)
    if script is None:
        return []
    path = Path(script)
    if not path.is_absolute() and not path.exists():
        path = PROJECT_ROOT / script
    if path.is_file():
        return []
    entry = PI_ENTRY.relative_to(PROJECT_ROOT)
    return [f"{script} does not exist; this server's Pi runner is {entry}"]


def _script_argument(arguments: list[str]) -> str | None:
    expects_value = False
    for argument in arguments:
        if expects_value:
            expects_value = False
        elif argument in _INLINE_CODE:
            return None
        elif argument in _OPTIONS_WITH_VALUE:
            expects_value = True
        elif not argument.startswith("-"):
            return argument
    return None


def _package_problems() -> list[str]:
    try:
        pinned = json.loads((PI_DIRECTORY / "package.json").read_text())["dependencies"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"runners/pi/package.json is unreadable: {exc}"]
    for package in PI_PACKAGES:
        manifest = PI_DIRECTORY / "node_modules" / package / "package.json"
        try:
            installed = json.loads(manifest.read_text()).get("version")
        except (OSError, ValueError):
            installed = None
        if installed != pinned.get(package):
            found = f"version {installed}" if installed else "not installed"
            return [
                f"the Pi package {package} is {found}, not {pinned.get(package)}: "
                "run `make bootstrap` (npm ci in runners/pi)"
            ]
    return []
