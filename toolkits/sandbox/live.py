"""The live check for people with a provider account (and for `local`, which needs none): create a
sandbox, run one command, inspect it and terminate it (always, in a `finally`), with the
provider's settings and credentials from the environment variables registry.py names. Missing
credentials fail at once, naming the variables; nothing is skipped silently. Running it against a
live account can incur provider charges. `python -m services.sandbox live PROVIDER` runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from toolkits.sandbox.backend import SandboxBackend, SandboxFailure
from toolkits.sandbox.registry import BACKENDS, build_backend

__all__ = ["LIVE_COMMAND", "LIVE_EXPECTED_OUTPUT", "LiveCheckFailed", "live_check"]

LIVE_COMMAND = "python3 -c 'import sys; print(sys.version_info[0])'; echo brain-live-check"
LIVE_EXPECTED_OUTPUT = "3\nbrain-live-check\n"


class LiveCheckFailed(Exception):
    """The live check did not pass; the message says which step and why (never a secret)."""


async def live_check(
    backend_name: str, environ: Mapping[str, str], *, data_dir: Path, backend: SandboxBackend | None = None
) -> dict[str, object]:
    """Run the check; its report (the sandbox, the command's result, the inspected state).
    `data_dir`: the backend's private directory (`local` keeps its sandboxes there). `backend`
    replaces the one the registry builds (tests point one at a loopback fake)."""
    entry = BACKENDS.get(backend_name)
    if entry is None:
        raise LiveCheckFailed(f"unknown provider {backend_name!r}: choose one of {', '.join(BACKENDS)}")
    missing = [variable for variable in entry.credential_env.values() if not environ.get(variable)]
    if missing:
        raise LiveCheckFailed(f"{backend_name} live check: set {', '.join(missing)} (missing credentials)")
    credential = {key: environ[variable] for key, variable in entry.credential_env.items()}
    settings = {key: environ[variable] for key, variable in entry.settings_env.items() if environ.get(variable)}
    if backend is None:
        try:
            backend = build_backend(backend_name, data_dir=data_dir)
        except ValueError as exc:
            raise LiveCheckFailed(f"{backend_name} live check: {exc}") from None
    try:
        return await _run(backend_name, backend, settings, credential)
    finally:
        close = getattr(backend, "aclose", None)  # optional: not part of the backend contract
        if close is not None:
            await close()


async def _run(
    backend_name: str, backend: SandboxBackend, settings: Mapping[str, str], credential: Mapping[str, str]
) -> dict[str, object]:
    try:
        sandbox_id = await backend.create(settings, credential)
    except SandboxFailure as exc:
        raise LiveCheckFailed(f"{backend_name} live check: create failed: {exc}") from None
    try:
        result = await backend.exec(sandbox_id, LIVE_COMMAND, settings=settings, credential=credential)
        state = await backend.inspect(sandbox_id, settings=settings, credential=credential)
    except SandboxFailure as exc:
        raise LiveCheckFailed(f"{backend_name} live check: {exc}") from None
    finally:
        try:
            await backend.terminate(sandbox_id, settings=settings, credential=credential)
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
