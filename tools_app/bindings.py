"""Session tool bindings (`config.bindings`): tools a session gets under an alias, beside the
operator's `config.tools`.

A `runtime` binding names an executor and its descriptors; the model sees `<alias>_<name>` and
each call goes to whichever executor currently serves the session's alias (a rebind after a
restart replaces it). A `provider` binding names an installed provider with `operations` and
`parameters`; the model sees `<alias>_<operation>` and each call runs the provider's `handle`
with the trusted identity, the parameters and the binding's credential. `check_bindings`
validates a create request; `SessionBindings` routes and runs calls for a loaded session, binding
a saved provider binding again (with its saved parameters) before its first call.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError
from jsonschema.protocols import Validator

from foundation.errors import BrainError, Forbidden, InvalidRequest, Unsupported
from foundation.tool_schemas import first_error_off_loop
from runners.protocol import ToolDescriptor

from .executors import CallLost, Executor, ExecutorHub, ExecutorUnavailable, normalized_tools
from .providers.base import CredentialUnavailable, ProviderCall, ProviderError, SessionView, ToolProvider
from .providers.registry import ProviderRegistry
from .registry import (
    CallCancelled,
    CallContext,
    Invocation,
    Outcome,
    checked_invocation,
    compile_schema,
    invoke_provider,
)

__all__ = [
    "RUNTIME_CALL_SECONDS",
    "CredentialSource",
    "SessionBindings",
    "check_bindings",
    "check_runtime_tools",
    "no_credentials",
]

ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_BINDINGS = 16
MAX_RUNTIME_TOOLS = 128
RUNTIME_CALL_SECONDS = 300.0  # a runtime call with no result by then is a timeout
DESCRIPTOR_KEYS = frozenset({"name", "description", "input_schema", "output_schema"})
MAX_DETAIL = 300  # characters of a provider's message shown to the client or the model

# The private credential of a provider binding: (tenant, session_id, alias) -> the decrypted
# value, None when the binding has none; raises CredentialUnavailable when it cannot be had.
CredentialSource = Callable[[str, str, str], Awaitable[Any]]


async def no_credentials(tenant: str, session_id: str, alias: str) -> None:
    """The credential source of a server without a credential vault: no binding has one."""
    return None


def check_runtime_tools(tools: Sequence[Any]) -> list[ToolDescriptor]:
    """Runtime tool descriptors as registered or bound: names, descriptions, valid schemas."""
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
            schema = tool[key]
            if not isinstance(schema, dict):
                raise InvalidRequest(f"runtime tool {name!r}: {key} must be a JSON Schema object")
            try:
                compile_schema(schema)
            except SchemaError as exc:
                raise InvalidRequest(f"runtime tool {name!r}: invalid {key}: {str(exc.message)[:200]}") from exc
        if "input_schema" not in tool:
            raise InvalidRequest(f"runtime tool {name!r} needs an input_schema")
        descriptor: ToolDescriptor = {"name": name, "description": description, "input_schema": tool["input_schema"]}
        if tool.get("output_schema") is not None:
            descriptor["output_schema"] = tool["output_schema"]
        descriptors.append(descriptor)
    return descriptors


@dataclass(frozen=True, slots=True)
class CheckedBindings:
    bindings: list[dict[str, Any]]  # as saved in the session's config
    descriptors: list[ToolDescriptor]  # what the model sees, `<alias>_<name>`
    executors: list[Executor]  # to bind to the session once it exists


def _detail(message: str) -> str:
    return message if len(message) <= MAX_DETAIL else message[: MAX_DETAIL - 1] + "…"


def _check_runtime_binding(
    binding: dict[str, Any], alias: str, *, tenant: str, hub: ExecutorHub
) -> tuple[dict[str, Any], list[ToolDescriptor], Executor]:
    if binding.get("operations") is not None or binding.get("parameters") is not None:
        raise InvalidRequest(f"binding {alias!r}: operations and parameters belong to provider bindings")
    executor_id, runtime = binding.get("executor"), binding.get("runtime")
    if not isinstance(executor_id, str) or not isinstance(runtime, list):
        raise InvalidRequest(f"binding {alias!r} needs an executor and its runtime tools, or a provider")
    declared = check_runtime_tools(runtime)
    executor = hub.get(executor_id)
    if executor is None or executor.tenant != tenant:
        raise InvalidRequest(f"binding {alias!r}: runtime executor {executor_id!r} is not registered")
    if executor.session:
        raise InvalidRequest(f"binding {alias!r}: runtime executor {executor_id!r} serves another session")
    if executor.binding != alias:
        raise InvalidRequest(f"binding {alias!r}: the executor was registered for binding {executor.binding!r}")
    if normalized_tools(executor.tools) != normalized_tools(declared):
        raise InvalidRequest(f"binding {alias!r}: the runtime tools differ from the executor's registration")
    return {"alias": alias, "executor": executor_id, "runtime": declared}, declared, executor


def _checked_operations(binding: dict[str, Any], alias: str) -> list[str]:
    operations = binding.get("operations")
    if operations is None:
        return []
    if not isinstance(operations, list) or not all(isinstance(item, str) for item in operations):
        raise InvalidRequest(f"binding {alias!r}: operations must be a list of names")
    if len(set(operations)) != len(operations):
        raise InvalidRequest(f"binding {alias!r}: an operation is listed twice")
    return operations


async def _bound_descriptors(
    provider: ToolProvider, alias: str, *, tenant: str, operations: Sequence[str], parameters: Any
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
        checked = check_runtime_tools(descriptors)
    except InvalidRequest as exc:
        raise BrainError(f"tool provider {provider.name!r} returned invalid descriptors: {exc.message}") from exc
    names = [descriptor["name"] for descriptor in checked]
    if operations and sorted(names) != sorted(operations):
        raise BrainError(f"tool provider {provider.name!r} returned descriptors for other operations than asked")
    return checked


async def _check_provider_binding(
    binding: dict[str, Any], alias: str, *, tenant: str, providers: ProviderRegistry
) -> tuple[dict[str, Any], list[ToolDescriptor]]:
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
    descriptors = await _bound_descriptors(provider, alias, tenant=tenant, operations=operations, parameters=parameters)
    saved: dict[str, Any] = {
        "alias": alias,
        "provider": name,
        "operations": [descriptor["name"] for descriptor in descriptors],
    }
    if parameters is not None:
        saved["parameters"] = parameters
    return saved, descriptors


async def check_bindings(
    raw: Sequence[Any],
    *,
    tenant: str,
    tools: Sequence[str],
    hub: ExecutorHub,
    providers: ProviderRegistry | None = None,
) -> CheckedBindings:
    """Validate `config.bindings` of a create request: 400 for a bad binding or a tool name
    collision, 403 for a provider the tenant may not use, 422 for one not installed. Provider
    bindings are bound (their parameters checked, their descriptors resolved) but nothing runs."""
    if len(raw) > MAX_BINDINGS:
        raise InvalidRequest(f"a session has at most {MAX_BINDINGS} bindings")
    installed = providers if providers is not None else ProviderRegistry()
    names = set(tools)
    aliases: set[str] = set()
    saved: list[dict[str, Any]] = []
    descriptors: list[ToolDescriptor] = []
    executors: list[Executor] = []
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
            entry, declared = await _check_provider_binding(binding, alias, tenant=tenant, providers=installed)
        else:
            entry, declared, executor = _check_runtime_binding(binding, alias, tenant=tenant, hub=hub)
            executors.append(executor)
        for tool in declared:
            visible = f"{alias}_{tool['name']}"
            if visible in names:
                raise InvalidRequest(f"binding tool {visible!r} collides with another tool of the session")
            names.add(visible)
            descriptors.append({**tool, "name": visible})
        saved.append(entry)
    return CheckedBindings(saved, descriptors, executors)


@dataclass(frozen=True, slots=True)
class _Route:
    alias: str
    remote: str
    arguments: Validator
    output: Validator | None


@dataclass(frozen=True, slots=True)
class _ProviderRoute:
    """A provider binding's operation as the session saved it."""

    alias: str
    provider: str
    operation: str
    parameters: Any
    saved: ToolDescriptor | None  # the descriptor the model was given (None: not in the record)


