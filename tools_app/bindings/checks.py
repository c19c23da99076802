"""Session tool bindings as a create request states them (`config.bindings`): tools a session
gets under an alias, beside the operator's `config.tools`. `check_bindings` validates them and
resolves a provider binding's descriptors (nothing runs); what the session saves is what
bindings.session routes calls by.

Every cheap check (shapes, counts, names, the executor's registration) comes before any schema
is compiled, and schemas compile on the hub's schema pool, never on the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Required, TypedDict

from jsonschema import SchemaError

from foundation.errors import BrainError, Forbidden, InvalidRequest, Unsupported
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema
from runners.protocol import ToolDescriptor

from ..executors import Executor, ExecutorHub, normalized_tools
from ..invocation.results import detail as _detail
from ..providers.base import ProviderError, ToolProvider
from ..providers.registry import ProviderRegistry

__all__ = [
    "ALIAS",
    "CheckedBindings",
    "SavedBinding",
    "check_bindings",
    "check_runtime_tools",
    "compile_runtime_tools",
    "runtime_descriptors",
]

ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_BINDINGS = 16
MAX_RUNTIME_TOOLS = 128
DESCRIPTOR_KEYS = frozenset({"name", "description", "input_schema", "output_schema"})

# A binding of a create request, before it is checked: JSON as the client sent it.
RequestBinding = Mapping[str, object]


class SavedBinding(TypedDict, total=False):
    """A checked binding as the session's config saves it: {alias, executor, runtime} or
    {alias, provider, operations, parameters?}."""

    alias: Required[str]
    executor: str
    runtime: list[ToolDescriptor]
    provider: str
    operations: list[str]
    parameters: object


def runtime_descriptors(tools: Sequence[object]) -> list[ToolDescriptor]:
    """Runtime tool descriptors as registered or bound, their shapes checked (count, names,
    descriptions, schemas that are objects); cheap, and nothing is compiled."""
    if not tools or len(tools) > MAX_RUNTIME_TOOLS:
        raise InvalidRequest(f"a runtime binding declares 1 to {MAX_RUNTIME_TOOLS} tools")
    seen: set[str] = set()
    descriptors: list[ToolDescriptor] = []
    for tool in tools:
        if not isinstance(tool, dict) or not tool.keys() <= DESCRIPTOR_KEYS:
            raise InvalidRequest("a runtime tool is {name, description, input_schema, output_schema?}")
        name, description = tool.get("name"), tool.get("description")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise InvalidRequest(f"runtime tool name {name!r} must be 1-64 of A-Z a-z 0-9 _ -")
        if name in seen:
            raise InvalidRequest(f"runtime tool {name!r} is declared twice")
        seen.add(name)
        if not isinstance(description, str):
            raise InvalidRequest(f"runtime tool {name!r} needs a description")
        for key in ("input_schema", "output_schema"):
            if key not in tool or (key == "output_schema" and tool[key] is None):
                continue
            if not isinstance(tool[key], dict):
                raise InvalidRequest(f"runtime tool {name!r}: {key} must be a JSON Schema object")
        if "input_schema" not in tool:
            raise InvalidRequest(f"runtime tool {name!r} needs an input_schema")
        descriptor: ToolDescriptor = {"name": name, "description": description, "input_schema": tool["input_schema"]}
        if tool.get("output_schema") is not None:
            descriptor["output_schema"] = tool["output_schema"]
        descriptors.append(descriptor)
    return descriptors


def _compile_all(descriptors: Sequence[ToolDescriptor]) -> None:
    for descriptor in descriptors:
        for key in ("input_schema", "output_schema"):
            schema = descriptor.get(key)
            if schema is None:
                continue
            try:
                compile_schema(schema)
            except SchemaError as exc:
                raise InvalidRequest(
                    f"runtime tool {descriptor['name']!r}: invalid {key}: {str(exc.message)[:200]}"
                ) from exc


async def compile_runtime_tools(descriptors: Sequence[ToolDescriptor], schemas: SchemaWorkers) -> None:
    """Compile the descriptors' schemas on `schemas` (one job): 400 naming the tool and the
    reason for the first one refused (a reference outside it, a pattern RE2 cannot run, the
    expansion budget), 429 when the pool is busy."""
    await schemas.run(lambda: _compile_all(descriptors))


async def check_runtime_tools(tools: Sequence[object], schemas: SchemaWorkers) -> list[ToolDescriptor]:
    """runtime_descriptors(), then their schemas compiled on `schemas`."""
    descriptors = runtime_descriptors(tools)
    await compile_runtime_tools(descriptors, schemas)
    return descriptors


@dataclass(frozen=True, slots=True)
class CheckedBindings:
    bindings: list[SavedBinding]  # as saved in the session's config
    descriptors: list[ToolDescriptor]  # what the model sees, `<alias>_<name>`
    executors: list[Executor]  # to bind to the session once it exists


async def _check_runtime_binding(
    binding: RequestBinding, alias: str, *, tenant: str, hub: ExecutorHub
) -> tuple[SavedBinding, list[ToolDescriptor], Executor]:
    if binding.get("operations") is not None or binding.get("parameters") is not None:
        raise InvalidRequest(f"binding {alias!r}: operations and parameters belong to provider bindings")
    executor_id, runtime = binding.get("executor"), binding.get("runtime")
    if not isinstance(executor_id, str) or not isinstance(runtime, list):
        raise InvalidRequest(f"binding {alias!r} needs an executor and its runtime tools, or a provider")
    declared = runtime_descriptors(runtime)
    executor = hub.get(executor_id)
    if executor is None:  # a fleet: another instance may hold it
        executor = await hub.held_elsewhere(executor_id)
    if executor is None or executor.tenant != tenant:
        raise InvalidRequest(f"binding {alias!r}: runtime executor {executor_id!r} is not registered")
    if executor.session:
        raise InvalidRequest(f"binding {alias!r}: runtime executor {executor_id!r} serves another session")
    if executor.binding != alias:
        raise InvalidRequest(f"binding {alias!r}: the executor was registered for binding {executor.binding!r}")
    if normalized_tools(executor.tools) != normalized_tools(declared):
        raise InvalidRequest(f"binding {alias!r}: the runtime tools differ from the executor's registration")
    return {"alias": alias, "executor": executor_id, "runtime": declared}, declared, executor


def _checked_operations(binding: RequestBinding, alias: str) -> list[str]:
    operations = binding.get("operations")
    if operations is None:
        return []
    if not isinstance(operations, list) or not all(isinstance(item, str) for item in operations):
        raise InvalidRequest(f"binding {alias!r}: operations must be a list of names")
    if len(set(operations)) != len(operations):
        raise InvalidRequest(f"binding {alias!r}: an operation is listed twice")
    return operations


async def _bound_descriptors(
    provider: ToolProvider,
    alias: str,
    *,
    tenant: str,
    operations: Sequence[str],
    parameters: object,
    schemas: SchemaWorkers,
) -> list[ToolDescriptor]:
    """provider.bind(), its answer checked: descriptors of exactly the operations asked for.
    ValueError is the client's (400); anything else wrong is the provider's (500)."""
    try:
        descriptors = await provider.bind(tenant=tenant, operations=list(operations), parameters=parameters)
    except ValueError as exc:
        raise InvalidRequest(_detail(f"binding {alias!r}: {exc}")) from exc
    except ProviderError as exc:
        raise BrainError(_detail(f"binding {alias!r}: tool provider {provider.name!r} is unavailable: {exc}")) from exc
    try:
        checked = await check_runtime_tools(descriptors, schemas)
    except InvalidRequest as exc:
        raise BrainError(f"tool provider {provider.name!r} returned invalid descriptors: {exc.message}") from exc
    names = [descriptor["name"] for descriptor in checked]
    if operations and sorted(names) != sorted(operations):
        raise BrainError(f"tool provider {provider.name!r} returned descriptors for other operations than asked")
    return checked


async def _check_provider_binding(
    binding: RequestBinding, alias: str, *, tenant: str, providers: ProviderRegistry, schemas: SchemaWorkers
) -> tuple[SavedBinding, list[ToolDescriptor]]:
    if binding.get("executor") is not None or binding.get("runtime") is not None:
        raise InvalidRequest(f"binding {alias!r}: a provider binding has no executor or runtime tools")
    name = binding["provider"]
    if not isinstance(name, str):
        raise InvalidRequest(f"binding {alias!r}: provider must be a name")
    provider = providers.get(name)
    if provider is None:
        raise Unsupported(_detail(f"binding {alias!r}: tool provider {name!r} is not installed on this server"))
    operations = _checked_operations(binding, alias)
    if not provider.authorize(tenant):
        raise Forbidden(_detail(f"binding {alias!r}: tool provider {name!r} is not available to this tenant"))
    parameters = binding.get("parameters")
    descriptors = await _bound_descriptors(
        provider, alias, tenant=tenant, operations=operations, parameters=parameters, schemas=schemas
    )
    saved: SavedBinding = {
        "alias": alias,
        "provider": name,
        "operations": [descriptor["name"] for descriptor in descriptors],
    }
    if parameters is not None:
        saved["parameters"] = parameters
    return saved, descriptors


async def check_bindings(
    raw: Sequence[object],
    *,
    tenant: str,
    tools: Sequence[str],
    hub: ExecutorHub,
    providers: ProviderRegistry | None = None,
) -> CheckedBindings:
    """Validate `config.bindings` of a create request: 400 for a bad binding or a tool name
    collision, 403 for a provider the tenant may not use, 422 for one not installed. Provider
    bindings are bound (their parameters checked, their descriptors resolved) but nothing runs.
    In a fleet a runtime executor another live instance holds is checked by what its holder
    recorded in Redis (503 while Redis is out of reach). The runtime tools' schemas compile last,
    off the loop, once every binding passed the cheap checks (429 while the schema pool is busy)."""
    if len(raw) > MAX_BINDINGS:
        raise InvalidRequest(f"a session has at most {MAX_BINDINGS} bindings")
    installed = providers if providers is not None else ProviderRegistry()
    names = set(tools)
    aliases: set[str] = set()
    saved: list[SavedBinding] = []
    descriptors: list[ToolDescriptor] = []
    executors: list[Executor] = []
    runtime: list[ToolDescriptor] = []  # compiled once every binding passed the cheap checks
    for binding in raw:
        if not isinstance(binding, dict):
            raise InvalidRequest("a binding must be an object")
        alias = binding.get("alias")
        if not isinstance(alias, str) or not ALIAS.fullmatch(alias):
            raise InvalidRequest(f"binding alias {alias!r} must start with a letter: 1-32 of A-Z a-z 0-9 _ -")
        if alias in aliases:
            raise InvalidRequest(f"binding alias {alias!r} is used twice")
        aliases.add(alias)
        if binding.get("provider") is not None:
            entry, declared = await _check_provider_binding(
                binding, alias, tenant=tenant, providers=installed, schemas=hub.schemas
            )
        else:
            entry, declared, executor = await _check_runtime_binding(binding, alias, tenant=tenant, hub=hub)
            executors.append(executor)
            runtime.extend(declared)
        for tool in declared:
            visible = f"{alias}_{tool['name']}"
            if visible in names:
                raise InvalidRequest(f"binding tool {visible!r} collides with another tool of the session")
            names.add(visible)
            descriptors.append({**tool, "name": visible})
        saved.append(entry)
    if runtime:
        await compile_runtime_tools(runtime, hub.schemas)
    return CheckedBindings(saved, descriptors, executors)
