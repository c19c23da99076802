"""A create request's `config.placement`, checked: the environments a session binds (from the
host config's, within their grants) and its tools placed in them. Every refusal happens here, at
create; what it saves is immutable afterwards (session.configure cannot change it).

Cheap checks (shapes, counts, names, the agreement of definitions, duplicate pairs, the
executors' registrations, the components' exports) come before any schema is compiled; schemas
compile, and options are checked against their tool's options schema, on the hub's schema pool
within its validation budgets, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError

from foundation.errors import Forbidden, InvalidRequest
from foundation.hostconfig import ENVIRONMENT_NAME, EnvironmentConfig
from foundation.tool_schemas import compile_schema, first_error
from runners.protocol import ToolDescriptor

from ..bindings.checks import TOOL_NAME
from ..executors import Executor, ExecutorHub, normalized_tools
from ..invocation.results import detail

__all__ = [
    "MAX_ENVIRONMENT_BINDINGS",
    "MAX_PLACEMENTS",
    "CheckedPlacement",
    "check_placement",
    "placed_descriptors",
]

MAX_ENVIRONMENT_BINDINGS = 16  # per session, like its bindings
MAX_PLACEMENTS = 128  # per session: the spec's tool count per session
DEFINITION_KEYS = ("name", "description", "input_schema", "output_schema")
WORKSPACE_MODES = ("read", "read-write")

# A brain environment's tool names, from its components (checked at startup): env name -> names.
ComponentExports = Callable[[str], frozenset[str]]


@dataclass(frozen=True, slots=True)
class CheckedPlacement:
    saved: dict[str, Any]  # config.placement as the session saves it
    descriptors: list[ToolDescriptor]  # each placed tool's canonical definition, once
    executors: list[Executor]  # host environments' executors, to bind once the session exists


def _definition(value: object) -> ToolDescriptor:
    if not isinstance(value, dict) or value.keys() - {*DEFINITION_KEYS, "options_schema"}:
        raise InvalidRequest("a placement's tool is {name, description, input_schema, output_schema?, options_schema?}")
    name = value.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise InvalidRequest(f"placed tool name {str(name)[:64]!r} must be 1-64 of A-Z a-z 0-9 _ -")
    if not isinstance(value.get("description"), str) or not isinstance(value.get("input_schema"), dict):
        raise InvalidRequest(f"placed tool {name!r} needs a description and an input_schema object")
    descriptor: ToolDescriptor = {
        "name": name,
        "description": value["description"],
        "input_schema": value["input_schema"],
    }
    if value.get("output_schema") is not None:
        if not isinstance(value["output_schema"], dict):
            raise InvalidRequest(f"placed tool {name!r}: output_schema must be a JSON Schema object")
        descriptor["output_schema"] = value["output_schema"]
    return descriptor


def placed_descriptors(placement: Mapping[str, Any], environment: str) -> list[ToolDescriptor]:
    """The canonical definitions of the tools a saved placement puts in `environment`."""
    return [_definition(item["tool"]) for item in placement.get("tools", ()) if item.get("env") == environment]


def _bind_environment(
    binding: object, offered: Mapping[str, EnvironmentConfig], *, tenant: str, aliases: set[str]
) -> dict[str, Any]:
    if not isinstance(binding, dict):
        raise InvalidRequest("an environment binding is {name, executor?, filesystem?}")
    name = binding.get("name")
    if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
        raise InvalidRequest(f"environment name {str(name)[:32]!r} must start with a letter: 1-32 of A-Z a-z 0-9 _ -")
    environment = offered.get(name)
    if environment is None or tenant not in environment.tenants:
        raise Forbidden(f"environment {name!r} is not available to this tenant")
    if name in aliases:
        raise InvalidRequest(f"environment {name!r} is bound twice or shares its name with a binding alias")
    aliases.add(name)
    saved: dict[str, Any] = {"name": name}
    executor, filesystem = binding.get("executor"), binding.get("filesystem")
    if environment.kind == "host":
        if not isinstance(executor, str):
            raise InvalidRequest(f"host environment {name!r} needs the executor that serves it")
        saved["executor"] = executor
    elif executor is not None:
        raise InvalidRequest(f"environment {name!r} is not a host environment: it takes no executor")
    if filesystem is not None:
        if environment.kind != "brain":
            raise InvalidRequest(f"environment {name!r}: filesystem grants belong to brain environments")
        if not isinstance(filesystem, dict) or filesystem.keys() - {"workspace"}:
            raise InvalidRequest(f"environment {name!r}: filesystem grants are {{workspace: read | read-write}}")
        mode = filesystem.get("workspace")
        if mode not in WORKSPACE_MODES:
            raise InvalidRequest(f"environment {name!r}: workspace must be read or read-write")
        if mode not in environment.grants.get("workspace", ()):
            raise Forbidden(f"environment {name!r}: the grant workspace {mode} is not allowed on this server")
        saved["filesystem"] = {"workspace": mode}
    return saved


async def _executor(hub: ExecutorHub, executor_id: str, *, env: str, tenant: str) -> Executor:
    executor = hub.get(executor_id)
    if executor is None:  # a fleet: another instance may hold it
        executor = await hub.held_elsewhere(executor_id)
    if executor is None or executor.tenant != tenant:
        raise InvalidRequest(f"environment {env!r}: runtime executor {executor_id!r} is not registered")
    if executor.session:
        raise InvalidRequest(f"environment {env!r}: runtime executor {executor_id!r} serves another session")
    if executor.binding != env:
        raise InvalidRequest(f"environment {env!r}: the executor was registered for binding {executor.binding!r}")
    return executor


def _presentation(value: object, placed: Mapping[str, list[str]]) -> dict[str, Any]:
    """The session's choice of how the model sees placements: an explicit policy naming each
    tool's environment (a tool with one placement needs none) or an environment selector."""
    value = {"mode": "policy"} if value is None else value
    if not isinstance(value, dict) or value.keys() - {"mode", "choose"}:
        raise InvalidRequest("presentation is {mode: policy | selector, choose?}")
    mode, choose = value.get("mode"), value.get("choose")
    if mode == "selector":
        if choose is not None:
            raise InvalidRequest("presentation selector: the model chooses; choose belongs to mode policy")
        return {"mode": "selector"}
    if mode != "policy":
        raise InvalidRequest("presentation mode must be policy or selector")
    choose = {} if choose is None else choose
    if not isinstance(choose, dict):
        raise InvalidRequest("presentation choose maps tool names to environments")
    chosen: dict[str, str] = {}
    for name, environments in placed.items():
        env = choose.get(name)
        if env is None and len(environments) > 1:
            raise InvalidRequest(f"presentation policy: choose an environment for {name!r}, placed in several")
        if env is not None and env not in environments:
            raise InvalidRequest(f"presentation policy: {name!r} has no placement in {str(env)[:32]!r}")
        chosen[name] = env if env is not None else environments[0]
    unknown = choose.keys() - placed.keys()
    if unknown:
        raise InvalidRequest(f"presentation policy: {sorted(unknown)[0][:64]!r} is not a placed tool")
    return {"mode": "policy", "choose": chosen}


