"""`subagents`: one `spawn_<profile>` operation per configured sub-agent profile. A call runs a
child session of the caller's tenant with the profile's harness, model, instructions and tools,
sends it the task, waits for it to settle and returns its final answer.

The child sessions are run through a ChildSessions runner the application injects (sessions_app
implements it), so this module imports nothing of sessions_app. The profile's deadline is the
call's; when it passes, or the parent's turn is interrupted, the child is interrupted too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import Field, field_validator, model_validator

from brainsite.hostconfig import HostConfig
from runners.protocol import ToolDescriptor

from .base import MAX_TIMEOUT_SECONDS, ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, StrictOptions, parse_options, select_operations

__all__ = ["ChildOutcome", "ChildSessions", "ChildSpec", "SubagentOptions", "SubagentProvider", "SubagentProfile"]

OPERATION_PREFIX = "spawn_"
PROFILE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,58}$")  # spawn_<name> stays within 64 characters
MAX_PROFILES = 32
DEFAULT_MAX_DEPTH = 2  # a sub-agent may hand work on once; deeper chains are refused
MAX_DEPTH = 5
MAX_TASK_CHARS = 32 * 1024  # what a model hands over in one call; input_bytes still applies
MAX_TOOLS = 128  # spec: up to 128 tools per session
MAX_DETAIL = 300  # characters of a child's error shown to the model


class SubagentProfile(StrictOptions):
    harness: str = Field(min_length=1)
    model: str = Field(min_length=3, max_length=256)
    instructions: str | None = None
    tools: list[str] = Field(default_factory=list, max_length=MAX_TOOLS)
    description: str | None = Field(default=None, min_length=1, max_length=1024)
    timeout_seconds: float | None = Field(default=None, ge=1, le=MAX_TIMEOUT_SECONDS)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        provider, _, name = value.partition("/")
        if not provider or not name:
            raise ValueError("must be provider/model")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a tool twice")
        return value


class SubagentOptions(CommonOptions):
    profiles: dict[str, SubagentProfile] = Field(min_length=1, max_length=MAX_PROFILES)
    max_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=1, le=MAX_DEPTH)

    @model_validator(mode="after")
    def _profile_names(self) -> SubagentOptions:
        for name in self.profiles:
            if not PROFILE_NAME.fullmatch(name):
                raise ValueError(f"profile name {name[:64]!r} must be 1-58 of A-Z a-z 0-9 _ -")
        return self


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """A child session to create and start: the caller's tenant, session and call."""

    tenant: str
    parent_session: str
    parent_call: str
    profile: str
    harness: str
    model: str
    instructions: str | None
    tools: tuple[str, ...]
    text: str  # the first user.message


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child's turn settled: its status, its last assistant.message text (None without
    one), and the session.error that stopped it ("" when none did)."""

    status: str
    answer: str | None
    error: str = ""


class ChildSessions(Protocol):
    """Child sessions as this provider runs them (implemented by sessions_app.subagents)."""

    async def depth(self, tenant: str, session_id: str) -> int:
        """How many sub-agent links lie above a session (0 for one a client created)."""

    async def start(self, spec: ChildSpec) -> str:
        """Create the child and send its message; its id. ProviderError when it cannot start."""

    async def wait(self, tenant: str, session_id: str) -> ChildOutcome:
        """Wait until the child's turn has settled; cancelling the wait leaves the child running."""

    def interrupt(self, tenant: str, session_id: str) -> None:
        """Interrupt the child's running turn (no-op when none runs)."""


def _descriptor(name: str, profile: SubagentProfile) -> ToolDescriptor:
    description = profile.description or (
        f"Hand a task to the {name} sub-agent. It works on it in a session of its own and returns its final answer."
    )
    return {
        "name": f"{OPERATION_PREFIX}{name}",
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {
                "task": {"type": "string", "minLength": 1, "maxLength": MAX_TASK_CHARS},
                "context": {"type": "string", "maxLength": MAX_TASK_CHARS},
            },
            "required": ["task"],
            "additionalProperties": False,
        },
    }


