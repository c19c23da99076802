"""E2B sandboxes through the official `e2b` SDK (its blocking client, on worker threads).

`E2B(template=, api_key=)`: parameter `template` (default `code-interpreter-v1`), credential
`apiKey`. A sandbox is killed by E2B five minutes after creation; inspecting reads its details
and never connects to or resumes it. The SDK's control-plane retries are off (`retries=0`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from e2b import Sandbox
from e2b.exceptions import (
    AuthenticationException,
    InvalidArgumentException,
    NotFoundException,
    RateLimitException,
)
from e2b.sandbox.commands.command_handle import CommandExitException

from toolkits.sandbox.backend import COMMAND_DEADLINE_SECONDS, OUTPUT_LIMIT_BYTES, ExecResult, SandboxFailure
from toolkits.sandbox.cloud import (
    CONTROL_TIMEOUT_SECONDS,
    CREATE_TIMEOUT_SECONDS,
    LIFETIME_SECONDS,
    RESULT_GRACE_SECONDS,
    credential_value,
    setting_value,
)
from toolkits.sandbox.remote_helper import helper_shell_command, parse_helper_result, result_line_limit

__all__ = ["DEFAULT_TEMPLATE", "E2BBackend"]

DEFAULT_TEMPLATE = "code-interpreter-v1"  # spec
# The API answered and said no (bad key, no such sandbox or template, over quota): nothing ran.
_REFUSALS = (AuthenticationException, InvalidArgumentException, NotFoundException, RateLimitException)
_INSPECTED_FIELDS = ("template_id", "cpu_count", "memory_mb")


class E2BBackend:
    """`api_url`, `sandbox_url` and `http_version` are the SDK's own connection settings, for a
    loopback E2B in tests; left None, the SDK talks to E2B's cloud."""

    name = "e2b"

    def __init__(
        self, *, api_url: str | None = None, sandbox_url: str | None = None, http_version: str | None = None
    ) -> None:
        self.connection: dict[str, Any] = {"retries": 0}  # no automatic retries
        if api_url is not None:
            self.connection["api_url"] = api_url
        if sandbox_url is not None:
            self.connection["sandbox_url"] = sandbox_url
        if http_version is not None:
            self.connection["http_version"] = http_version

    async def create(self, settings: Mapping[str, str], credential: Mapping[str, str]) -> str:
        template = setting_value(settings, "template", DEFAULT_TEMPLATE, provider=self.name)
        options = self._options(credential, CREATE_TIMEOUT_SECONDS)
        return await asyncio.to_thread(_create, template, options)

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
        options = self._options(credential, CONTROL_TIMEOUT_SECONDS)
        line = helper_shell_command(command, deadline_seconds=deadline_seconds, output_limit=output_limit)
        bound = result_line_limit(output_limit)
        timeout = deadline_seconds + RESULT_GRACE_SECONDS
        answer = await asyncio.to_thread(_exec, sandbox_id, line, timeout, bound, options)
        return parse_helper_result(answer, output_limit=output_limit)

    async def inspect(
        self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> dict[str, object]:
        options = self._options(credential, CONTROL_TIMEOUT_SECONDS)
        return await asyncio.to_thread(_inspect, sandbox_id, options)

    async def terminate(self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]) -> None:
        options = self._options(credential, CONTROL_TIMEOUT_SECONDS)
        await asyncio.to_thread(_terminate, sandbox_id, options)

    def _options(self, credential: Mapping[str, str], request_timeout: float) -> dict[str, Any]:
        api_key = credential_value(credential, "apiKey", provider=self.name)
        return {**self.connection, "api_key": api_key, "request_timeout": request_timeout}


def _create(template: str, options: dict[str, Any]) -> str:
    try:
        sandbox = Sandbox.create(
            template=template,
            timeout=LIFETIME_SECONDS,
            lifecycle={"on_timeout": "kill"},  # spec: a five-minute timeout, never paused or resumed
            envs={},  # spec: no credentials are put into sandboxes
            **options,
        )
    except Exception as exc:  # noqa: BLE001 - the SDK's errors are many types; classified once here
        raise _failure("create", exc) from None
    return str(sandbox.sandbox_id)


def _exec(sandbox_id: str, line: str, timeout: float, bound: int, options: dict[str, Any]) -> str:
    try:
        sandbox = Sandbox.connect(sandbox_id, **options)
    except Exception as exc:  # noqa: BLE001 - classified once here
        raise _failure("exec", exc) from None
    received: list[str] = []
    size = 0

    def keep(chunk: str) -> None:  # the helper's one line, never more than the bound
        nonlocal size
        size += len(chunk)
        if size <= bound:
            received.append(chunk)

    try:
        sandbox.commands.run(line, timeout=timeout, on_stdout=keep, retain_output=False)
    except CommandExitException as exc:
        raise SandboxFailure(f"e2b exec: the command helper exited with {exc.exit_code}", reached=True) from None
    except Exception as exc:  # noqa: BLE001 - the command was sent: its outcome is unknown
        raise SandboxFailure(f"e2b exec: the outcome is unknown ({type(exc).__name__}: {exc})", reached=True) from None
    if size > bound:
        raise SandboxFailure("e2b exec: the command helper answered more than any result", reached=True)
    return "".join(received)


def _inspect(sandbox_id: str, options: dict[str, Any]) -> dict[str, object]:
    try:
        info = Sandbox.get_info(sandbox_id, **options)
    except NotFoundException:
        return {"state": "gone"}
    except Exception as exc:  # noqa: BLE001 - classified once here
        raise _failure("inspect", exc) from None
    report: dict[str, object] = {"state": str(info.state.value)}
    for field in _INSPECTED_FIELDS:
        value = getattr(info, field)
        if isinstance(value, str | int) and not isinstance(value, bool):
            report[field] = value
    report["started_at"] = info.started_at.isoformat()
    report["end_at"] = info.end_at.isoformat()
    return report


def _terminate(sandbox_id: str, options: dict[str, Any]) -> None:
    try:
        Sandbox.kill(sandbox_id, **options)  # False when already gone: terminated all the same
    except Exception as exc:  # noqa: BLE001 - classified once here
        raise _failure("terminate", exc) from None


def _failure(action: str, exc: Exception) -> SandboxFailure:
    if isinstance(exc, _REFUSALS):
        return SandboxFailure(f"e2b {action}: refused ({type(exc).__name__})", reached=False)
    return SandboxFailure(f"e2b {action}: the outcome is unknown ({type(exc).__name__})", reached=True)
