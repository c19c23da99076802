"""Session bindings as a kind of the call path: the binding tools of one loaded session.

A `runtime` binding's `<alias>_<name>` goes to whichever executor currently serves the session's
alias (a rebind after a restart replaces it). A `provider` binding's `<alias>_<operation>` runs
the provider's `handle` with the trusted identity, the saved parameters and the binding's
credential; the provider binds again (with its saved parameters) before the first call.
Schemas are compiled on the hub's schema pool on a tool's first call, never on the loop (a
session loads without compiling any).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from jsonschema import SchemaError
from jsonschema.protocols import Validator

from foundation.errors import Overloaded
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema
from runners.protocol import ToolDescriptor

from ..executors import CallLost, ExecutorHub, ExecutorUnavailable
from ..invocation.path import CallContext, Target, invoke_tool
from ..invocation.provider_calls import run_provider
from ..invocation.results import CallCancelled, Invocation, Outcome, checked_invocation, detail
from ..providers.base import CredentialUnavailable, ProviderCall, ProviderError, SessionView, ToolProvider
from ..providers.registry import ProviderRegistry

__all__ = ["RUNTIME_CALL_SECONDS", "CredentialSource", "SessionBindings", "no_credentials"]

RUNTIME_CALL_SECONDS = 300.0  # a runtime call with no result by then is a timeout

# The private credential of a provider binding: (tenant, session_id, alias) -> the decrypted
# value, None when the binding has none; raises CredentialUnavailable when it cannot be had.
CredentialSource = Callable[[str, str, str], Awaitable[object]]


async def no_credentials(tenant: str, session_id: str, alias: str) -> None:
    """The credential source of a server without a credential vault: no binding has one."""
    return None


@dataclass(frozen=True, slots=True)
class _Route:
    """A runtime binding's tool as the session saved it, its schemas not yet compiled."""

    alias: str
    remote: str
    arguments: object
    output: object


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A runtime binding's tool's schemas, compiled (on first use)."""

    arguments: Validator
    output: Validator | None


def _compiled(route: _Route) -> _Compiled:
    """compile_schema() of the route's saved schemas (raises SchemaError, TypeError)."""
    output = route.output
    return _Compiled(
        arguments=compile_schema(_schema(route.arguments)),
        output=compile_schema(_schema(output)) if output is not None else None,
    )


def _compiled_operations(
    descriptors: Mapping[str, ToolDescriptor], operations: Sequence[str]
) -> tuple[dict[str, Validator], dict[str, Validator | None]]:
    """The operations' input and output schemas, compiled (raises KeyError, SchemaError)."""
    arguments = {op: compile_schema(descriptors[op]["input_schema"]) for op in operations}
    outputs = {
        op: compile_schema(descriptors[op]["output_schema"]) if descriptors[op].get("output_schema") else None
        for op in operations
    }
    return arguments, outputs


@dataclass(frozen=True, slots=True)
class _ProviderRoute:
    """A provider binding's operation as the session saved it."""

    alias: str
    provider: str
    operation: str
    parameters: object
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


