"""A session's provider bindings as a kind of the call path.

A `provider` binding's `<alias>_<operation>` runs the installed provider's `handle` with the
trusted identity, the saved parameters and the binding's credential; the provider binds again
(with its saved parameters) before the first call, and a binding whose descriptors changed
since the session was created is refused before anything is sent. Schemas are compiled on the
given pool, never on the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from jsonschema import SchemaError
from jsonschema.protocols import Validator

from foundation.errors import Overloaded
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema
from runners.protocol import ToolDescriptor

from ..invocation.path import CallContext, Target
from ..invocation.provider_calls import run_provider
from ..invocation.results import Invocation, detail
from ..providers.base import CredentialUnavailable, ProviderCall, ProviderError, SessionView, ToolProvider
from ..providers.registry import ProviderRegistry

__all__ = ["CredentialSource", "ProviderBindings", "no_credentials"]

# The private credential of a provider binding: (tenant, session_id, alias) -> the decrypted
# value, None when the binding has none; raises CredentialUnavailable when it cannot be had.
CredentialSource = Callable[[str, str, str], Awaitable[object]]


async def no_credentials(tenant: str, session_id: str, alias: str) -> None:
    """The credential source of a server without a credential vault: no binding has one."""
    return None


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


class ProviderBindings:
    """The provider bindings of one loaded session (a ToolKind).

    `descriptors` are the session's saved descriptors: a binding whose current descriptors
    differ is refused before a call is sent. `credentials` supplies each call's private
    credential; `session` is the view a provider with `reads_session` gets.
    """

    def __init__(
        self,
        bindings: Sequence[Mapping[str, object]],
        providers: ProviderRegistry,
        *,
        schemas: SchemaWorkers,
        descriptors: Sequence[ToolDescriptor] = (),
        credentials: CredentialSource = no_credentials,
        session: SessionView | None = None,
    ) -> None:
        self._providers = providers
        self._schemas = schemas
        self._credentials = credentials
        self._session = session
        self._routes: dict[str, _ProviderRoute] = {}
        self._bound: dict[str, _Bound] = {}  # alias -> bound in this process
        saved = {descriptor.get("name"): descriptor for descriptor in descriptors}
        for binding in bindings:
            alias, provider = str(binding.get("alias", "")), binding.get("provider")
            if provider is None:
                continue
            for operation in _names(binding.get("operations")):
                name = f"{alias}_{operation}"
                self._routes[name] = _ProviderRoute(
                    alias=alias,
                    provider=str(provider),
                    operation=operation,
                    parameters=binding.get("parameters"),
                    saved=saved.get(name),
                )

    def __contains__(self, name: object) -> bool:
        return name in self._routes

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
        operations = [item.operation for item in self._routes.values() if item.alias == route.alias]
        try:
            descriptors = await provider.bind(tenant=tenant, operations=operations, parameters=route.parameters)
        except ValueError as exc:
            raise _Refused(f"the binding is no longer accepted: {exc}") from exc
        except ProviderError as exc:
            raise _Refused(f"tool provider {route.provider!r} is unavailable: {exc}") from exc
        try:
            by_name = {descriptor["name"]: _normalized(descriptor) for descriptor in descriptors}
            arguments, outputs = await self._schemas.run(partial(_compiled_operations, by_name, operations))
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

    async def resolve(self, context: CallContext, name: str) -> Target | Invocation:
        route = self._routes.get(name)
        if route is None:
            return Invocation.failed(f"tool {name!r} is not enabled for this session")
        try:
            bound = await self._bind(route, context.tenant)
            current = bound.descriptors[route.operation]
            if route.saved is not None and {**current, "name": name} != route.saved:
                raise _Refused("its descriptor changed since the session was created")
        except _Refused as exc:
            return Invocation.failed(detail(f"tool {name!r} is unavailable: {exc}; the call was not sent"))
        return Target(
            arguments=bound.arguments[route.operation],
            dispatch=partial(self._run, route, bound, name),
            schemas=self._schemas,
            kind="provider",
            provider=route.provider,
        )

    async def _run(
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
            provider, call, name=name, output=output, timeout=provider.deadline(route.operation), schemas=self._schemas
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