def _compile_and_check(placements: Sequence[dict[str, Any]], definitions: Mapping[str, dict[str, Any]]) -> None:
    """On the schema pool: every schema compiles; every placement's options match its tool's
    options schema (within the validation budgets)."""
    options_validators = {}
    for name, definition in definitions.items():
        for key in ("input_schema", "output_schema", "options_schema"):
            schema = definition.get(key)
            if schema is None:
                continue
            try:
                validator = compile_schema(schema)
            except SchemaError as exc:
                raise InvalidRequest(detail(f"placed tool {name!r}: invalid {key}: {exc.message}")) from exc
            if key == "options_schema":
                options_validators[name] = validator
    for placement in placements:
        name, env = placement["tool"]["name"], placement["env"]
        validator = options_validators.get(name)
        if validator is None:
            continue
        problem = first_error(validator, placement.get("options", {}))
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path)
            at = f" at {where}" if where else ""
            raise InvalidRequest(detail(f"placement {name!r} in {env!r}: invalid options{at}: {problem.message}"))


async def check_placement(
    raw: object,
    *,
    tenant: str,
    offered: Mapping[str, EnvironmentConfig],
    taken: set[str],
    aliases: set[str],
    hub: ExecutorHub,
    exports: ComponentExports,
    service_schemas: Mapping[str, object],
) -> CheckedPlacement:
    """Validate `config.placement`: 400 for a bad shape, a definition that disagrees with another
    of the same tool, a duplicate (tool, environment) pair, a name another tool of the session
    has (`taken`), an implementation the environment lacks or options its schema refuses; 403
    for an environment or a grant the tenant may not have. `service_schemas`: the input schema of
    each host-config tool a service environment maps to (its definition must be the same)."""
    if not isinstance(raw, dict) or raw.keys() - {"environments", "tools", "presentation"}:
        raise InvalidRequest("placement is {environments, tools, presentation?}")
    bindings, placements = raw.get("environments"), raw.get("tools")
    if not isinstance(bindings, list) or not 1 <= len(bindings) <= MAX_ENVIRONMENT_BINDINGS:
        raise InvalidRequest(f"placement binds 1 to {MAX_ENVIRONMENT_BINDINGS} environments")
    if not isinstance(placements, list) or not 1 <= len(placements) <= MAX_PLACEMENTS:
        raise InvalidRequest(f"placement places 1 to {MAX_PLACEMENTS} tools")
    environments = [_bind_environment(binding, offered, tenant=tenant, aliases=aliases) for binding in bindings]
    bound = {environment["name"]: environment for environment in environments}
    definitions: dict[str, dict[str, Any]] = {}
    placed: dict[str, list[str]] = {}
    saved_tools: list[dict[str, Any]] = []
    for item in placements:
        if not isinstance(item, dict) or item.keys() - {"tool", "env", "options"} or "tool" not in item:
            raise InvalidRequest("a placement is {tool, env, options?}")
        descriptor = _definition(item["tool"])
        name, env = descriptor["name"], item.get("env")
        definition = {**descriptor}
        if isinstance(item["tool"], dict) and item["tool"].get("options_schema") is not None:
            if not isinstance(item["tool"]["options_schema"], dict):
                raise InvalidRequest(f"placed tool {name!r}: options_schema must be a JSON Schema object")
            definition["options_schema"] = item["tool"]["options_schema"]
        if not isinstance(env, str) or env not in bound:
            raise InvalidRequest(f"placement of {name!r}: environment {str(env)[:32]!r} is not bound by this session")
        if name in taken:
            raise InvalidRequest(f"placed tool {name!r} collides with another tool of the session")
        if name in definitions and definitions[name] != definition:
            raise InvalidRequest(f"the definitions of placed tool {name!r} disagree")
        if env in placed.get(name, ()):
            raise InvalidRequest(f"tool {name!r} is placed in environment {env!r} twice")
        if "options" in item and "options_schema" not in definition:
            raise InvalidRequest(f"placed tool {name!r} takes no options: it has no options_schema")
        kind = offered[env].kind
        if kind == "brain" and name not in exports(env):
            raise InvalidRequest(f"environment {env!r} has no component exporting {name!r}")
        if kind == "service":
            served = offered[env].services.get(name)
            if served is None:
                raise InvalidRequest(f"service environment {env!r} does not serve {name!r}")
            if service_schemas.get(served) != descriptor["input_schema"]:
                raise InvalidRequest(f"placed tool {name!r}: its input_schema differs from {env!r}'s implementation")
        definitions[name] = definition
        placed.setdefault(name, []).append(env)
        saved_item = {"tool": item["tool"], "env": env}
        if "options" in item:
            saved_item["options"] = item["options"]
        saved_tools.append(saved_item)
    presentation = _presentation(raw.get("presentation"), placed)
    saved = {"environments": environments, "tools": saved_tools, "presentation": presentation}
    executors: list[Executor] = []
    for environment in environments:
        if "executor" not in environment:
            continue
        executor = await _executor(hub, environment["executor"], env=environment["name"], tenant=tenant)
        if normalized_tools(executor.tools) != normalized_tools(placed_descriptors(saved, environment["name"])):
            raise InvalidRequest(
                f"environment {environment['name']!r}: the executor's tools differ from the tools placed in it"
            )
        executors.append(executor)
    await hub.schemas.run(lambda: _compile_and_check(saved_tools, definitions))
    descriptors = [_definition(definitions[name]) for name in placed]
    return CheckedPlacement(saved=saved, descriptors=descriptors, executors=executors)
