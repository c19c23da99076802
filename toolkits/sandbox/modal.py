"""Modal sandboxes through the official `modal` SDK (its blocking interface, on worker threads).

`Modal(app=, image=, token_id=, token_secret=)`: parameters `app` (default `brain-tools`) and
`image` (default `python:3.13-slim`), credentials `tokenId` and `tokenSecret`. Each sandbox has a
five-minute maximum lifetime, one CPU and 512 MiB. Each call opens its own client with the
binding's token and closes it. Modal's SDK retries transient gRPC failures inside its stubs and
offers no switch to turn that off; the five-minute lifetime bounds whatever a retry could leave.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import urlsplit

import modal
import modal.config
import modal.exception

from toolkits.sandbox.backend import COMMAND_DEADLINE_SECONDS, OUTPUT_LIMIT_BYTES, ExecResult, SandboxFailure
from toolkits.sandbox.cloud import LIFETIME_SECONDS, RESULT_GRACE_SECONDS, credential_value, setting_value
from toolkits.sandbox.remote_helper import helper_argv, parse_helper_result, result_line_limit

__all__ = ["DEFAULT_APP", "DEFAULT_IMAGE", "ModalBackend", "check_server_url"]

DEFAULT_APP = "brain-tools"  # spec
DEFAULT_IMAGE = "python:3.13-slim"  # spec: it carries the helper's python3
SANDBOX_CPU = 1.0  # spec: one CPU
SANDBOX_MEMORY_MIB = 512  # spec
# The API answered and said no (bad token, no such sandbox, a bad request): nothing happened.
_REFUSALS = (
    modal.exception.AuthError,
    modal.exception.PermissionDeniedError,
    modal.exception.NotFoundError,
    modal.exception.InvalidError,
    modal.exception.ResourceExhaustedError,
)


def check_server_url(server_url: str) -> None:
    """Modal's SDK takes its server from the process (`MODAL_SERVER_URL`, ~/.modal.toml): every
    binding's token goes there. ValueError (one line) unless it is Modal's own or a loopback
    address (a test's server on this machine)."""
    if server_url == modal.config.DEFAULT_SERVER_URL:
        return
    for url in server_url.split(","):
        host = urlsplit(url.strip()).hostname or ""
        if host != "localhost" and not _is_loopback(host):
            raise ValueError(
                f"MODAL_SERVER_URL points Modal's SDK at {host or url.strip()[:80]!r}: every tenant's Modal token"
                " would go there; unset it (only Modal's own servers or a loopback address are accepted)"
            )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ModalBackend:
    name = "modal"

    def __init__(self) -> None:
        check_server_url(str(modal.config.config.get("server_url")))

    async def create(self, settings: Mapping[str, str], credential: Mapping[str, str]) -> str:
        app = setting_value(settings, "app", DEFAULT_APP, provider=self.name)
        image = setting_value(settings, "image", DEFAULT_IMAGE, provider=self.name)
        token = self._token(credential)
        return await asyncio.to_thread(_create, token, app, image)

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
        argv = helper_argv(command, deadline_seconds=deadline_seconds, output_limit=output_limit)
        token = self._token(credential)
        bound = result_line_limit(output_limit)
        answer = await asyncio.to_thread(_exec, token, sandbox_id, argv, deadline_seconds, bound)
        return parse_helper_result(answer, output_limit=output_limit)

    async def inspect(
        self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> dict[str, object]:
        return await asyncio.to_thread(_inspect, self._token(credential), sandbox_id)

    async def terminate(self, sandbox_id: str, *, settings: Mapping[str, str], credential: Mapping[str, str]) -> None:
        await asyncio.to_thread(_terminate, self._token(credential), sandbox_id)

    def _token(self, credential: Mapping[str, str]) -> tuple[str, str]:
        return (
            credential_value(credential, "tokenId", provider=self.name),
            credential_value(credential, "tokenSecret", provider=self.name),
        )


@contextmanager
def _client(token: tuple[str, str], action: str) -> Iterator[modal.Client]:
    try:
        client = modal.Client.from_credentials(*token)
    except Exception as exc:  # noqa: BLE001 - the SDK's errors are many types; classified once here
        raise _failure(action, exc) from None
    try:
        yield client
    finally:
        client.close()


def _create(token: tuple[str, str], app_name: str, image_name: str) -> str:
    with _client(token, "create") as client:
        try:
            app = modal.App.lookup(app_name, create_if_missing=True, client=client)
            sandbox = modal.Sandbox.create(
                app=app,
                image=modal.Image.from_registry(image_name),
                timeout=LIFETIME_SECONDS,
                cpu=SANDBOX_CPU,
                memory=SANDBOX_MEMORY_MIB,
                client=client,
            )  # no secrets and no environment: spec, no credentials are put into sandboxes
        except Exception as exc:  # noqa: BLE001 - classified once here
            raise _failure("create", exc) from None
        return str(sandbox.object_id)


def _exec(token: tuple[str, str], sandbox_id: str, argv: list[str], deadline_seconds: float, bound: int) -> str:
    with _client(token, "exec") as client:
        try:
            sandbox = modal.Sandbox.from_id(sandbox_id, client=client)
            ended = sandbox.poll()
        except Exception as exc:  # noqa: BLE001 - classified once here
            raise _failure("exec", exc) from None
        if ended is not None:
            raise SandboxFailure("modal exec: the sandbox has ended", reached=False)
        received: list[str] = []
        size = 0
        try:
            process = sandbox.exec(*argv, timeout=int(deadline_seconds + RESULT_GRACE_SECONDS))
            for chunk in process.stdout:
                size += len(chunk)
                if size > bound:  # the helper's one line is never this long
                    break
                received.append(chunk)
            process.wait()
        except Exception as exc:  # noqa: BLE001 - the command was sent: its outcome is unknown
            raise SandboxFailure(f"modal exec: the outcome is unknown ({type(exc).__name__})", reached=True) from None
        if size > bound:
            raise SandboxFailure("modal exec: the command helper answered more than any result", reached=True)
        return "".join(received)


def _inspect(token: tuple[str, str], sandbox_id: str) -> dict[str, object]:
    with _client(token, "inspect") as client:
        try:
            ended = modal.Sandbox.from_id(sandbox_id, client=client).poll()
        except modal.exception.NotFoundError:
            return {"state": "gone"}
        except Exception as exc:  # noqa: BLE001 - classified once here
            raise _failure("inspect", exc) from None
        if ended is None:
            return {"state": "running"}
        return {"state": "ended", "exit_code": ended}


def _terminate(token: tuple[str, str], sandbox_id: str) -> None:
    with _client(token, "terminate") as client:
        try:
            modal.Sandbox.from_id(sandbox_id, client=client).terminate()
        except modal.exception.NotFoundError:
            return  # already gone: terminated
        except Exception as exc:  # noqa: BLE001 - classified once here
            raise _failure("terminate", exc) from None


def _failure(action: str, exc: Exception) -> SandboxFailure:
    if isinstance(exc, _REFUSALS):
        return SandboxFailure(f"modal {action}: refused ({type(exc).__name__})", reached=False)
    return SandboxFailure(f"modal {action}: the outcome is unknown ({type(exc).__name__})", reached=True)
