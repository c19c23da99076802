"""Placed tools, written in Python: `tool(...)` declares a model-visible contract with `run` (a
function this process holds) or `implementation` (a component a brain environment runs); calling
the tool with `env=` and options places it; `create_placed_session` registers this process as
the host of its host environments and creates the session; `host_placed_session` hosts an
existing session's host environments again, e.g. after this process restarted (README, "Tool
environments").

Built on the published client (`brain`): its executor wire (RuntimeExecutor's command stream and
replies) carries the calls; this module adds the environment's binding name, the context
(`options`, `sequence`, `deadline`, `signal`, `emit`) and the host's own input and output checks.
Imports nothing of the server.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from brain import Brain, BrainError
from brain.runtime import RuntimeExecutor

__all__ = [
    "COMPONENT",
    "Context",
    "Environment",
    "Outcome",
    "PlacedSession",
    "Placement",
    "Tool",
    "brain_env",
    "component",
    "create_placed_session",
    "host_env",
    "host_placed_session",
    "service_env",
    "tool",
]

JSON = dict[str, Any]
READY_SECONDS = 30  # the published client's wait for the command stream's `ready`
PAYLOAD_TOO_LARGE = 413  # a reply past the server's request body limit (input_bytes + 16 KiB)
# no server takes a larger body (input_bytes is at most 1 MiB): such a reply is not even sent
MAX_REPLY_BYTES = (1 << 20) + 16 * 1024
CANCEL_POLL_SECONDS = 0.1  # how soon an async function's task is cancelled once its call is


@dataclass(frozen=True)
class Environment:
    name: str
    kind: str  # host, brain or service
    filesystem: Mapping[str, str] = field(default_factory=dict)  # brain: {"workspace": "read"}


def host_env(name: str) -> Environment:
    """A host environment: this process runs the functions placed in it."""
    return Environment(name, "host")


def brain_env(name: str, *, filesystem: Mapping[str, str] | None = None) -> Environment:
    """A brain environment the server offers, with the grants this binding requests."""
    return Environment(name, "brain", dict(filesystem or {}))


def service_env(name: str) -> Environment:
    """A service environment the server offers (its tools are the operator's)."""
    return Environment(name, "service")


@dataclass(frozen=True)
class _Component:
    """The component of the environment that exports the tool's name (the operator names the
    files in the host config; a session never sends one)."""


COMPONENT = _Component()


def component() -> _Component:
    return COMPONENT


@dataclass
class Context:
    """What a host function gets beside its input."""

    options: Any
    sequence: str  # the committed position of the call's tool.call in the session's log
    deadline: str
    signal: threading.Event  # set when the call is cancelled
    environment: str
    emit: Callable[[str, Any], None]  # returns once Brain has committed the event (an async run too)


@dataclass(frozen=True)
class Outcome:
    """What a host function may return instead of its output: `Outcome.ok(value)` (as returning
    the value), `Outcome.error(message, details=...)` (a known failure: outcome `error`, the
    details its `structured_content`) or `Outcome.unknown(message)` (the action may have
    happened: outcome `unknown`)."""

    status: str  # ok, error or unknown
    value: Any = None  # ok: the output; error: its structured details (None for none)
    message: str = ""

    @classmethod
    def ok(cls, value: Any) -> Outcome:
        return cls("ok", value)

    @classmethod
    def error(cls, message: str, *, details: Any = None) -> Outcome:
        return cls("error", details, message)

    @classmethod
    def unknown(cls, message: str) -> Outcome:
        return cls("unknown", None, message)

    def result(self) -> JSON:
        """The wire result; ValueError for a value that is not JSON."""
        if self.status not in ("ok", "error", "unknown"):
            raise ValueError(f"an outcome is ok, error or unknown, not {self.status!r}")
        if self.status != "ok":
            result = _error(self.message or self.status)
            if self.value is not None:
                _json_text(self.value)
                result["structured_content"] = self.value
            if self.status == "unknown":
                result["unknown_outcome"] = True
            return result
        # the output goes back as the function returned it: Brain checks it against the output
        # schema and records `invalid_output` when it does not match
        return {"content": [{"type": "text", "text": _json_text(self.value)}], "structured_content": self.value}


@dataclass(frozen=True)
class Placement:
    tool: Tool
    env: Environment
    options: JSON | None

    def wire(self, executors: Mapping[str, str]) -> JSON:
        value: JSON = {"tool": self.tool.definition(), "env": self.env.name}
        if self.options is not None:
            value["options"] = self.options
        return value


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input: JSON
    output: JSON | None = None
    options: JSON | None = None
    run: Callable[[Any, Context], Any] | None = None
    implementation: _Component | None = None

    def definition(self) -> JSON:
        value: JSON = {"name": self.name, "description": self.description, "input_schema": self.input}
        if self.output is not None:
            value["output_schema"] = self.output
        if self.options is not None:
            value["options_schema"] = self.options
        return value

    def descriptor(self) -> JSON:
        """As the executor registers it: the definition without its options schema."""
        return {key: value for key, value in self.definition().items() if key != "options_schema"}

    def __call__(self, *, env: Environment, **options: Any) -> Placement:
        if env.kind == "host" and self.run is None:
            raise ValueError(f"tool {self.name!r} has no run function to place in host environment {env.name!r}")
        if env.kind == "brain" and self.implementation is None:
            raise ValueError(f"tool {self.name!r} has no implementation for brain environment {env.name!r}")
        if self.options is None:
            if options:  # the server would refuse them (400): say so where they are written
                raise ValueError(f"tool {self.name!r} has no options schema: {', '.join(sorted(options))} not allowed")
            return Placement(self, env, None)
        if options:
            jsonschema.validate(options, self.options)
        return Placement(self, env, options)


def tool(
    *,
    name: str,
    description: str,
    input: JSON,
    output: JSON | None = None,
    options: JSON | None = None,
    run: Callable[[Any, Context], Any] | Callable[[Any, Context], Awaitable[Any]] | None = None,
    implementation: _Component | None = None,
) -> Tool:
    """A tool's contract; `run` or `implementation` (or both) say how environments run it.
    `run(input, ctx)` returns the output (JSON) or an Outcome; an `async def` runs to completion
    on an event loop of its own, its task cancelled when the call is."""
    if run is None and implementation is None:
        raise ValueError("a tool needs run or implementation")
    return Tool(name, description, input, output, options, run, implementation)


class _Host(RuntimeExecutor):
    """The published client's executor, registered for a host environment's binding, running
    placed functions with their context and checking their input and output itself."""

    def __init__(self, client: Brain, env: str, tools: Sequence[Tool], session: str | None = None) -> None:
        # RuntimeExecutor.__init__, registering under the environment's name rather than "runtime"
        self._placed = {placed.name: placed for placed in tools}
        self.binding = env
        registration: JSON = {"binding": env, "tools": [placed.descriptor() for placed in tools]}
        if session:
            registration["session"] = session
        credential = _post(client, "/executors", registration)
        self.id = credential["id"]
        self.client = Brain(client.url, credential["token"], client.timeout)
        self.tools = {placed.name: placed for placed in tools}  # type: ignore[misc]  # names are all it reads
        self.connection = ""
        self.calls: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.error: Exception | None = None
        self.response = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        if not self.ready.wait(READY_SECONDS) or self.error:
            self.close()  # type: ignore[no-untyped-call]  # the published client is untyped
            raise RuntimeError(f"the host executor of {env!r} did not become ready") from self.error

    def _invoke(self, command: JSON, cancelled: threading.Event) -> None:
        call = command["call_id"]
        scope = command.get("scope") or {}
        try:

            def emit(kind: str, data: Any) -> None:
                _post(
                    self.client,
                    f"/executors/{self.id}/responses",
                    {"connection": self.connection, "call_id": call, "event": {"kind": kind, "data": data}},
                )

            result = self._result(command, scope, cancelled, emit)
            if len(json.dumps(result)) > MAX_REPLY_BYTES:
                result = _error(f"output is too large: its reply exceeds {MAX_REPLY_BYTES} bytes")
            if not cancelled.is_set():
                try:
                    self._reply(call, result=result)  # type: ignore[no-untyped-call]  # the published client
                except BrainError as refused:
                    if refused.status != PAYLOAD_TOO_LARGE:
                        raise
                    # refused before it was read: the call is still pending, its output never recorded
                    too_large = _error(f"output is too large: the server refused it ({refused})")
                    self._reply(call, result=too_large)  # type: ignore[no-untyped-call]  # the published client
        except Exception as error:  # a lost reply is never resent: closing makes it unknown
            self.error = error
            self.stopped.set()
            try:
                _post(self.client, f"/executors/{self.id}/close", None)
            except Exception:
                pass
        finally:
            with self.lock:
                self.calls.pop(call, None)

    def _result(self, command: JSON, scope: JSON, cancelled: threading.Event, emit: Callable[[str, Any], None]) -> JSON:
        placed = self._placed[command["tool"]]
        arguments = command.get("arguments")
        try:
            jsonschema.validate(arguments, placed.input)
        except jsonschema.ValidationError as error:
            return _error(f"invalid input: {error.message}")
        context = Context(
            options=json.loads(scope.get("options") or "{}"),
            sequence=str(scope.get("sequence", "")),
            deadline=str(scope.get("deadline", "")),
            signal=cancelled,
            environment=str(scope.get("environment", self.binding)),
            emit=emit,
        )
        assert placed.run is not None  # placed in a host environment
        try:
            value = placed.run(arguments, context)
            if inspect.isawaitable(value):
                value = asyncio.run(_until_done(value, cancelled))
        except asyncio.CancelledError:  # its call was cancelled: nothing is replied
            return _error("cancelled")
        except (Exception, SystemExit) as error:  # the function's failure is its call's alone
            return _error(str(error) or type(error).__name__)
        outcome = value if isinstance(value, Outcome) else Outcome.ok(value)
        try:
            return outcome.result()
        except ValueError as error:
            return _error(f"output is not JSON: {error}")


def _post(client: Brain, path: str, body: Any) -> Any:
    """POST a JSON body with the client's credential (the published client's own helper is
    private); BrainError for an error answer, as the client raises it."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {client.token}", "Content-Type": "application/json"}
    request = urllib.request.Request(client.url + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=client.timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        try:
            detail = json.loads(error.read(1 << 20)).get("error", {})
        except ValueError:
            detail = {}
        finally:
            error.close()
        raise BrainError(error.code, detail.get("code", "http_error"), detail.get("message", str(error))) from None


def _error(message: str) -> JSON:
    return {"content": [{"type": "text", "text": message}], "is_error": True}


def _json_text(value: Any) -> str:
    """`value` as JSON text; ValueError for a value JSON cannot carry (a set, an object, NaN)."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(str(error)) from None


async def _until_done(awaitable: Awaitable[Any], cancelled: threading.Event) -> Any:
    """An async function's result; its task is cancelled once the call is."""
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        if cancelled.is_set():
            task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_POLL_SECONDS)
    return task.result()


