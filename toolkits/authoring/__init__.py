"""Placed tools, written in Python: `tool(...)` declares a model-visible contract with `run` (a
function this process holds) or `implementation` (a component a brain environment runs); calling
the tool with `env=` and options places it; `create_placed_session` registers this process as
the host of its host environments and creates the session (README, "Tool environments").

Built on the published client (`brain`): its executor wire (RuntimeExecutor's command stream and
replies) carries the calls; this module adds the environment's binding name, the context
(`options`, `sequence`, `deadline`, `signal`, `emit`) and the host's own input and output checks.
Imports nothing of the server.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from brain import Brain
from brain.runtime import RuntimeExecutor

__all__ = [
    "COMPONENT",
    "Context",
    "Environment",
    "PlacedSession",
    "Placement",
    "Tool",
    "brain_env",
    "component",
    "create_placed_session",
    "host_env",
    "service_env",
    "tool",
]

JSON = dict[str, Any]
READY_SECONDS = 30  # the published client's wait for the command stream's `ready`


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
    emit: Callable[[str, Any], None]  # returns once Brain has committed the event


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
        if options and self.options is not None:
            jsonschema.validate(options, self.options)
        return Placement(self, env, options if self.options is not None else None)


def tool(
    *,
    name: str,
    description: str,
    input: JSON,
    output: JSON | None = None,
    options: JSON | None = None,
    run: Callable[[Any, Context], Any] | None = None,
    implementation: _Component | None = None,
) -> Tool:
    """A tool's contract; `run` or `implementation` (or both) say how environments run it."""
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
            if not cancelled.is_set():
                self._reply(call, result=result)  # type: ignore[no-untyped-call]  # the published client
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
        except Exception as error:
            return _error(str(error))
        # the output goes back as the function returned it: Brain checks it against the output
        # schema and records `invalid_output` when it does not match
        return {"content": [{"type": "text", "text": json.dumps(value)}], "structured_content": value}


def _post(client: Brain, path: str, body: Any) -> Any:
    """POST a JSON body with the client's credential (the published client's own helper is
    private); BrainError for an error answer, as the client raises it."""
    from brain import BrainError

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
    by_env: dict[str, list[Tool]] = {}
    environments: dict[str, Environment] = {}
    for placement in placements:
        environments[placement.env.name] = placement.env
        if placement.env.kind == "host":
            by_env.setdefault(placement.env.name, []).append(placement.tool)
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
