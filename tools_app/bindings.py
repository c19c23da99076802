"""Session tool bindings (`config.bindings`): tools a session gets under an alias, beside the
operator's `config.tools`.

A `runtime` binding names an executor and its descriptors; the model sees `<alias>_<name>` and
each call goes to whichever executor currently serves the session's alias (a rebind after a
restart replaces it). `check_bindings` validates a create request; `SessionBindings` routes
and runs calls for a loaded session.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

from brainsite.errors import InvalidRequest, Unsupported
from runners.protocol import ToolDescriptor

from .executors import CallLost, Executor, ExecutorHub, ExecutorUnavailable, normalized_tools
from .registry import CallCancelled, CallContext, Invocation, Outcome, checked_invocation, compile_schema

__all__ = ["RUNTIME_CALL_SECONDS", "SessionBindings", "check_bindings", "check_runtime_tools"]

ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_BINDINGS = 16
MAX_RUNTIME_TOOLS = 128
RUNTIME_CALL_SECONDS = 300.0  # a runtime call with no result by then is a timeout
DESCRIPTOR_KEYS = frozenset({"name", "description", "input_schema", "output_schema"})


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


def check_bindings(raw: Sequence[Any], *, tenant: str, tools: Sequence[str], hub: ExecutorHub) -> CheckedBindings:
    """Validate `config.bindings` of a create request (400 for a bad binding, 422 for a kind
    this server does not serve)."""
    if len(raw) > MAX_BINDINGS:
        raise InvalidRequest(f"a session has at most {MAX_BINDINGS} bindings")
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
        if binding.get("provider") is not None or binding.get("operations") or binding.get("parameters") is not None:
            raise Unsupported(f"binding {alias!r}: installed tool providers are not enabled on this server")
        executor_id, runtime = binding.get("executor"), binding.get("runtime")
        if not isinstance(executor_id, str) or not isinstance(runtime, list):
            raise InvalidRequest(f"binding {alias!r} needs an executor and its runtime tools")
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
        for tool in declared:
            visible = f"{alias}_{tool['name']}"
            if visible in names:
                raise InvalidRequest(f"binding tool {visible!r} collides with another tool of the session")
            names.add(visible)
            descriptors.append({**tool, "name": visible})
        saved.append({"alias": alias, "executor": executor_id, "runtime": declared})
        executors.append(executor)
    return CheckedBindings(saved, descriptors, executors)


@dataclass(frozen=True, slots=True)
class _Route:
    alias: str
    remote: str
    arguments: Validator
    output: Validator | None


class SessionBindings:
    """The binding tools of one loaded session."""

    def __init__(self, bindings: Sequence[dict[str, Any]], hub: ExecutorHub) -> None:
        self._hub = hub
        self._routes: dict[str, _Route] = {}
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

    def __contains__(self, name: object) -> bool:
        return name in self._routes

    async def invoke(self, context: CallContext, name: str, arguments: Any) -> Invocation:
        """Run one binding call. Raises CancelledError before dispatch and CallCancelled after,
        as ToolRegistry.invoke_call does."""
        route = self._routes[name]
        if not isinstance(arguments, dict):
            return Invocation.failed(f"invalid arguments for {name}: arguments must be a JSON object")
        problem = best_match(route.arguments.iter_errors(arguments))
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path)
            message = f"invalid arguments for {name}{' at ' + where if where else ''}: {problem.message}"
            return Invocation.failed(message[:300])
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
        return checked_invocation(raw, route.output, name)
