"""A session's placed tools as a kind of the call path: a call names its tool and the
environment the harness chose; the pair resolves to the one implementation placed there (a
runtime executor's function, a host-config tool, a component), never to another placement.

The canonical input schema is checked before anything runs (a refusal is `invalid_input`, with
nothing executed); a successful result whose structured content the canonical output schema
refuses is `invalid_output`. Schemas compile on the hub's pool on a tool's first call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

import orjson
from jsonschema import SchemaError
from jsonschema.protocols import Validator

from foundation.errors import Overloaded
from foundation.hostconfig import EnvironmentConfig
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema, first_error

from ..bindings.runtime import RUNTIME_CALL_SECONDS, call_executor
from ..executors import ExecutorHub
from ..invocation.path import CallContext, Target
from ..invocation.results import (
    CallCancelled,
    InvalidResult,
    Invocation,
    Outcome,
    check_result,
    detail,
    error_result,
)

__all__ = ["ComponentRun", "ComponentRunner", "PlacedTools", "ServiceResolver"]

# Resolves a host-config tool by name for a service placement (the path's config tools).
ServiceResolver = Callable[[CallContext, str], Awaitable[Target | Invocation]]


@dataclass(frozen=True, slots=True)
class ComponentRun:
    """What a component call ended in (toolkits.wasm's ComponentOutcome, as the kind reads it)."""

    status: str  # ok, error, timeout, cancelled
    output: object
    error: str


class ComponentRunner(Protocol):
    """Runs a brain environment's component (tools_app.environments.components)."""

    async def run(
        self,
        environment: str,
        *,
        tenant: str,
        tool: str,
        input: object,
        config: object,
        workspace: str,
        grant: str,
        emit: Callable[[str, object], Awaitable[None]] | None,
    ) -> ComponentRun: ...


@dataclass(frozen=True, slots=True)
class _Placement:
    name: str
    env: str
    options: object
    input_schema: object
    output_schema: object


@dataclass(frozen=True, slots=True)
class _Compiled:
    arguments: Validator
    output: Validator | None


def _compiled(placement: _Placement) -> _Compiled:
    output = placement.output_schema
    return _Compiled(
        arguments=compile_schema(placement.input_schema),
        output=compile_schema(output) if output is not None else None,
    )


def _output_problem(output: Validator | None, result: Mapping[str, Any]) -> str:
    """Why a successful result breaks the canonical output schema, or ""."""
    if output is None:
        return ""
    if "structured_content" not in result:
        return "a tool with an output_schema must return structured_content"
    problem = first_error(output, result["structured_content"])
    return "" if problem is None else str(problem.message)


class PlacedTools:
    """The placed tools of one loaded session (a ToolKind), from its saved `config.placement`."""

    def __init__(
        self,
        placement: Mapping[str, Any],
        *,
        environments: Mapping[str, EnvironmentConfig],
        hub: ExecutorHub,
        service: ServiceResolver,
        components: ComponentRunner | None,
        workspace: str,
    ) -> None:
        self._hub = hub
        self._service = service
        self._components = components
        self._environments = environments
        self._workspace = workspace
        self._grants = {
            str(binding["name"]): str((binding.get("filesystem") or {}).get("workspace", ""))
            for binding in placement.get("environments", ())
        }
        self._placements: dict[tuple[str, str], _Placement] = {}
        for item in placement.get("tools", ()):
            tool = item["tool"]
            key = (str(tool["name"]), str(item["env"]))
            self._placements[key] = _Placement(
                name=key[0],
                env=key[1],
                options=item.get("options", {}),
                input_schema=tool.get("input_schema"),
                output_schema=tool.get("output_schema"),
            )
        self._names = frozenset(name for name, _env in self._placements)
        self._compiled: dict[str, _Compiled] = {}

    @property
    def schemas(self) -> SchemaWorkers:
        return self._hub.schemas

    def __contains__(self, name: object) -> bool:
        return name in self._names

    async def resolve(self, context: CallContext, name: str) -> Target | Invocation:
        placement = self._placements.get((name, context.environment))
        if placement is None:  # never another placement: Brain does not fall back
            return self._unplaced(context, name)
        compiled = self._compiled.get(name)
        if compiled is None:
            try:
                compiled = await self.schemas.run(partial(_compiled, placement))
            except SchemaError as exc:
                return Invocation.failed(detail(f"tool {name!r} is unavailable: its schema is refused: {exc.message}"))
            except Overloaded as exc:
                return Invocation.failed(f"tool {name!r} could not be prepared: {exc.message}; the call was not sent")
            self._compiled[name] = compiled
        environment = self._environments.get(placement.env)
        if environment is None:
            return Invocation.failed(f"environment {placement.env!r} is no longer offered by this server")
        target = Target(
            arguments=compiled.arguments,
            dispatch=partial(self._run, placement, compiled.output, environment),
            schemas=self.schemas,
            kind="runtime" if environment.kind == "host" else "component",
            invalid_input=Outcome.INVALID_INPUT,
        )
        if environment.kind != "service":
            return target
        served = await self._service(context, environment.services[name])
        if isinstance(served, Invocation):
            return served
        return Target(
            arguments=compiled.arguments,
            dispatch=partial(self._run_service, served, compiled.output),
            schemas=self.schemas,
            kind=served.kind,
            provider=served.provider,
            require_approval=served.require_approval,
            approval_timeout_seconds=served.approval_timeout_seconds,
            invalid_input=Outcome.INVALID_INPUT,
        )

    def _unplaced(self, context: CallContext, name: str) -> Invocation:
        """A call naming no environment of its tool: `invalid_input`, nothing executed."""
        placed = ", ".join(repr(env) for tool, env in self._placements if tool == name)
        if not context.environment:
            problem = "names no environment"
        else:
            problem = f"names environment {context.environment!r}, where it is not placed"
        message = f"invalid arguments for {name}: the call {problem}; it is placed in {placed}; nothing ran"
        return Invocation.failed(message, outcome=Outcome.INVALID_INPUT)

    async def _checked(self, name: str, invocation: Invocation, output: Validator | None) -> Invocation:
        if invocation.outcome != Outcome.OK:
            return invocation
        try:
            problem = await self.schemas.run(lambda: _output_problem(output, invocation.result))
        except Overloaded as exc:
            return Invocation.failed(detail(f"tool {name!r}: its output could not be checked: {exc.message}"))
        if problem:
            message = detail(f"tool {name!r} returned output its output_schema refuses: {problem}")
            return Invocation(error_result(message), Outcome.INVALID_OUTPUT)
        return invocation

    async def _run_service(
        self, served: Target, output: Validator | None, context: CallContext, arguments: dict[str, object]
    ) -> Invocation:
        return await self._checked(str(context.environment), await served.dispatch(context, arguments), output)

    async def _run(
        self,
        placement: _Placement,
        output: Validator | None,
        environment: EnvironmentConfig,
        context: CallContext,
        arguments: dict[str, object],
    ) -> Invocation:
        if environment.kind == "brain":
            invocation = await self._run_component(placement, context, arguments)
        else:
            invocation = await self._run_host(placement, context, arguments)
        return await self._checked(placement.name, invocation, output)

    async def _run_host(self, placement: _Placement, context: CallContext, arguments: dict[str, object]) -> Invocation:
        """The executor serving the environment, told the environment, options, the call's
        committed sequence and its deadline in the command's scope."""
        deadline = datetime.fromtimestamp(time.time() + RUNTIME_CALL_SECONDS, tz=UTC)
        scope = {
            "tenant_id": context.tenant,
            "session_id": context.session_id,
            "call_id": context.call_id,
            "environment": placement.env,
            "sequence": str(context.sequence),
            "deadline": deadline.isoformat().replace("+00:00", "Z"),
            "options": orjson.dumps(placement.options).decode(),
        }
        name = placement.name
        token = self._hub.expect_events(context.call_id, context.emit)
        try:
            raw = await call_executor(
                self._hub,
                context,
                placement.env,
                name=name,
                tool=name,
                arguments=arguments,
                scope=scope,
                where=placement.env,
            )
        finally:
            self._hub.forget_events(token)
        if isinstance(raw, Invocation):
            return raw
        try:
            result = await self.schemas.run(lambda: check_result(raw, None))
        except InvalidResult as exc:
            return Invocation.failed(
                detail(f"tool {name!r} returned an invalid result: {exc}"), outcome=Outcome.UNKNOWN
            )
        except Overloaded as exc:
            return Invocation.failed(detail(f"tool {name!r}: its result could not be checked: {exc.message}"))
        if not result.get("is_error"):
            return Invocation(result, Outcome.OK)
        return Invocation(result, Outcome.UNKNOWN if result.get("unknown_outcome") else Outcome.ERROR)

    async def _run_component(
        self, placement: _Placement, context: CallContext, arguments: dict[str, object]
    ) -> Invocation:
        name = placement.name
        if self._components is None:
            return Invocation.failed(f"tool {name!r}: this server runs no WebAssembly components")
        try:
            run = await self._components.run(
                placement.env,
                tenant=context.tenant,
                tool=name,
                input=arguments,
                config=placement.options,
                workspace=self._workspace,
                grant=self._grants.get(placement.env, ""),
                emit=context.emit,
            )
        except asyncio.CancelledError:
            raise CallCancelled(name) from None
        if run.status == "ok":
            text = orjson.dumps(run.output).decode()
            return Invocation(
                {"content": [{"type": "text", "text": text}], "structured_content": run.output}, Outcome.OK
            )
        outcome = {"timeout": Outcome.TIMEOUT, "cancelled": Outcome.CANCELLED}.get(run.status, Outcome.ERROR)
        return Invocation.failed(detail(f"tool {name!r} failed in {placement.env!r}: {run.error}"), outcome=outcome)
