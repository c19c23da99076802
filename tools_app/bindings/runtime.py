"""A session's runtime executor tools as a kind of the call path.

A `runtime` binding's `<alias>_<name>` goes to whichever executor currently serves the session's
alias (a rebind after a restart replaces it); the hub knows whether that executor is connected
here or to another instance of a fleet. Schemas are compiled on the hub's schema pool on a
tool's first call, never on the loop (a session loads without compiling any).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from jsonschema import SchemaError
from jsonschema.protocols import Validator

from foundation.errors import Overloaded
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema

from ..executors import CallLost, ExecutorHub, ExecutorUnavailable
from ..invocation.path import CallContext, Target
from ..invocation.results import CallCancelled, Invocation, Outcome, checked_invocation, detail

__all__ = ["RUNTIME_CALL_SECONDS", "RuntimeTools"]

RUNTIME_CALL_SECONDS = 300.0  # a runtime call with no result by then is a timeout


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


def _schema(value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise TypeError("a saved runtime tool's schema is not an object")
    return value


def _runtime_tools(value: object) -> list[Mapping[str, object]]:
    return [tool for tool in value if isinstance(tool, Mapping)] if isinstance(value, list) else []


class RuntimeTools:
    """The runtime executor tools of one loaded session (a ToolKind), from its saved bindings."""

    def __init__(self, bindings: Sequence[Mapping[str, object]], hub: ExecutorHub) -> None:
        self._hub = hub
        self._routes: dict[str, _Route] = {}
        self._compiled: dict[str, _Compiled] = {}  # route name -> its schemas, once compiled
        for binding in bindings:
            alias = str(binding.get("alias", ""))
            for tool in _runtime_tools(binding.get("runtime")):
                self._routes[f"{alias}_{tool['name']}"] = _Route(
                    alias=alias,
                    remote=str(tool["name"]),
                    arguments=tool.get("input_schema"),
                    output=tool.get("output_schema"),
                )

    @property
    def schemas(self) -> SchemaWorkers:
        return self._hub.schemas

    def __contains__(self, name: object) -> bool:
        return name in self._routes

    async def resolve(self, context: CallContext, name: str) -> Target | Invocation:
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
            dispatch=partial(self._run, route, compiled.output, name),
            schemas=self.schemas,
            kind="runtime",
        )

    async def _run(
        self, route: _Route, output: Validator | None, name: str, context: CallContext, arguments: dict[str, object]
    ) -> Invocation:
        """Dispatch to the executor serving the alias. Raises CallCancelled once it was sent."""
        scope = {"tenant_id": context.tenant, "session_id": context.session_id, "call_id": context.call_id}
        raw = await call_executor(
            self._hub, context, route.alias, name=name, tool=route.remote, arguments=arguments, scope=scope
        )
        if isinstance(raw, Invocation):
            return raw
        return await checked_invocation(raw, output, name, schemas=self.schemas)


async def call_executor(
    hub: ExecutorHub,
    context: CallContext,
    alias: str,
    *,
    name: str,
    tool: str,
    arguments: dict[str, object],
    scope: dict[str, str],
    where: str = "",
) -> object:
    """The executor's raw reply to one call through `alias`, or the failed Invocation its
    failure maps to (unavailable, lost, timed out; `where` names an environment in the message).
    `name` is the tool's name in the session, `tool` the executor's. Raises CallCancelled once
    it was sent."""
    try:
        async with asyncio.timeout(RUNTIME_CALL_SECONDS):
            return await hub.call_alias(
                context.session_id,
                alias,
                call_id=context.call_id,
                tool=tool,
                arguments=arguments,
                scope=scope,
                progress=context.progress,
            )
    except ExecutorUnavailable as exc:
        place = f" in {where!r}" if where else ""
        return Invocation.failed(f"tool {name!r} is unavailable{place}: {exc}")
    except CallLost as exc:
        return Invocation.failed(f"tool {name!r}: {exc}; remote outcome unknown", outcome=Outcome.UNKNOWN)
    except TimeoutError:
        return Invocation.failed(
            f"tool {name!r} timed out after {RUNTIME_CALL_SECONDS:.0f} s; remote outcome unknown",
            outcome=Outcome.TIMEOUT,
        )
    except asyncio.CancelledError:
        raise CallCancelled(name) from None
