"""The client suite is every test that talks to the server through the published client.

`make test` runs it under the venv's client (2.3.0) and again under 2.0.0, selected by the
`client` marker; a module that uses the client without the marker would silently be tested
against one version only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Importing the client or asking a test server for one (`BrainServer.sdk()`).
USES_CLIENT = re.compile(r"^\s*(from brain import|import brain\b)|\.sdk\(", re.MULTILINE)
MARKED = re.compile(r"^pytestmark = .*pytest\.mark\.client\b", re.MULTILINE)


def _helper_modules_using_the_client() -> set[str]:
    modules = set()
    for path in (TESTS / "support").glob("*.py"):
        if USES_CLIENT.search(path.read_text()):
            modules.add(f"tests.support.{path.stem}")
    return modules


def _imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_every_module_that_uses_the_published_client_is_in_the_client_suite() -> None:
    helpers = _helper_modules_using_the_client()
    unmarked, marked = [], 0
    for path in sorted(TESTS.rglob("test_*.py")):
        if path == Path(__file__).resolve():
            continue  # its patterns name the client
        source = path.read_text()
        if USES_CLIENT.search(source) or _imports(source) & helpers:
            if MARKED.search(source):
                marked += 1
            else:
                unmarked.append(str(path.relative_to(TESTS.parent)))
    assert unmarked == [], "add `pytestmark = pytest.mark.client` to these modules"
    assert marked >= 20  # the suite the second client runs is the journeys', not an empty one
