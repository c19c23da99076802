"""The live check for people with a provider account: create a sandbox, run one command, inspect
it and terminate it (always, in a `finally`), with credentials from the environment. Missing
credentials fail at once, naming the variables; nothing is skipped silently. Running it against a
live account can incur provider charges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toolkits.sandbox.backend import SandboxBackend, SandboxFailure
from toolkits.sandbox.daytona import DaytonaBackend
from toolkits.sandbox.e2b import E2BBackend
from toolkits.sandbox.modal import ModalBackend

__all__ = ["LIVE_PROVIDERS", "LiveCheckFailed", "LiveProvider", "live_check"]

LIVE_COMMAND = "python3 -c 'import sys; print(sys.version_info[0])'; echo brain-live-check"
LIVE_EXPECTED_OUTPUT = "3\nbrain-live-check\n"


@dataclass(frozen=True, slots=True)
class LiveProvider:
    """Environment variables → the binding's credential keys (required) and parameters."""

    credentials: Mapping[str, str]
    settings: Mapping[str, str]


LIVE_PROVIDERS: Mapping[str, LiveProvider] = {
    "modal": LiveProvider(
        credentials={"MODAL_TOKEN_ID": "tokenId", "MODAL_TOKEN_SECRET": "tokenSecret"},
        settings={"MODAL_APP": "app", "MODAL_IMAGE": "image"},
    ),
    "e2b": LiveProvider(credentials={"E2B_API_KEY": "apiKey"}, settings={"E2B_TEMPLATE": "template"}),
    "daytona": LiveProvider(
        credentials={"DAYTONA_API_KEY": "apiKey"},
        settings={"DAYTONA_API_URL": "apiUrl", "DAYTONA_TARGET": "target"},
    ),
}


class LiveCheckFailed(Exception):
    """The live check did not pass; the message says which step and why (never a secret)."""


async def live_check(
    backend_name: str, environ: Mapping[str, str], *, backend: SandboxBackend | None = None
) -> dict[str, object]:
    """Run the check; its report (the sandbox, the command's result, the inspected state).
    `backend` replaces the provider's own (tests point one at a loopback fake)."""
    provider = LIVE_PROVIDERS.get(backend_name)
    if provider is None:
        raise LiveCheckFailed(f"unknown provider {backend_name!r}: choose one of {', '.join(LIVE_PROVIDERS)}")
    missing = [name for name in provider.credentials if not environ.get(name)]
    if missing:
        raise LiveCheckFailed(f"{backend_name} live check: set {', '.join(missing)} (missing credentials)")
    credential = {key: environ[name] for name, key in provider.credentials.items()}
    settings = {key: environ[name] for name, key in provider.settings.items() if environ.get(name)}
    chosen = backend if backend is not None else _backend(backend_name)
    try:
        sandbox_id = await chosen.create(settings, credential)
    except SandboxFailure as exc:
        raise LiveCheckFailed(f"{backend_name} live check: create failed: {exc}") from None
    try:
        result = await chosen.exec(sandbox_id, LIVE_COMMAND, settings=settings, credential=credential)
        state = await chosen.inspect(sandbox_id, settings=settings, credential=credential)
    except SandboxFailure as exc:
        raise LiveCheckFailed(f"{backend_name} live check: {exc}") from None
    finally:
        try:
            await chosen.terminate(sandbox_id, settings=settings, credential=credential)
        except SandboxFailure as exc:
            raise LiveCheckFailed(f"{backend_name} live check: terminate failed, sandbox {sandbox_id}: {exc}") from None
    if result.exit_code != 0 or result.stdout != LIVE_EXPECTED_OUTPUT or result.timed_out or result.truncated:
        raise LiveCheckFailed(f"{backend_name} live check: the command gave {result!r}")
    return {
        "provider": backend_name,
        "sandbox": sandbox_id,
        "exec": {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr},
        "inspect": state,
        "terminated": True,
    }


def _backend(name: str) -> SandboxBackend:
    if name == "modal":
        return ModalBackend()
    if name == "e2b":
        return E2BBackend()
    return DaytonaBackend()
