"""Wire schemas of the sessions API, named as the contract's components (openapi.json):
strict request bodies, and response bodies that handlers returning a dict are checked against.
Imported only by sessions_app.api and the URL wiring."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from foundation.wire import DateTime, Status, StrictSchema, Tool, WireSchema

__all__ = [
    "Approval",
    "ApprovalDecision",
    "Checkpoint",
    "ConfigChange",
    "CreateSession",
    "CredentialInput",
    "Deleted",
    "Event",
    "EventList",
    "Input",
    "Media",
    "Placement",
    "ModelCredential",
    "SendAccepted",
    "Session",
    "SessionConfig",
    "SessionList",
    "Status",
    "Tool",
    "ToolBinding",
]


class ToolBinding(StrictSchema):
    alias: str
    executor: str | None = None
    operations: list[str] | None = None
    parameters: Any = None
    provider: str | None = None
    runtime: list[Tool] | None = None


class PlacedTool(StrictSchema):
    """A placed tool's canonical definition (the same in every placement of it)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    options_schema: dict[str, Any] | None = None


class ToolPlacement(StrictSchema):
    tool: PlacedTool
    env: str
    options: Any = None


class EnvironmentBinding(StrictSchema):
    name: str
    executor: str | None = None
    filesystem: dict[str, str] | None = None


class Presentation(StrictSchema):
    mode: Literal["policy", "selector"]
    choose: dict[str, str] | None = None


class Placement(StrictSchema):
    """Environments the session binds and its tools placed in them (additive to the contract;
    immutable after create)."""

    environments: list[EnvironmentBinding]
    tools: list[ToolPlacement]
    presentation: Presentation | None = None


class SessionConfig(StrictSchema):
    model: str
    tools: list[str]
    instructions: str | None = None
    reasoning_effort: str | None = None
    bindings: list[ToolBinding] | None = None
    placement: Placement | None = None  # additive: tool environments (README, "Tool environments")


class CredentialInput(StrictSchema):
    binding: str
    value: Any


class ModelCredential(StrictSchema):
    """A model key for this session alone (2.3.0's `ApiKey`) or the name of one the host config
    declares (`CredentialReference`): exactly one of the two, checked by operations."""

    api_key: str | None = None
    reference: str | None = None


class CreateSession(StrictSchema):
    harness: str
    config: SessionConfig
    credentials: list[CredentialInput] | None = None
    model_credential: ModelCredential | None = None  # additive: the 2.3.0 client's field


class Media(StrictSchema):
    """An image on a user.message (client 2.3.0): an image MIME type (or "image" with a data:
    URL) and a data: or https URL; operations check the rest."""

    type: str
    url: str


class ConfigChange(StrictSchema):
    """The fields of a session's configuration a `session.configure` changes (at least one)."""

    model: str | None = None
    tools: list[str] | None = None
    instructions: str | None = None
    reasoning_effort: str | None = None


class Input(StrictSchema):
    """`user.message`, `user.interrupt` or `session.configure`. A `delivery` outside the enum
    is 400; "steer" adds the text to the running turn (422 `unsupported` when the session's
    harness does not steer). `config` (session.configure only): the configuration fields to
    change, applied between the turns around it. `key` (user.message and session.configure): a
    resend with the same key answers with the input first recorded."""

    type: Literal["user.message", "user.interrupt", "session.configure"]
    text: str | None = None
    media: list[Media] | None = None
    key: str | None = None
    delivery: Literal["queue", "steer"] | None = Field(
        default=None,
        description=(
            '"queue" (the default): run after the turns before it. "steer": guidance for the running'
            " turn, folded in before its next model request; with no running turn it is queued."
        ),
    )
    config: ConfigChange | None = Field(
        default=None,
        description=(
            "session.configure only: the model, tools, instructions or reasoning_effort to change,"
            " checked as create checks them; applied after the turns queued before it."
        ),
    )


class ApprovalDecision(StrictSchema):
    """A person's decision on a tool call that waits for approval (an additive operation)."""

    decision: Literal["approve", "reject"]
    reason: str | None = None


class Approval(WireSchema):
    id: str
    session_id: str
    call_id: str
    tool: str
    arguments: Any
    status: Literal["pending", "approved", "rejected", "expired", "cancelled"]
    created_at: DateTime
    expires_at: DateTime
    decided_by: str | None = None
    decided_at: DateTime | None = None
    reason: str | None = None


class Checkpoint(WireSchema):
    id: str
    offset: int
    time: DateTime


class Session(WireSchema):
    id: str
    harness: str
    config: SessionConfig
    status: str
    created_at: DateTime
    updated_at: DateTime
    descriptors: list[Tool]
    checkpoint: Checkpoint | None = None
    credential_bindings: list[str] | None = None


class SessionList(WireSchema):
    sessions: list[Session]


class Deleted(WireSchema):
    """The answer of DELETE /sessions/{id}: the session's id, and that it is gone."""

    id: str
    deleted: bool


# An addition to the contract's words, not its shapes (descriptions only document).
_EVENT_DATA = (
    "Type-specific payload. A live `assistant.delta` carries `text` and `offset`: the characters "
    "(Unicode code points) of its message's text before it, so a client drops what it already has; "
    "offsets start at 0 again after each `assistant.message` and each `session.status`."
)


class Event(WireSchema):
    id: str
    type: str
    time: DateTime
    data: Any = Field(description=_EVENT_DATA)
    input_id: str | None = None
    cursor: str | None = None


class EventList(WireSchema):
    events: list[Event]
    next_cursor: str


def _one_of(schema: dict[str, Any]) -> None:
    # A send answers exactly one of the two shapes, which the contract spells `oneOf`;
    # pydantic spells every union `anyOf`.
    schema["oneOf"] = schema.pop("anyOf")


# 202 of a send: the recorded user.message Event, or Status for an interrupt.
SendAccepted = Annotated[Event | Status, Field(json_schema_extra=_one_of)]