def _names(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _schema(value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise TypeError("a saved runtime tool's schema is not an object")
    return value


def _runtime_tools(value: object) -> list[Mapping[str, object]]:
    return [tool for tool in value if isinstance(tool, Mapping)] if isinstance(value, list) else []


class SessionBindings:
    """The binding tools of one loaded session (a ToolKind).

    `descriptors` are the session's saved descriptors: a provider binding whose current
    descriptors differ is refused before a call is sent. `credentials` supplies each provider
    call's private credential; `session` is the view a provider with `reads_session` gets.
    """

    def __init__(
        self,
        bindings: Sequence[Mapping[str, object]],
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
        self._compiled: dict[str, _Compiled] = {}  # route name -> its schemas, once compiled
        self._provider_routes: dict[str, _ProviderRoute] = {}
        self._bound: dict[str, _Bound] = {}  # alias -> bound in this process
        saved = {descriptor.get("name"): descriptor for descriptor in descriptors}
        for binding in bindings:
            alias = str(binding.get("alias", ""))
            for tool in _runtime_tools(binding.get("runtime")):
                self._routes[f"{alias}_{tool['name']}"] = _Route(
                    alias=alias,
                    remote=str(tool["name"]),
                    arguments=tool.get("input_schema"),
                    output=tool.get("output_schema"),
                )
            provider = binding.get("provider")
            if provider is not None:
                for operation in _names(binding.get("operations")):
                    name = f"{alias}_{operation}"
                    self._provider_routes[name] = _ProviderRoute(
                        alias=alias,
                        provider=str(provider),
                        operation=operation,
                        parameters=binding.get("parameters"),
                        saved=saved.get(name),
                    )

    @property
    def schemas(self) -> SchemaWorkers:
        return self._hub.schemas

    def __contains__(self, name: object) -> bool:
        return name in self._routes or name in self._provider_routes

    async def invoke(self, context: CallContext, name: str, arguments: object) -> Invocation:
        """One call of this session's binding tools alone, through the call path."""
        return await invoke_tool(context, name, arguments, kinds=(self,))

    async def resolve(self, context: CallContext, name: str) -> Target | Invocation:
        if name in self._provider_routes:
            return await self._resolve_provider(context, name)
        route = self._routes.get(name)
        if route is None:
            return Invocation.failed(f"tool {name!r} is not enabled for this session")
        compiled = self._compiled.get(name)
        if compiled is None:
            try:
                compiled = await self.schemas.run(partial(_compiled, route))
            except (SchemaError, TypeError) as exc:
                reason = exc.message if isinstance(exc, SchemaError) else str(exc)
                return Invocation.failed(detail(f"tool {name!r} is unavailable: its schema is refused: {reason}"))
            except Overloaded as exc:
                return Invocation.failed(f"tool {name!r} could not be prepared: {exc.message}; the call was not sent")
            self._compiled[name] = compiled
        return Target(
            arguments=compiled.arguments,
            dispatch=partial(self._run_on_executor, route, compiled.output, name),
            schemas=self.schemas,
        )

    async def _run_on_executor(
        self, route: _Route, output: Validator | None, name: str, context: CallContext, arguments: dict[str, object]
    ) -> Invocation:
        """Dispatch to the executor serving the alias. Raises CallCancelled once it was sent."""
        scope = {"tenant_id": context.tenant, "session_id": context.session_id, "call_id": context.call_id}
        relay = self._hub.relay
        try:
            async with asyncio.timeout(RUNTIME_CALL_SECONDS):
                if relay is not None:  # a fleet: the executor may be connected to another instance
                    raw = await relay.call(
                        context.session_id,
                        route.alias,
                        call_id=context.call_id,
                        tool=route.remote,
                        arguments=arguments,
                        scope=scope,
                        progress=context.progress,
                    )
                else:
                    raw = await self._hub.call(
                        self._hub.executor_for(context.session_id, route.alias),
                        call_id=context.call_id,
                        tool=route.remote,
                        arguments=arguments,
                        scope=scope,
                        progress=context.progress,
                    )
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
            raise CallCancelled(name) from None
        return await checked_invocation(raw, output, name, schemas=self.schemas)

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
            arguments, outputs = await self.schemas.run(partial(_compiled_operations, by_name, operations))
            bound = _Bound(
                provider=provider,
                descriptors={operation: by_name[operation] for operation in operations},
                arguments=arguments,
                outputs=outputs,
            )
        except (KeyError, TypeError, SchemaError) as exc:
            raise _Refused(f"tool provider {route.provider!r} no longer serves these operations as saved") from exc
        except Overloaded as exc:
            raise _Refused(exc.message) from exc
        self._bound[route.alias] = bound
        return bound

    async def _resolve_provider(self, context: CallContext, name: str) -> Target | Invocation:
        route = self._provider_routes[name]
        try:
            bound = await self._bind(route, context.tenant)
            current = bound.descriptors[route.operation]
            if route.saved is not None and {**current, "name": name} != route.saved:
                raise _Refused("its descriptor changed since the session was created")
        except _Refused as exc:
            return Invocation.failed(detail(f"tool {name!r} is unavailable: {exc}; the call was not sent"))
        return Target(
            arguments=bound.arguments[route.operation],
            dispatch=partial(self._run_provider, route, bound, name),
            schemas=self.schemas,
        )

    async def _run_provider(
        self, route: _ProviderRoute, bound: _Bound, name: str, context: CallContext, arguments: dict[str, object]
    ) -> Invocation:
        try:
            credential = await self._credentials(context.tenant, context.session_id, route.alias)
        except CredentialUnavailable as exc:
            return Invocation.failed(detail(f"tool {name!r}: its credential is unavailable: {exc}"))
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
        output = bound.outputs[route.operation]
        return await run_provider(
            provider, call, name=name, output=output, timeout=provider.deadline(route.operation), schemas=self.schemas
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
