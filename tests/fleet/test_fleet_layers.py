"""fleet_app's own layer rules, checked on the ASTs: it stands on the shared floor and Django,
imports no other app and not the wiring; db.py is its only ORM user; the configuration,
signing and forwarding modules import no Django at all."""

from __future__ import annotations

import ast
from pathlib import Path

from django.apps import apps
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "fleet_app"
OTHER_PACKAGES = ("brainsite", "sessions_app", "tools_app", "persistence_app", "runners")
WITHOUT_DJANGO = ("signing", "forwarding")
ORM_MODULES = ("db", "models")


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def modules() -> list[Path]:
    return sorted(path for path in APP.rglob("*.py") if "migrations" not in path.parts)


def test_fleet_app_imports_no_other_app_and_not_the_wiring() -> None:
    # when
    offenders = {
        path.name: sorted(name for name in imports(path) if name.split(".")[0] in OTHER_PACKAGES) for path in modules()
    }
    # then
    assert {name: found for name, found in offenders.items() if found} == {}


def test_configuration_signing_and_forwarding_import_no_django() -> None:
    # when
    offenders = {
        name: sorted(found for found in imports(APP / f"{name}.py") if found.split(".")[0] in ("django", "channels"))
        for name in WITHOUT_DJANGO
    }
    # then
    assert offenders == {name: [] for name in WITHOUT_DJANGO}


def test_only_db_touches_the_database() -> None:
    # when
    users = []
    for path in modules():
        tree = ast.parse(path.read_text())
        touches = any(
            (isinstance(node, ast.Attribute) and node.attr == "objects")
            or (isinstance(node, ast.Name) and node.id in ("connections", "connection"))
            for node in ast.walk(tree)
        )
        if touches or any(isinstance(node, ast.Global) for node in ast.walk(tree)):
            users.append(path.stem)
    # then
    assert users == ["db"]


def test_the_migration_matches_the_models() -> None:
    # given: the migrations on disk, without a database
    loader = MigrationLoader(None, ignore_no_migrations=True)
    detector = MigrationAutodetector(loader.project_state(), ProjectState.from_apps(apps))
    # when
    changes = detector.changes(graph=loader.graph, trim_to_apps={"fleet_app"})
    # then
    assert changes.get("fleet_app", []) == []