def _error(text: str, structured: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "structured_content": structured, "is_error": True}


class SubagentProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, Any], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_options(SubagentOptions, options)
        if self.settings.parameters_schema is not None:
            raise ValueError("parameters_schema: sub-agent bindings take no parameters")
        self._served = {
            f"{OPERATION_PREFIX}{profile}": _descriptor(profile, settings)
            for profile, settings in self.settings.profiles.items()
        }
        self._children: ChildSessions | None = None

    def use_child_sessions(self, children: ChildSessions) -> None:
        """The application's runner of child sessions (wired once, at startup)."""
        self._children = children

    def check_host_config(self, config: HostConfig) -> None:
        for name, profile in self.settings.profiles.items():
            where = f"profiles.{name}"
            if profile.harness not in config.harnesses:
                raise ValueError(f"{where}.harness: harness {profile.harness!r} is not configured")
            provider = profile.model.partition("/")[0]
            if provider not in config.providers:
                raise ValueError(f"{where}.model: model provider {provider!r} is not configured")
            tools = {tool.name: tool for tool in config.tools}
            tenants = self.settings.tenants
            for tool in profile.tools:
                if tool not in tools:
                    raise ValueError(f"{where}.tools: {tool!r} is not a tool of the host config")
                missing = sorted(set(tenants or ()) - set(tools[tool].tenants))
                if missing:
                    raise ValueError(f"{where}.tools: {tool!r} is not available to tenant {missing[0]!r}")

    def deadline(self, operation: str) -> float:
        profile = self.settings.profiles.get(operation.removeprefix(OPERATION_PREFIX))
        if profile is None or profile.timeout_seconds is None:
            return self.timeout_seconds
        return profile.timeout_seconds

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: Any) -> list[ToolDescriptor]:
        if parameters not in (None, {}):
            raise ValueError("parameters: sub-agent bindings take no parameters")
        return select_operations(self._served, operations)

    async def handle(self, call: ProviderCall) -> Any:
        """1. refuse beyond max_depth; 2. create and start the child; 3. wait for it to settle
        (on cancellation, a deadline or the parent's interrupt, interrupt the child and re-raise);
        4. its last answer is the result, a child that did not end idle an error result."""
        children = self._children
        name = call.operation.removeprefix(OPERATION_PREFIX)
        profile = self.settings.profiles.get(name)
        if children is None or profile is None:
            raise ProviderError("sub-agents are not available here", reached=False)
        depth = await children.depth(call.tenant, call.session_id)
        if depth >= self.settings.max_depth:
            return _error(
                f"sub-agent {name!r} refused: sub-agents may be nested at most {self.settings.max_depth} deep",
                {"session_id": None, "status": "refused", "answer": None},
            )
        text = call.arguments["task"]
        if call.arguments.get("context"):
            text = f"{text}\n\nContext:\n{call.arguments['context']}"
        child = await children.start(
            ChildSpec(
                tenant=call.tenant,
                parent_session=call.session_id,
                parent_call=call.call_id,
                profile=name,
                harness=profile.harness,
                model=profile.model,
                instructions=profile.instructions,
                tools=tuple(profile.tools),
                text=text,
            )
        )
        try:
            outcome = await children.wait(call.tenant, child)
        except asyncio.CancelledError:
            children.interrupt(call.tenant, child)
            raise
        structured = {"session_id": child, "status": outcome.status, "answer": outcome.answer}
        if outcome.status != "idle" or outcome.answer is None:
            reason = outcome.error[:MAX_DETAIL] or "it gave no answer"
            return _error(f"sub-agent {name!r} (session {child}) ended {outcome.status}: {reason}", structured)
        answer = outcome.answer.encode()[: self.settings.max_output_bytes // 2].decode(errors="ignore")
        return {"content": [{"type": "text", "text": answer}], "structured_content": {**structured, "answer": answer}}
