"""What every sandbox backend implements. The tool layer (handles, deadlines, bounded
concurrency, results) is the same for all of them; a backend only talks to its provider.

`settings` are the binding's parameters (or the service's configuration) as the provider names
them (e.g. Modal's `app`, `image`), `credential` the binding's private credential (e.g. E2B's
`apiKey`); neither ever comes from the model. Every method runs on the event loop's thread and
must not block it (an SDK without async calls goes through `asyncio.to_thread`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["COMMAND_DEADLINE_SECONDS", "OUTPUT_LIMIT_BYTES", "ExecResult", "SandboxBackend", "SandboxFailure"]

COMMAND_DEADLINE_SECONDS = 30.0  # spec (tools/sandboxes): each command's deadline
OUTPUT_LIMIT_BYTES = 64 << 10  # spec: combined stdout and stderr kept per command


class SandboxFailure(Exception):
    """The provider refused or failed. `reached`: the action may have happened remotely (a lost
    response, a timeout after sending), so the tool result is an `unknown_outcome` error."""

    def __init__(self, message: str, *, reached: bool) -> None:
        super().__init__(message)
        self.reached = reached


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One command's end: its exit status (None when killed at the deadline), its output (stdout
    and stderr, at most OUTPUT_LIMIT_BYTES together, decoded as UTF-8 with replacement) and the
    explicit flags."""

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool


class SandboxBackend(Protocol):
    """One provider's sandboxes. `sandbox_id` is the provider's own identifier: the tool layer
    signs it into a handle and never shows it to the model bare."""

    name: str  # "local", "modal", "e2b", "daytona"

    async def create(self, settings: Mapping[str, str], credential: Mapping[str, str]) -> str:
        """A new sandbox with the provider's lifetime limit; its identifier."""
        ...

    async def exec(
        self,
        sandbox_id: str,
        command: str,
        *,
        settings: Mapping[str, str],
        credential: Mapping[str, str],
        deadline_seconds: float = COMMAND_DEADLINE_SECONDS,
        output_limit: int = OUTPUT_LIMIT_BYTES,
    ) -> ExecResult:
        """Run `command` (a shell command line) in the sandbox under the deadline and the output
        limit; the whole process group is killed at the deadline or past the limit."""
        ...

    async def inspect(
        self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> dict[str, object]:
        """The sandbox's state as the provider reports it (at least `{"state": ...}`)."""
        ...

    async def terminate(self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]) -> None:
        """Stop and remove the sandbox; a sandbox already gone is not an error."""
        ...
