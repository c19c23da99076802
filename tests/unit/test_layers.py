"""Which modules may import which (HOUSE_STYLE): checked on the ASTs, without importing anything.

foundation (the shared floor) imports no app and not brainsite; the apps stand on it and never
import brainsite (the wiring: settings, ASGI, URLs, the application object, the server's commands).
api/consumers -> services -> runtime, db, eventlog; only URL and ASGI wiring import api, schemas
or consumers; each app's db.py is its only ORM user; runners/ never see Django. fleet_app stands on
the floor alone: it imports no other app (the others reach it, never it them).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "foundation",
    "brainsite",
    "sessions_app",
    "tools_app",
    "persistence_app",
    "fleet_app",
    "runners",
    "toolkits",
)
FLOOR = "foundation"
WIRING_PACKAGE = "brainsite"
APPS = ("sessions_app", "tools_app", "persistence_app", "fleet_app")
SERVER = ("django", "channels", "ninja", "daphne", "celery", FLOOR, WIRING_PACKAGE, *APPS)
# The project's URL and ASGI wiring: the only importers of api, consumers and schemas modules.
WIRING = frozenset({"brainsite.urls", "brainsite.asgi", "brainsite.api", "brainsite.api_urls", "brainsite.apihandler"})
# Modules that must never see a request or a Schema.
PURE_MODULES = frozenset({"eventlog", "operations", "registry", "sync", "archive", "records"})
PURE_PACKAGES = frozenset({"runtime", "harness", "transports", "stores", "storage"})
ORM_MODULES = frozenset({"db", "models", "admin"})
# TEMPORARY: modules that still import django.db or their app's models themselves while their SQL
# moves into their app's db.py. Nothing may join this list; each leaves it once it moved (a test
# below fails while a module stays listed that no longer needs to be).
ORM_OUTSIDE_DB: frozenset[str] = frozenset()


# Modules that still import SessionStatus through models; sessions_app.records owns it now.
@dataclass(frozen=True, slots=True)
class Module:
    name: str
    path: Path
    imports: frozenset[str]  # every module a statement may load, absolute ("a.b" and "a.b.c" for from a.b import c)
    uses_manager: bool  # reads an `.objects` attribute: a Django model manager
    global_lines: tuple[int, ...]  # lines of `global` statements
    private_uses: frozenset[str]  # `x._name` attributes read on objects other than self/cls

    @property
    def app(self) -> str:
        return self.name.split(".")[0]

    @property
    def leaf(self) -> str:
        return self.name.split(".")[-1]

    @property
    def in_migrations(self) -> bool:
        return ".migrations." in f".{self.name}."

    def imports_module(self, target: str) -> bool:
        return any(name == target or name.startswith(target + ".") for name in self.imports)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, *, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = name.split(".") if is_package else name.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _parse(path: Path) -> Module:
    name = _module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    imports: set[str] = set()
    uses_manager = False
    global_lines: list[int] = []
    private_uses: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            global_lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and _is_private(node.attr)
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "super"))
            and not (isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "super")
        ):
            private_uses.add(f"{ast.unparse(node.value)}.{node.attr}")
        if isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, name=name, is_package=path.name == "__init__.py")
            imports.add(source)
            imports.update(f"{source}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute) and node.attr == "objects":
            uses_manager = True
    defined = _defined_private_names(tree)
    foreign = frozenset(use for use in private_uses if use.rsplit(".", 1)[1] not in defined | ALLOWED_PRIVATE)
    return Module(name, path, frozenset(imports), uses_manager, tuple(global_lines), foreign)


ALLOWED_PRIVATE = frozenset({"_meta"})  # Django's documented model metadata API


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines itself: functions, classes, attributes it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if _is_private(name)}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@cache
def _modules() -> tuple[Module, ...]:
    paths = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    return tuple(_parse(path) for path in paths)


def _is_pure(module: Module) -> bool:
    parts = module.name.split(".")
    return module.app in APPS and (module.leaf in PURE_MODULES or any(part in PURE_PACKAGES for part in parts[1:]))


def _is_orm_module(module: Module) -> bool:
    return module.app in APPS and (module.leaf in ORM_MODULES or module.in_migrations)


# --- the walker itself ----------------------------------------------------------------------


def test_the_walker_finds_every_package_and_resolves_relative_imports() -> None:
    # when
    modules = {module.name: module for module in _modules()}

    # then
    assert {name.split(".")[0] for name in modules} == set(PACKAGES)
    assert modules["sessions_app.db"].imports_module("sessions_app.models")
    assert modules["sessions_app.storage.checkpoints"].imports_module("runners.protocol")
    assert modules["sessions_app.db"].imports_module("django.db")
    assert modules["sessions_app.db"].uses_manager is True
    assert modules["sessions_app.eventlog"].uses_manager is False


def test_relative_imports_resolve_from_the_importing_package() -> None:
    # given
    tree = ast.parse("from . import engine\nfrom ..models import Session\nfrom .pubsub import Subscriber\n")
    nodes = [node for node in tree.body if isinstance(node, ast.ImportFrom)]

    # when
    in_package = [_absolute(node, name="sessions_app.runtime", is_package=True) for node in nodes]
    in_module = [_absolute(node, name="sessions_app.runtime.actor", is_package=False) for node in nodes]

    # then
    assert in_package == ["sessions_app.runtime", "sessions_app.models", "sessions_app.runtime.pubsub"]
    assert in_module == in_package


# --- the rules ------------------------------------------------------------------------------


def test_runners_never_import_django_or_the_server_apps() -> None:
    # when
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app == "runners"
        for target in SERVER
        if module.imports_module(target)
    )

    # then
    assert violations == []


def test_toolkits_stand_alone_without_the_server() -> None:
    """toolkits/ serve Brain's providers and the standalone tool services alike: they may use
    Django's storage API (django-storages) but never the server's apps, wiring or floor."""
    # when
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app == "toolkits"
        for target in ("channels", "ninja", "daphne", "celery", FLOOR, WIRING_PACKAGE, *APPS)
        if module.imports_module(target)
    )

    # then
    assert violations == []
    assert "toolkits.sandbox.backend" in {module.name for module in _modules()}


def test_runtime_services_and_eventlog_never_see_a_request_or_a_schema() -> None:
    # given
    forbidden = (
        "ninja",
        "django.http",
        "brainsite.api",
        *(f"{app}.{leaf}" for app in APPS for leaf in ("api", "schemas", "consumers")),
    )

    # when
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if _is_pure(module)
        for target in forbidden
        if module.imports_module(target)
    )

    # then
    assert violations == []


def test_the_pure_modules_include_the_runtime_services_and_eventlog() -> None:
    # when
    pure = {module.name for module in _modules() if _is_pure(module)}

    # then
    assert {"sessions_app.eventlog", "sessions_app.operations", "sessions_app.runtime.actor"} <= pure
    assert {"sessions_app.runtime.engine", "sessions_app.runtime.pubsub", "sessions_app.storage.checkpoints"} <= pure


def test_only_db_models_admin_and_migrations_import_models() -> None:
    # when
    violations = sorted(
        f"{module.name} imports {app}.models"
        for module in _modules()
        if not _is_orm_module(module) and module.name not in ORM_OUTSIDE_DB
        for app in APPS
        if module.imports_module(f"{app}.models")
    )

    # then
    assert violations == []


def _imports_django_db_outside_the_orm_modules(module: Module) -> bool:
    return module.imports_module("django.db") and not _is_orm_module(module)


def _breaks_an_orm_rule(module: Module) -> bool:
    return not _is_orm_module(module) and (
        module.imports_module("django.db") or any(module.imports_module(f"{app}.models") for app in APPS)
    )


def test_only_db_models_admin_and_migrations_import_django_db() -> None:
    # when
    violations = sorted(
        module.name
        for module in _modules()
        if _imports_django_db_outside_the_orm_modules(module) and module.name not in ORM_OUTSIDE_DB
    )

    # then
    assert violations == []


def test_the_orm_allow_list_names_only_modules_that_still_need_it() -> None:
    # when: a module that moved its SQL out leaves the list with it
    needing = {module.name for module in _modules() if _breaks_an_orm_rule(module)}

    # then
    assert needing >= ORM_OUTSIDE_DB


def test_only_db_models_admin_and_migrations_use_model_managers() -> None:
    # when
    violations = sorted(module.name for module in _modules() if module.uses_manager and not _is_orm_module(module))

    # then
    assert violations == []


def test_only_url_and_asgi_wiring_import_api_consumers_or_schemas() -> None:
    # given
    targets = ("brainsite.api", *(f"{app}.{leaf}" for app in APPS for leaf in ("api", "consumers", "schemas")))

    # when
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.name not in WIRING
        for target in targets
        if target != module.name
        and module.imports_module(target)
        # an app's own api and consumers parse the wire with that app's schemas
        and not (target == f"{module.app}.schemas" and module.leaf in ("api", "consumers"))
    )

    # then
    assert violations == []


def test_production_code_has_no_global_statement() -> None:
    # when: process-wide state belongs to the application object (brainsite.application)
    violations = sorted(f"{module.name}:{line}" for module in _modules() for line in module.global_lines)

    # then
    assert violations == []


def _project_imports(module: Module, names: frozenset[str]) -> set[str]:
    """The project modules `module` imports (a `from a import b` of a name, not a module, is `a`)."""
    return {name for name in module.imports if name in names and name != module.name}


def _import_graph() -> dict[str, list[str]]:
    modules = _modules()
    names = frozenset(module.name for module in modules)
    return {module.name: sorted(_project_imports(module, names)) for module in modules}


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module in an import graph (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    # given: a -> b -> c -> a, and d -> a outside the cycle
    graph = {"pkg.a": ["pkg.b"], "pkg.b": ["pkg.c"], "pkg.c": ["pkg.a"], "pkg.d": ["pkg.a"]}

    # when / then
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert _cycles({"pkg.a": ["pkg.b"], "pkg.b": []}) == []


def test_the_walker_sees_the_runtimes_imports_as_edges() -> None:
    # when
    graph = _import_graph()

    # then
    assert "sessions_app.runtime.actor" in graph["sessions_app.runtime.engine"]
    assert "sessions_app.runtime.engine" not in graph["sessions_app.runtime.actor"]


def test_production_modules_import_no_cycle() -> None:
    # when: every import counts, TYPE_CHECKING and function-local ones included
    cycles = _cycles(_import_graph())

    # then
    assert cycles == []


def test_no_module_reads_another_objects_private_names() -> None:
    # when
    violations = sorted(f"{module.name}: {use}" for module in _modules() for use in module.private_uses)

    # then
    assert violations == []


def test_tools_app_never_imports_sessions_app() -> None:
    # when: the registry gets the inspection grant injected by the application object
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app == "tools_app"
        for target in module.imports
        if target.startswith("sessions_app")
    )

    # then
    assert violations == []


def test_persistence_never_imports_the_session_runtime() -> None:
    # when: it reaches session directories through sessions_app.storage, and the engine through
    # the narrow protocol persistence_app.archiving.LiveSessions the application object fills
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app == "persistence_app"
        for target in module.imports
        if target == "sessions_app.runtime" or target.startswith("sessions_app.runtime.")
    )

    # then
    assert violations == []


def test_fleet_app_imports_no_other_app() -> None:
    # when: it sees the other apps' parts (the lease holder's engine, the executor relay, the
    # token cache) through narrow protocols of its own, filled by the application object
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app == "fleet_app"
        for app in (*APPS, WIRING_PACKAGE)
        if app != "fleet_app"
        for target in module.imports
        if target == app or target.startswith(app + ".")
    )

    # then
    assert violations == []


def test_the_layer_rules_cover_fleet_app() -> None:
    # when
    modules = {module.name: module for module in _modules()}
    pure = {name for name, module in modules.items() if _should_be_pure(module)}

    # then: the walker reads it, and the floor, size and purity rules apply to it
    assert {"fleet_app.routing", "fleet_app.forwarding", "fleet_app.transport", "fleet_app.db"} <= set(modules)
    assert {"fleet_app.routing", "fleet_app.decision", "fleet_app.signing", "fleet_app.leases"} <= pure
    assert modules["fleet_app.routing"].imports_module("foundation.errors")


def test_the_floor_imports_no_app_and_not_brainsite() -> None:
    # when
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app == FLOOR
        for target in (WIRING_PACKAGE, *APPS)
        if module.imports_module(target)
    )

    # then
    assert violations == []


def test_apps_never_import_brainsite() -> None:
    # when: an app reads the application object through foundation.app_object and its own view
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if module.app in APPS
        for target in module.imports
        if target == WIRING_PACKAGE or target.startswith(WIRING_PACKAGE + ".")
    )

    # then
    assert violations == []


def test_the_layer_rules_see_function_level_imports() -> None:
    # given: runbrain imports the ASGI wiring inside its handle()
    modules = {module.name: module for module in _modules()}

    # then
    assert modules["brainsite.management.commands.runbrain"].imports_module("brainsite.asgi")
    assert modules["sessions_app.api"].imports_module("foundation.errors")


# --- every module that should be pure, and the size of a module -----------------------------

# The leaves of an app that face HTTP: routes, wire schemas, consumers, the admin, bearer auth
# and the request -> application object accessor. Every other module of an app never sees a
# request or a Schema (HOUSE_STYLE: domain code never sees a request object).
REQUEST_FACING = frozenset({"api", "schemas", "consumers", "admin", "auth", "app_object"})
# The floor's request-facing modules: the schema bases, the principal of a request, the accessor.
FLOOR_REQUEST_FACING = frozenset({"foundation.wire", "foundation.principal", "foundation.app_object"})
REQUEST_TYPES = ("ninja", "django.http", "brainsite.api")
MAX_MODULE_LINES = 450  # a module a maintainer can hold in mind; split it by concern past this
# Modules still over MAX_MODULE_LINES while they are being split; nothing may join this list.
OVER_MAX_LINES: frozenset[str] = frozenset()


def _should_be_pure(module: Module) -> bool:
    if module.app == FLOOR:
        return module.name not in FLOOR_REQUEST_FACING
    return module.app in APPS and not module.in_migrations and module.leaf not in REQUEST_FACING


def test_every_module_but_the_request_facing_ones_never_sees_a_request_or_a_schema() -> None:
    # given
    forbidden = (*REQUEST_TYPES, *(f"{app}.{leaf}" for app in APPS for leaf in ("api", "schemas", "consumers")))

    # when
    violations = sorted(
        f"{module.name} imports {target}"
        for module in _modules()
        if _should_be_pure(module)
        for target in forbidden
        if module.imports_module(target)
    )

    # then
    assert violations == []


def test_the_pure_rule_covers_the_floor_and_every_app_module_but_the_request_facing_ones() -> None:
    # when
    pure = {module.name for module in _modules() if _should_be_pure(module)}

    # then
    assert {"foundation.errors", "foundation.hostconfig.model", "foundation.rfc3339", "foundation.streaming"} <= pure
    assert {"sessions_app.eventlog", "sessions_app.records", "tools_app.registry", "persistence_app.sync"} <= pure
    assert {"persistence_app.scheduler", "tools_app.executors", "sessions_app.runtime.engine"} <= pure
    assert pure.isdisjoint({"sessions_app.api", "tools_app.consumers", "persistence_app.schemas", "foundation.wire"})
    assert pure.isdisjoint({"sessions_app.admin", "sessions_app.auth", "tools_app.app_object"})


def test_no_production_module_is_over_450_lines() -> None:
    # when
    over = sorted(
        f"{path} has {lines} lines"
        for module in _modules()
        if not module.in_migrations
        for path, lines in [(module.path.relative_to(ROOT).as_posix(), len(module.path.read_text().splitlines()))]
        if lines > MAX_MODULE_LINES and path not in OVER_MAX_LINES
    )

    # then
    assert over == []
