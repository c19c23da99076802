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
from typing import Protocol

from pydantic import Field, field_validator, model_validator

from foundation.hostconfig import HostConfig
from runners.protocol import ToolDescriptor

from .base import MAX_TIMEOUT_SECONDS, ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, StrictOptions, parse_parameterless_options, select_parameterless

__all__ = [
    "ChildOutcome",
    "ChildRefused",
    "ChildSessions",
    "ChildSpec",
    "SubagentOptions",
    "SubagentProfile",
    "SubagentProvider",
]

OPERATION_PREFIX = "spawn_"
PROFILE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,58}$")  # spawn_<name> stays within 64 characters
MAX_PROFILES = 32
DEFAULT_MAX_DEPTH = 2  # a sub-agent may hand work on once; deeper chains are refused
MAX_DEPTH = 5
MAX_TASK_CHARS = 32 * 1024  # what a model hands over in one call; input_bytes still applies
MAX_TOOLS = 128  # spec: up to 128 tools per session
MAX_DETAIL = 300  # characters of a child's error shown to the model
# A model that loops on spawn_* would otherwise create sessions (directories, harness attachments,
# turns) without end; eight is more fan-out than one step of a plan needs.
DEFAULT_CHILDREN_PER_TURN = 8
MAX_CHILDREN_PER_TURN = 128  # as tools per session: a turn cannot usefully call more
# Sub-agents at work at once for one tenant: half the default `limits.active`, so one tenant's
# fan-out leaves turn slots (and harness hosts) to the others.
DEFAULT_LIVE_PER_TENANT = 8
MAX_LIVE_PER_TENANT = 4096


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
    max_children_per_turn: int = Field(default=DEFAULT_CHILDREN_PER_TURN, ge=1, le=MAX_CHILDREN_PER_TURN)
    max_live_per_tenant: int = Field(default=DEFAULT_LIVE_PER_TENANT, ge=1, le=MAX_LIVE_PER_TENANT)

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
    max_per_turn: int  # sub-agents the parent's running turn may start (max_children_per_turn)
    max_live: int  # sub-agents of the tenant at work at once (max_live_per_tenant)


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child's turn settled: its status, its last assistant.message text (None without
    one), and the session.error that stopped it ("" when none did)."""

    status: str
    answer: str | None
    error: str = ""


class ChildRefused(Exception):
    """A cap refused the child before anything was created; the message names the cap."""


class ChildSessions(Protocol):
    """Child sessions as this provider runs them (implemented by sessions_app.subagents)."""

    async def depth(self, tenant: str, session_id: str) -> int:
        """How many sub-agent links lie above a session (0 for one a client created)."""

    async def start(self, spec: ChildSpec) -> str:
        """Create the child and send its message; its id. ChildRefused at a cap (nothing
        created), ProviderError when it cannot start. The child counts towards its tenant's live
        sub-agents until its wait ends."""

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


def _error(text: str, structured: Mapping[str, object]) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}], "structured_content": structured, "is_error": True}


class SubagentProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_parameterless_options(SubagentOptions, options, kind="sub-agent")
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

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        return select_parameterless(self._served, operations, parameters, kind="sub-agent")

    async def handle(self, call: ProviderCall) -> object:
        """1. refuse beyond max_depth; 2. create and start the child (refused at
        max_children_per_turn or max_live_per_tenant); 3. wait for it to settle
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
        text = str(call.arguments["task"])  # a string: the descriptor requires it
        if call.arguments.get("context"):
            text = f"{text}\n\nContext:\n{call.arguments['context']}"
        spec = ChildSpec(
            tenant=call.tenant,
            parent_session=call.session_id,
            parent_call=call.call_id,
            profile=name,
            harness=profile.harness,
            model=profile.model,
            instructions=profile.instructions,
            tools=tuple(profile.tools),
            text=text,
            max_per_turn=self.settings.max_children_per_turn,
            max_live=self.settings.max_live_per_tenant,
        )
        try:
            child = await children.start(spec)
        except ChildRefused as exc:
            refused = {"session_id": None, "status": "refused", "answer": None}
            return _error(f"sub-agent {name!r} refused: {exc}", refused)
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