@dataclass
class PlacedSession:
    session: JSON
    hosts: list[_Host]

    @property
    def id(self) -> str:
        return str(self.session["id"])

    def close(self) -> None:
        """Close this process's host executors (the session stays)."""
        for host in self.hosts:
            host.close()  # type: ignore[no-untyped-call]  # the published client is untyped


def host_placed_session(client: Brain, session_id: str, *, placements: Sequence[Placement]) -> PlacedSession:
    """Host an existing placed session's host environments again (this process restarted, or
    closed its hosts): one executor per host environment of `placements`, registered for the
    session. `placements` are the ones the session was created with (at least those of its host
    environments); the server refuses (409) tools that differ from the session's. Calls go to the
    new executors from now on; a call the old host never answered stays unknown."""
    by_env = _host_tools(placements)
    if not by_env:
        raise ValueError("the placements name no host environment: nothing to host")
    hosts: list[_Host] = []
    try:
        for name, tools in by_env.items():
            hosts.append(_Host(client, name, tools, session=session_id))
        session: Any = client.get(session_id)
        return PlacedSession(session, hosts)
    except Exception:
        for host in hosts:
            host.close()  # type: ignore[no-untyped-call]  # the published client is untyped
        raise


def _host_tools(placements: Sequence[Placement]) -> dict[str, list[Tool]]:
    by_env: dict[str, list[Tool]] = {}
    for placement in placements:
        if placement.env.kind == "host":
            by_env.setdefault(placement.env.name, []).append(placement.tool)
    return by_env


