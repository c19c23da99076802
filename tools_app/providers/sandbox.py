"""`sandbox`: the sandbox tools (toolkits/sandbox) as an installed provider, one backend per
installation. `operations`: create, exec, inspect, terminate; the host config's tools name them
(`sandbox_create` … with `transport: "provider"`), or a session binds the provider under the
name the published client lowers to (`Modal(...)` binds provider `modal`).

    "sandbox": {"class": "tools_app.providers.sandbox.SandboxProvider", "options": {"backend": "local"}}
    "modal":   {"class": "tools_app.providers.sandbox.SandboxProvider"}   # backend: the provider's name

A backend plugs in by name in toolkits/sandbox/registry.py (`BACKENDS`); its binding parameters
and credential keys are the ones listed there. Handles are signed with the key in the
environment variable `signing_key_env` (default SANDBOX_SIGNING_KEY, at least 32 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from runners.protocol import ToolDescriptor
from toolkits.sandbox.backend import SandboxBackend
from toolkits.sandbox.handles import MIN_KEY_BYTES, HandleSigner
from toolkits.sandbox.registry import BACKENDS, build_backend
from toolkits.sandbox.tools import MAX_LIVE_PER_TENANT, OPERATIONS, SandboxTools, Scope, descriptors

from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, parse_options, select_operations

__all__ = ["SandboxOptions", "SandboxProvider"]

MAX_SETTING_CHARS = 512  # an app name, an image reference, an API URL


class SandboxOptions(CommonOptions):
    backend: str | None = None  # default: the provider's name
    signing_key_env: str = "SANDBOX_SIGNING_KEY"
    max_live_per_tenant: int = Field(default=MAX_LIVE_PER_TENANT, ge=1, le=64)


def _strings(value: object, allowed: Mapping[str, str], what: str, backend: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what}: must be an object")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"{what}: {backend} sandboxes take no {unknown[0]!r} (they take: {takes})")
    if not all(isinstance(item, str) and 0 < len(item) <= MAX_SETTING_CHARS for item in value.values()):
        raise ValueError(f"{what}: values must be strings of 1-{MAX_SETTING_CHARS} characters")
    return dict(value)


class SandboxProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_options(SandboxOptions, options)
        if self.settings.parameters_schema is not None:
            raise ValueError("parameters_schema: a sandbox backend defines its own parameters")
        self.backend_name = self.settings.backend or name
        if self.backend_name not in BACKENDS:
            raise ValueError(
                f"backend: unknown sandbox backend {self.backend_name!r} (known: {', '.join(sorted(BACKENDS))})"
            )
        self.entry = BACKENDS[self.backend_name]
        key = self.environment.secret(self.settings.signing_key_env).encode()
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(
                f"signing_key_env: {self.settings.signing_key_env} must hold at least {MIN_KEY_BYTES} bytes"
            )
        self.tools = SandboxTools(
            {self.backend_name: self.build_sandbox_backend()},
            HandleSigner(key),
            max_live_per_tenant=self.settings.max_live_per_tenant,
        )
        served = descriptors()
        self.operations: dict[str, ToolDescriptor] = {
            operation: {"name": operation, **served[operation]}  # type: ignore[typeddict-item]  # description and input_schema
            for operation in OPERATIONS
        }

    def build_sandbox_backend(self) -> SandboxBackend:
        """The backend, as its provider's own SDK defaults reach it; the seam a test's subclass
        overrides to point a cloud backend at a loopback fake (tests/support/sandbox_provider.py)."""
        return build_backend(self.backend_name, data_dir=self.environment.data_dir / "providers" / self.name)

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        _strings(parameters, self.entry.settings_env, "parameters", self.backend_name)
        return select_operations(self.operations, operations)

    async def handle(self, call: ProviderCall) -> object:
        settings = _strings(call.parameters, self.entry.settings_env, "parameters", self.backend_name)
        try:
            credential = _strings(call.credential, self.entry.credential_env, "credential", self.backend_name)
        except ValueError as exc:
            raise ProviderError(str(exc), reached=False) from None
        configs = {self.backend_name: (settings, credential)}
        answer = await self.tools.run(call.operation, Scope(call.tenant, call.session_id), call.arguments, configs)
        if answer.unknown_outcome:
            raise ProviderError(answer.text, reached=True)
        return answer.as_wire()

    async def aclose(self) -> None:
        await self.tools.aclose()