@dataclass(frozen=True, slots=True)
class _Bound:
    """A saved provider binding bound again in this process: its live descriptors, compiled."""

    provider: ToolProvider
    descriptors: dict[str, ToolDescriptor]
    arguments: dict[str, Validator]
    outputs: dict[str, Validator | None]


class _Refused(Exception):
    """A provider call refused before anything was sent (the model sees an error result)."""


class SessionBindings:
    """The binding tools of one loaded session.

    `descriptors` are the session's saved descriptors: a provider binding whose current
    descriptors differ is refused before a call is sent. `credentials` supplies each provider
    call's private credential; `session` is the view a provider with `reads_session` gets.
    """

    def __init__(
        self,
        bindings: Sequence[dict[str, Any]],
        hub: ExecutorHub,
        *,
        providers: ProviderRegistry | None = None,
        descriptors: Sequence[ToolDescriptor] = (),
        credentials: CredentialSource = no_credentials,
        session: SessionView | None = None,
    ) -> None:
        self._hub = hub
        self._providers = providers if providers is not None else ProviderRegistry()
        self._credentials = credentials
        self._session = session
        self._routes: dict[str, _Route] = {}
        self._provider_routes: dict[str, _ProviderRoute] = {}
        self._bound: dict[str, _Bound] = {}  # alias -> bound in this process
        saved = {descriptor.get("name"): descriptor for descriptor in descriptors}
        for binding in bindings:
            alias = binding.get("alias", "")
            for tool in binding.get("runtime") or ():
                output = tool.get("output_schema")
                self._routes[f"{alias}_{tool['name']}"] = _Route(
                    alias=alias,
                    remote=tool["name"],
                    arguments=compile_schema(tool["input_schema"]),
                    output=compile_schema(output) if output is not None else None,
                )
            if binding.get("provider") is not None:
                for operation in binding.get("operations") or ():
                    name = f"{alias}_{operation}"
                    self._provider_routes[name] = _ProviderRoute(
                        alias=alias,
                        provider=binding["provider"],
                        operation=operation,
                        parameters=binding.get("parameters"),
                        saved=saved.get(name),
                    )

    def __contains__(self, name: object) -> bool:
        return name in self._routes or name in self._provider_routes

    async def invoke(self, context: CallContext, name: str, arguments: Any) -> Invocation:
        """Run one binding call. Raises CancelledError before dispatch and CallCancelled after,
        as ToolRegistry.invoke_call does."""
        if name in self._provider_routes:
            return await self._invoke_provider(context, name, arguments)
        route = self._routes[name]
        problem = await _argument_problem(route.arguments, name, arguments)
        if problem is not None:
            return Invocation.failed(problem)
        executor = self._hub.executor_for(context.session_id, route.alias)
        scope = {"tenant_id": context.tenant, "session_id": context.session_id, "call_id": context.call_id}
        dispatched = False
        try:
            async with asyncio.timeout(RUNTIME_CALL_SECONDS):
                call = self._hub.call(
                    executor,
                    call_id=context.call_id,
                    tool=route.remote,
                    arguments=arguments,
                    scope=scope,
                    progress=context.progress,
                )
                dispatched = True
                raw = await call
        except ExecutorUnavailable as exc:
            return Invocation.failed(f"tool {name!r} is unavailable: {exc}")
        except CallLost as exc:
            return Invocation.failed(f"tool {name!r}: {exc}; remote outcome unknown", outcome=Outcome.UNKNOWN)
        except TimeoutError:
            return Invocation.failed(
                f"tool {name!r} timed out after {RUNTIME_CALL_SECONDS:.0f} s; remote outcome unknown",
                outcome=Outcome.TIMEOUT,
            )
        except asyncio.CancelledError:
            if dispatched:
                raise CallCancelled(name) from None
            raise
        return await checked_invocation(raw, route.output, name)

    async def _bind(self, route: _ProviderRoute, tenant: str) -> _Bound:
        """The provider binding of `route`, bound again with its saved parameters on first use.
        A failure is not kept: the next call tries again."""
        bound = self._bound.get(route.alias)
        if bound is not None:
            return bound
        provider = self._providers.get(route.provider)
        if provider is None:
            raise _Refused(f"tool provider {route.provider!r} is not installed on this server")
        if not provider.authorize(tenant):
            raise _Refused(f"tool provider {route.provider!r} is no longer available to this tenant")
        operations = [item.operation for item in self._provider_routes.values() if item.alias == route.alias]
        try:
            descriptors = await provider.bind(tenant=tenant, operations=operations, parameters=route.parameters)
        except ValueError as exc:
            raise _Refused(f"the binding is no longer accepted: {exc}") from exc
        except ProviderError as exc:
            raise _Refused(f"tool provider {route.provider!r} is unavailable: {exc}") from exc
        try:
            by_name = {descriptor["name"]: _normalized(descriptor) for descriptor in descriptors}
            bound = _Bound(
                provider=provider,
                descriptors={operation: by_name[operation] for operation in operations},
                arguments={op: compile_schema(by_name[op]["input_schema"]) for op in operations},
                outputs={
                    op: compile_schema(by_name[op]["output_schema"]) if by_name[op].get("output_schema") else None
                    for op in operations
                },
            )
        except (KeyError, TypeError, SchemaError) as exc:
            raise _Refused(f"tool provider {route.provider!r} no longer serves these operations as saved") from exc
        self._bound[route.alias] = bound
        return bound

    async def _invoke_provider(self, context: CallContext, name: str, arguments: Any) -> Invocation:
        route = self._provider_routes[name]
        try:
            bound = await self._bind(route, context.tenant)
            current = bound.descriptors[route.operation]
            if route.saved is not None and {**current, "name": name} != route.saved:
                raise _Refused("its descriptor changed since the session was created")
            problem = await _argument_problem(bound.arguments[route.operation], name, arguments)
            if problem is not None:
                return Invocation.failed(problem)
            credential = await self._credentials(context.tenant, context.session_id, route.alias)
        except _Refused as exc:
            return Invocation.failed(_detail(f"tool {name!r} is unavailable: {exc}; the call was not sent"))
        except CredentialUnavailable as exc:
            return Invocation.failed(_detail(f"tool {name!r}: its credential is unavailable: {exc}"))
        provider = bound.provider
        call = ProviderCall(
            tenant=context.tenant,
            session_id=context.session_id,
            call_id=context.call_id,
            alias=route.alias,
            operation=route.operation,
            arguments=arguments,
            parameters=route.parameters,
            credential=credential,
            progress=context.progress,
            session=self._session if provider.reads_session else None,
        )
        return await invoke_provider(
            provider, call, name=name, output=bound.outputs[route.operation], timeout=provider.deadline(route.operation)
        )


def _normalized(descriptor: ToolDescriptor) -> ToolDescriptor:
    """A descriptor as check_runtime_tools saves one, to compare with what a session saved."""
    value: ToolDescriptor = {
        "name": descriptor["name"],
        "description": descriptor["description"],
        "input_schema": descriptor["input_schema"],
    }
    if descriptor.get("output_schema") is not None:
        value["output_schema"] = descriptor["output_schema"]
    return value


async def _argument_problem(validator: Validator, name: str, arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return f"invalid arguments for {name}: arguments must be a JSON object"
    problem = await first_error_off_loop(validator, arguments)
    if problem is None:
        return None
    where = "/".join(str(part) for part in problem.absolute_path)
    return _detail(f"invalid arguments for {name}{' at ' + where if where else ''}: {problem.message}")