def create_placed_session(
    client: Brain,
    *,
    harness: str,
    config: JSON,
    placements: Sequence[Placement],
    presentation: str | Mapping[str, str] = "policy",
    creator: Brain | None = None,
) -> PlacedSession:
    """Register a host executor per host environment of `placements`, then create the session
    with `config.placement`. `presentation`: "selector" (the model picks the environment),
    "policy", or a mapping tool -> environment (the policy's explicit choice). `creator`: the
    client the session is created through (default `client`; in a fleet, another instance's)."""
    by_env = _host_tools(placements)
    environments = {placement.env.name: placement.env for placement in placements}
    hosts: list[_Host] = []
    try:
        for name, tools in by_env.items():
            hosts.append(_Host(client, name, tools))
        executors = {host.binding: host.id for host in hosts}
        bindings = []
        for env in environments.values():
            binding: JSON = {"name": env.name}
            if env.name in executors:
                binding["executor"] = executors[env.name]
            if env.filesystem:
                binding["filesystem"] = dict(env.filesystem)
            bindings.append(binding)
        if presentation == "selector":
            shown: JSON = {"mode": "selector"}
        else:
            shown = {"mode": "policy", **({"choose": dict(presentation)} if isinstance(presentation, Mapping) else {})}
        wire: JSON = {
            "environments": bindings,
            "tools": [placed.wire(executors) for placed in placements],
            "presentation": shown,
        }
        body: Any = {"harness": harness, "config": {**config, "placement": wire}}
        session: Any = (creator if creator is not None else client).create(body)
        return PlacedSession(session, hosts)
    except Exception:
        for host in hosts:
            host.close()  # type: ignore[no-untyped-call]  # the published client is untyped
        raise
