"""Daytona sandboxes through the API clients the official `daytona` SDK ships
(`daytona_api_client` for the control plane, `daytona_toolbox_api_client` for commands).

The SDK's `Daytona` class is not used: it retries toolbox POSTs on a dropped connection (a
command could run twice) and opens a Socket.IO connection per client. Its generated clients take
a urllib3 configuration with retries off. Sandboxes stop after five minutes without activity and
are deleted when they stop; a stopped sandbox is never started again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import urllib3
from daytona_api_client import ApiClient, Configuration, CreateSandbox, SandboxApi
from daytona_api_client.exceptions import ApiException, OpenApiException
from daytona_api_client.models.sandbox import Sandbox
from daytona_toolbox_api_client import ApiClient as ToolboxApiClient
from daytona_toolbox_api_client import Configuration as ToolboxConfiguration
from daytona_toolbox_api_client import ExecuteRequest, ProcessApi
from daytona_toolbox_api_client.exceptions import ApiException as ToolboxApiException
from daytona_toolbox_api_client.exceptions import OpenApiException as ToolboxOpenApiException

from toolkits.sandbox.backend import COMMAND_DEADLINE_SECONDS, OUTPUT_LIMIT_BYTES, ExecResult, SandboxFailure
from toolkits.sandbox.cloud import (
    CONTROL_TIMEOUT_SECONDS,
    CREATE_TIMEOUT_SECONDS,
    LIFETIME_SECONDS,
    RESULT_GRACE_SECONDS,
    credential_value,
    setting_value,
)
from toolkits.sandbox.remote_helper import helper_shell_command, parse_helper_result

__all__ = ["DEFAULT_API_URL", "DEFAULT_TARGET", "DaytonaBackend"]

DEFAULT_API_URL = "https://app.daytona.io/api"  # the SDK's default
DEFAULT_TARGET = "us"  # spec
AUTO_STOP_MINUTES = LIFETIME_SECONDS // 60  # spec: an inactivity stop, in Daytona's minutes
AUTO_DELETE_MINUTES = 0  # Daytona: 0 deletes the sandbox as soon as it stops
_START_POLL_SECONDS = 0.5  # reading the state while a new sandbox boots (a read, not a retry)
# An answer the client cannot read (pydantic's ValidationError is a ValueError) is unknown.
# The API answered and said no: the action did not happen.
_REFUSED_STATUSES = frozenset({400, 401, 403, 404, 409, 422, 429})
_BOOTING = frozenset({"creating", "starting", "pulling_snapshot", "pending_build", "building_snapshot", "restoring"})
_INSPECTED_FIELDS = ("target", "cpu", "memory", "disk", "auto_stop_interval", "created_at", "last_activity_at")


class DaytonaBackend:
    """`Daytona(api_url=, target=, api_key=)`: parameters `apiUrl`, `target`, credential `apiKey`.
    `allow_http_api` lets tests point `apiUrl` at a loopback fake; otherwise it must be https,
    so a binding cannot send its key in clear."""

    name = "daytona"

    def __init__(self, *, allow_http_api: bool = False) -> None:
        self.allow_http_api = allow_http_api

    async def create(self, settings: Mapping[str, str], credential: Mapping[str, str]) -> str:
        api = self._sandbox_api(settings, credential)
        target = setting_value(settings, "target", DEFAULT_TARGET, provider=self.name)
        return await asyncio.to_thread(_create, api, target)

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
        api = self._sandbox_api(settings, credential)
        line = helper_shell_command(command, deadline_seconds=deadline_seconds, output_limit=output_limit)
        answer = await asyncio.to_thread(_exec, api, sandbox_id, line, deadline_seconds)
        return parse_helper_result(answer, output_limit=output_limit)

    async def inspect(
        self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> dict[str, object]:
        api = self._sandbox_api(settings, credential)
        return await asyncio.to_thread(_inspect, api, sandbox_id)

    async def terminate(self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]) -> None:
        api = self._sandbox_api(settings, credential)
        await asyncio.to_thread(_terminate, api, sandbox_id)

    def _sandbox_api(self, settings: Mapping[str, str], credential: Mapping[str, str]) -> SandboxApi:
        api_key = credential_value(credential, "apiKey", provider=self.name)
        api_url = setting_value(settings, "apiUrl", DEFAULT_API_URL, provider=self.name).rstrip("/")
        scheme = urllib3.util.parse_url(api_url).scheme
        if scheme != "https" and not (self.allow_http_api and scheme == "http"):
            raise SandboxFailure("the daytona parameter 'apiUrl' must be an https URL", reached=False)
        configuration = Configuration(host=api_url, retries=False)  # no automatic retries
        client = ApiClient(configuration)
        client.default_headers["Authorization"] = f"Bearer {api_key}"
        return SandboxApi(client)


def _create(api: SandboxApi, target: str) -> str:
    request = CreateSandbox(
        target=target,
        auto_stop_interval=AUTO_STOP_MINUTES,
        auto_delete_interval=AUTO_DELETE_MINUTES,
        public=False,  # spec: preview access is private
        env={},  # spec: no credentials are put into sandboxes
    )
    try:
        sandbox = api.create_sandbox(request, _request_timeout=CONTROL_TIMEOUT_SECONDS)
    except (OpenApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
        raise _failure("create", exc) from None
    ends_at = time.monotonic() + CREATE_TIMEOUT_SECONDS
    while _state(sandbox) in _BOOTING and time.monotonic() < ends_at:
        time.sleep(_START_POLL_SECONDS)
        try:
            sandbox = api.get_sandbox(sandbox.id, _request_timeout=CONTROL_TIMEOUT_SECONDS)
        except (OpenApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
            reason = _reason(exc)
            raise SandboxFailure(
                f"daytona create: the new sandbox could not be read ({reason})", reached=True
            ) from None
    if _state(sandbox) != "started":
        _terminate(api, sandbox.id)
        raise SandboxFailure(f"daytona create: the sandbox did not start (state {_state(sandbox)})", reached=True)
    return sandbox.id


def _exec(api: SandboxApi, sandbox_id: str, line: str, deadline_seconds: float) -> str:
    sandbox = _get(api, sandbox_id, "exec")
    if sandbox is None or _state(sandbox) != "started":
        state = "gone" if sandbox is None else _state(sandbox)
        raise SandboxFailure(f"daytona exec: the sandbox is {state}; it is not started again", reached=False)
    configuration = ToolboxConfiguration(
        host=f"{sandbox.toolbox_proxy_url.rstrip('/')}/{sandbox.id}", retries=False
    )  # the SDK's toolbox address for this sandbox; no automatic retries
    client = ToolboxApiClient(configuration)
    client.default_headers["Authorization"] = api.api_client.default_headers["Authorization"]
    # Daytona's own command timeout is a backstop behind the helper's deadline.
    request = ExecuteRequest(command=line, timeout=int(deadline_seconds + RESULT_GRACE_SECONDS))
    try:
        response = ProcessApi(client).execute_command(
            request, _request_timeout=deadline_seconds + 2 * RESULT_GRACE_SECONDS
        )
    except ToolboxApiException as exc:
        reached = exc.status not in _REFUSED_STATUSES
        raise SandboxFailure(f"daytona exec: the toolbox answered {exc.status}", reached=reached) from None
    except (ToolboxOpenApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
        raise _failure("exec", exc) from None
    return response.result


def _inspect(api: SandboxApi, sandbox_id: str) -> dict[str, object]:
    sandbox = _get(api, sandbox_id, "inspect")
    if sandbox is None:
        return {"state": "gone"}
    report: dict[str, object] = {"state": _state(sandbox)}
    for field in _INSPECTED_FIELDS:
        value = getattr(sandbox, field)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            report[field] = value
    return report


def _terminate(api: SandboxApi, sandbox_id: str) -> None:
    try:
        api.delete_sandbox(sandbox_id, _request_timeout=CONTROL_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status != 404:  # already gone: terminated
            raise _failure("terminate", exc) from None
    except (OpenApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
        raise _failure("terminate", exc) from None


def _get(api: SandboxApi, sandbox_id: str, action: str) -> Sandbox | None:
    try:
        return api.get_sandbox(sandbox_id, _request_timeout=CONTROL_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise _failure(action, exc) from None
    except (OpenApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
        raise _failure(action, exc) from None


def _state(sandbox: Sandbox) -> str:
    return str(sandbox.state.value) if sandbox.state is not None else "unknown"


def _failure(action: str, exc: Exception) -> SandboxFailure:
    """A refusal the API answered, or a connection never made, did nothing; anything else
    (a dropped or late answer, a 5xx, an unreadable body) may have acted."""
    if isinstance(exc, ApiException) and exc.status in _REFUSED_STATUSES:
        return SandboxFailure(f"daytona {action}: the API refused ({exc.status})", reached=False)
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return SandboxFailure(f"daytona {action}: the API could not be reached", reached=False)
    return SandboxFailure(f"daytona {action}: the outcome is unknown ({_reason(exc)})", reached=True)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status}"
    return type(exc).__name__
