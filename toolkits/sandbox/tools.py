"""The sandbox tools every backend shares: `create`, `exec`, `inspect`, `terminate` behind signed
handles, one call at a time per slot of a bounded pool, each sent once (no retries), every
failure a result: refused (nothing happened) or, when the provider may have acted, an unknown
outcome. Serves Brain's installed provider and the standalone service alike.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .backend import COMMAND_DEADLINE_SECONDS, OUTPUT_LIMIT_BYTES, ExecResult, SandboxBackend, SandboxFailure
from .handles import MAX_HANDLE_CHARS, Handle, HandleRefused, HandleSigner

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_CONCURRENT_OPERATIONS",
    "MAX_LIVE_PER_TENANT",
    "OPERATIONS",
    "Answer",
    "BackendConfig",
    "SandboxTools",
    "Scope",
    "descriptors",
]

OPERATIONS = ("create", "exec", "inspect", "terminate")
MAX_CONCURRENT_OPERATIONS = 16  # spec (tools/sandboxes): at most 16 operations at once; more are refused
MAX_LIVE_PER_TENANT = 4  # sandboxes one tenant holds at once: one tenant cannot take every slot
SANDBOX_LIFETIME_SECONDS = 300.0  # spec: every provider's sandbox ends within five minutes
MAX_COMMAND_CHARS = 16384  # a shell command line, not a program: programs are files in /work

BackendConfig = tuple[Mapping[str, str], Mapping[str, str]]  # (settings, credential) of one backend


@dataclass(frozen=True, slots=True)
class Scope:
    """The trusted identity of a call (Brain's envelope), never the model's arguments."""

    tenant: str
    session: str


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    structured: dict[str, object] | None = None
    is_error: bool = False
    unknown_outcome: bool = False

    def as_wire(self) -> dict[str, object]:
        wire: dict[str, object] = {"content": [{"type": "text", "text": self.text}]}
        if self.structured is not None:
            wire["structured_content"] = self.structured
        if self.is_error:
            wire["is_error"] = True
        if self.unknown_outcome:
            wire["unknown_outcome"] = True
        return wire


def _refused(message: str) -> Answer:
    return Answer(message, is_error=True)


def _iso(moment: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


HANDLE = {"type": "string", "minLength": 1, "maxLength": MAX_HANDLE_CHARS, "description": "from sandbox_create"}


def descriptors(*, providers: Sequence[str] = ()) -> dict[str, dict[str, object]]:
    """Each operation's description and input schema. With `providers` (the standalone service
    serving several backends), create takes the one to use."""
    create: dict[str, object] = {"type": "object", "properties": {}, "additionalProperties": False}
    if providers:
        create["properties"] = {"provider": {"type": "string", "enum": list(providers)}}
        create["required"] = ["provider"]
    handle_only = {
        "type": "object",
        "properties": {"handle": HANDLE},
        "required": ["handle"],
        "additionalProperties": False,
    }
    return {
        "create": {
            "description": "Create an isolated sandbox to run shell commands in (no network; files persist in "
            "/work between commands; it lives 5 minutes). Returns a handle for the other sandbox tools.",
            "input_schema": create,
        },
        "exec": {
            "description": "Run a shell command in the sandbox's /work with a 30 s deadline; returns its exit "
            "status and at most 64 KiB of stdout and stderr, with truncated and timed_out flags.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "handle": HANDLE,
                    "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS},
                },
                "required": ["handle", "command"],
                "additionalProperties": False,
            },
        },
        "inspect": {"description": "Report a sandbox's state.", "input_schema": handle_only},
        "terminate": {"description": "Stop a sandbox and delete its files.", "input_schema": handle_only},
    }


class SandboxTools:
    def __init__(
        self,
        backends: Mapping[str, SandboxBackend],
        signer: HandleSigner,
        *,
        max_concurrent: int = MAX_CONCURRENT_OPERATIONS,
        max_live_per_tenant: int = MAX_LIVE_PER_TENANT,
        deadline_seconds: float = COMMAND_DEADLINE_SECONDS,
    ) -> None:
        self.backends = dict(backends)
        self.signer = signer
        self.max_concurrent = max_concurrent
        self.max_live_per_tenant = max_live_per_tenant
        self.deadline_seconds = deadline_seconds
        self.in_flight = 0
        # sandboxes created here and not terminated, per tenant, until their lifetime ends: the
        # tenant's cap. In memory: after a restart a tenant's earlier sandboxes expire unseen.
        self._live: dict[str, dict[tuple[str, str], float]] = {}

    async def aclose(self) -> None:
        """Release every backend (shutdown): a backend with processes or connections has `aclose`."""
        for backend in self.backends.values():
            close = getattr(backend, "aclose", None)  # optional: not part of the backend contract
            if close is not None:
                await close()

    async def run(
        self, operation: str, scope: Scope, arguments: Mapping[str, object], configs: Mapping[str, BackendConfig]
    ) -> Answer:
        """One call. `configs` are the backends this tool may use with their settings and
        credential (one for a binding, the configured ones for the service)."""
        if self.in_flight >= self.max_concurrent:
            return _refused(f"busy: {self.max_concurrent} sandbox operations are running; nothing was done, try again")
        self.in_flight += 1
        try:
            if operation == "create":
                return await self._create(scope, arguments, configs)
            if operation not in OPERATIONS:
                return _refused(f"unknown sandbox operation {operation[:64]!r}")
            try:
                handle = self.signer.open(
                    arguments.get("handle"), tenant=scope.tenant, session=scope.session, for_exec=operation == "exec"
                )
            except HandleRefused as exc:
                return _refused(str(exc))
            if handle.backend not in configs or handle.backend not in self.backends:
                return _refused(f"this handle names a {handle.backend!r} sandbox, which this tool does not serve")
            settings, credential = configs[handle.backend]
            backend = self.backends[handle.backend]
            if operation == "exec":
                return await self._exec(backend, handle, arguments.get("command"), settings, credential)
            if operation == "inspect":
                return await self._inspect(backend, handle, settings, credential)
            return await self._terminate(backend, handle, settings, credential)
        finally:
            self.in_flight -= 1

    def _live_of(self, tenant: str) -> dict[tuple[str, str], float]:
        now = time.monotonic()
        live = {key: until for key, until in self._live.get(tenant, {}).items() if until > now}
        if live:
            self._live[tenant] = live
        else:
            self._live.pop(tenant, None)
        return live

    async def _create(
        self, scope: Scope, arguments: Mapping[str, object], configs: Mapping[str, BackendConfig]
    ) -> Answer:
        name = arguments.get("provider", next(iter(configs), None) if len(configs) == 1 else None)
        if not isinstance(name, str) or name not in configs or name not in self.backends:
            return _refused(f"provider must be one of: {', '.join(sorted(configs))}")
        if len(self._live_of(scope.tenant)) >= self.max_live_per_tenant:
            return _refused(f"this tenant holds {self.max_live_per_tenant} live sandboxes already; terminate one first")
        settings, credential = configs[name]
        try:
            sandbox_id = await self.backends[name].create(settings, credential)
        except SandboxFailure as exc:
            return _failed("create", exc)
        except Exception as exc:  # a provider SDK's own failure: the sandbox may exist, say so
            return Answer(
                f"sandbox create failed: {type(exc).__name__}; a sandbox may exist", is_error=True, unknown_outcome=True
            )
        text, handle = self.signer.issue(
            backend=name, sandbox_id=sandbox_id, tenant=scope.tenant, session=scope.session
        )
        self._live.setdefault(scope.tenant, {})[(name, sandbox_id)] = time.monotonic() + SANDBOX_LIFETIME_SECONDS
        until = _iso(handle.exec_expires_at())
        return Answer(
            f"Created a {name} sandbox. Handle: {text} (exec allowed until {until}).",
            {"handle": text, "provider": name, "exec_expires_at": until},
        )

    async def _exec(
        self,
        backend: SandboxBackend,
        handle: Handle,
        command: object,
        settings: Mapping[str, str],
        credential: Mapping[str, str],
    ) -> Answer:
        if not isinstance(command, str) or not command or len(command) > MAX_COMMAND_CHARS:
            return _refused(f"command must be a string of 1-{MAX_COMMAND_CHARS} characters")
        try:
            result = await backend.exec(
                handle.sandbox_id,
                command,
                settings=settings,
                credential=credential,
                deadline_seconds=self.deadline_seconds,
                output_limit=OUTPUT_LIMIT_BYTES,
            )
        except SandboxFailure as exc:
            return _failed("exec", exc)
        except Exception as exc:  # a provider SDK's own failure after the command may have run
            return Answer(
                f"sandbox exec failed: {type(exc).__name__}; the command may have run",
                is_error=True,
                unknown_outcome=True,
            )
        return Answer(_exec_text(result), _exec_structured(result))

    async def _inspect(
        self, backend: SandboxBackend, handle: Handle, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> Answer:
        try:
            state = await backend.inspect(handle.sandbox_id, settings=settings, credential=credential)
        except SandboxFailure as exc:
            return Answer(f"sandbox inspect failed: {exc}", is_error=True)
        except Exception as exc:  # reading changes nothing: an error, never an unknown outcome
            return Answer(f"sandbox inspect failed: {type(exc).__name__}", is_error=True)
        exec_open = self.signer.now() < handle.exec_expires_at()
        structured = {
            **state,
            "provider": handle.backend,
            "exec_allowed": exec_open,
            "exec_expires_at": _iso(handle.exec_expires_at()),
        }
        return Answer(f"Sandbox state: {state.get('state', 'unknown')}.", structured)

    async def _terminate(
        self, backend: SandboxBackend, handle: Handle, settings: Mapping[str, str], credential: Mapping[str, str]
    ) -> Answer:
        try:
            await backend.terminate(handle.sandbox_id, settings=settings, credential=credential)
        except SandboxFailure as exc:
            return _failed("terminate", exc)
        except Exception as exc:  # the provider may have stopped it before failing
            return Answer(f"sandbox terminate failed: {type(exc).__name__}", is_error=True, unknown_outcome=True)
        self._live.get(handle.tenant, {}).pop((handle.backend, handle.sandbox_id), None)
        return Answer("Sandbox terminated.", {"terminated": True})


def _failed(operation: str, exc: SandboxFailure) -> Answer:
    if exc.reached:
        return Answer(f"sandbox {operation}: outcome unknown: {exc}", is_error=True, unknown_outcome=True)
    return Answer(f"sandbox {operation} failed: {exc}", is_error=True)


def _exec_structured(result: ExecResult) -> dict[str, object]:
    return {
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "truncated": result.truncated,
        "timed_out": result.timed_out,
    }


def _exec_text(result: ExecResult) -> str:
    if result.timed_out:
        head = f"timed out after {COMMAND_DEADLINE_SECONDS:.0f} s; the command and its processes were killed"
    elif result.exit_code is None:
        head = "killed"
    else:
        head = f"exit status {result.exit_code}"
    if result.truncated:
        head += f"; output truncated at {OUTPUT_LIMIT_BYTES // 1024} KiB"
    return f"{head}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
