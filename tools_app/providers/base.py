"""The tool provider contract.

A provider is a class named by dotted path in the `BRAIN_TOOL_PROVIDERS` setting, built once at
startup with the operator's options. A session binds it in `config.bindings` with an alias,
`operations` and `parameters`: `authorize` decides whether the tenant may use it, `bind`
validates the parameters and returns the descriptors of the chosen operations (the model sees
`<alias>_<operation>`), and `handle` runs one call. The trusted identity (tenant, session, call,
alias), the binding's parameters and its private credential reach `handle` apart from the
model's arguments. Cancellation (an interrupt) arrives as asyncio cancellation; the deadline
(`timeout_seconds`, default 60 s) is enforced around `handle` by the caller.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from runners.protocol import ToolDescriptor

if TYPE_CHECKING:
    from foundation.hostconfig import HostConfig

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "CredentialUnavailable",
    "ProviderCall",
    "ProviderConfigError",
    "ProviderEnvironment",
    "ProviderError",
    "SessionView",
    "ToolProvider",
    "TurnEffects",
]

DEFAULT_TIMEOUT_SECONDS = 60.0  # a provider call with no result by then is a timeout
MAX_TIMEOUT_SECONDS = 86400.0  # the tool deadline's upper bound (reference: tools timeout_seconds)


class ProviderError(Exception):
    """A call that produced no usable result; `reached`: the operation may have happened."""

    def __init__(self, message: str, *, reached: bool) -> None:
        super().__init__(message)
        self.reached = reached


class ProviderConfigError(ValueError):
    """An installed provider that cannot be loaded, or whose options are invalid: Brain refuses
    to start. The message names the provider and the option at fault, never a secret's value."""


class CredentialUnavailable(Exception):
    """The binding's private credential cannot be produced (no key, no record, failed
    authentication): the call is refused before anything is sent, never run without it."""


class SessionView(Protocol):
    """Read access to exactly one session, the calling one: what `session_reads` serves. It
    cannot name another session."""

    async def status(self) -> dict[str, object]:
        """The session's public metadata (as GET /sessions/{id}, without descriptors)."""

    async def events(self, *, after: str, limit: int) -> tuple[list[dict[str, object]], str]:
        """Up to `limit` retained events after a cursor ("" = the start) and the next cursor;
        ValueError for a cursor this session did not issue."""


@dataclass(frozen=True, slots=True)
class ProviderEnvironment:
    """What the application gives every provider at startup: where owned processes may keep
    private working directories, and the environment secrets (`token_env`) are read from."""

    data_dir: Path
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def __repr__(self) -> str:  # never the environment's values
        return f"ProviderEnvironment(data_dir={str(self.data_dir)!r})"

    def secret(self, variable: str) -> str:
        """The value of a `*_env` option, read once at startup; ValueError when unset."""
        value = self.environ.get(variable, "")
        if not value:
            raise ValueError(f"environment variable {variable} is not set")
        return value


class TurnEffects:
    """What a provider that declares `turn_events` may ask of the calling turn besides its
    result: retained events of those types recorded in the session's log before the call's
    tool.result, and the end of the model's turn once the runner has the result. Both apply only
    when the call succeeds."""

    MAX_EVENTS = 4  # a call is one user-facing effect, not a stream (tool.progress is for that)

    def __init__(self, allowed: frozenset[str]) -> None:
        self._allowed = allowed
        self.events: list[tuple[str, object]] = []
        self.end_turn = False

    def record(self, type_: str, data: object) -> None:
        if type_ not in self._allowed:
            raise ValueError(f"event type {type_!r} is not one this provider declares")
        if len(self.events) >= self.MAX_EVENTS:
            raise ValueError(f"a call records at most {self.MAX_EVENTS} events")
        self.events.append((type_, data))

    def end(self) -> None:
        self.end_turn = True


@dataclass(frozen=True, slots=True)
class ProviderCall:
    tenant: str
    session_id: str
    call_id: str
    alias: str
    operation: str  # the operation's name, without the alias prefix
    arguments: dict[str, object]  # the model's arguments, already checked against the descriptor
    parameters: object  # the binding's parameters, as bind() accepted them (None when the binding has none)
    credential: object  # the binding's private credential, decrypted; None without one
    progress: Callable[[object], None]
    session: SessionView | None = None  # the calling session, for providers with reads_session
    effects: TurnEffects | None = None  # for providers with turn_events

    def __repr__(self) -> str:  # never the credential
        return f"ProviderCall(alias={self.alias!r}, operation={self.operation!r}, call_id={self.call_id!r})"


class ToolProvider(ABC):
    """Subclasses validate their own options in `__init__` (raise ValueError with the option's
    name) and read secrets there through `environment.secret`, so a bad installation refuses
    startup instead of failing a call."""

    reads_session: ClassVar[bool] = False  # True: each call carries a SessionView of its session
    turn_events: ClassVar[frozenset[str]] = frozenset()  # event types its calls may record (TurnEffects)

    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        self.name = name
        self.options = options
        self.environment = environment if environment is not None else ProviderEnvironment(Path(".brain").resolve())
        tenants = options.get("tenants")
        if tenants is not None and (
            not isinstance(tenants, list) or not all(isinstance(tenant, str) and tenant for tenant in tenants)
        ):
            raise ValueError("tenants: must be a list of tenant names")
        timeout = options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 1 <= timeout <= MAX_TIMEOUT_SECONDS:
            raise ValueError(f"timeout_seconds: must be a number from 1 to {MAX_TIMEOUT_SECONDS:.0f}")
        self.timeout_seconds = float(timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def authorize(self, tenant: str) -> bool:
        """Whether `tenant` may bind this provider (default: every tenant the options list in
        `tenants`, or all when the options name none)."""
        tenants = self.options.get("tenants")
        return tenants is None or (isinstance(tenants, list) and tenant in tenants)

    def check_host_config(self, config: HostConfig) -> None:  # noqa: B027  # optional: most providers need no check
        """Check the options against the host config at startup (harnesses, model providers,
        tools they name); raise ValueError naming the option at fault. Default: nothing to check."""

    def deadline(self, operation: str) -> float:
        """The deadline of one call of `operation` (default: `timeout_seconds`)."""
        return self.timeout_seconds

    @abstractmethod
    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        """Descriptors (unprefixed names) for `operations` (all when empty); raise ValueError
        with a message for the client when the operations or parameters are not acceptable,
        ProviderError when the operations cannot be established now (discovery failed). It
        performs no action, and runs again when a saved session is loaded."""

    @abstractmethod
    async def handle(self, call: ProviderCall) -> object:
        """The raw result object ({content, structured_content?, is_error?}); raise
        ProviderError when there is none."""

    async def aclose(self) -> None:  # noqa: B027  # optional: providers without resources have nothing to close
        """Release pooled connections and owned processes (shutdown)."""
