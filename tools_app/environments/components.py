"""Brain environments: WebAssembly components the host config names, run by toolkits.wasm (a
worker process per call, a deadline, memory and fuel limits, no ambient authority) with only the
grants a session's binding requested within the operator's allow-list.

Every component is checked when the server starts (its exported tool names read); a brain
environment on a server without the runtime refuses to start. Component paths come from the host
config alone, never from a tenant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.hostconfig import ConfigError, EnvironmentConfig

from .kind import ComponentRun
from .worker_slots import NoWorkerFree, WorkerSlots

if TYPE_CHECKING:
    from toolkits.wasm import SpareWorkers

__all__ = ["ComponentCatalog"]


async def _no_events(kind: str, data: object) -> None:
    raise RuntimeError("this call takes no events")


class ComponentCatalog:
    """The brain environments' components, by (environment, tool name)."""

    def __init__(self, environments: Sequence[EnvironmentConfig]) -> None:
        self._environments = {
            environment.name: environment for environment in environments if environment.kind == "brain"
        }
        self._tools: dict[tuple[str, str], Path] = {}
        self._spares: dict[str, SpareWorkers] = {}  # idle workers waiting for each environment's calls
        self._slots = {
            name: WorkerSlots(workers=environment.limits.workers, tenant_workers=environment.limits.tenant_workers)
            for name, environment in self._environments.items()
        }
        if not self._environments:
            return
        try:
            from toolkits import wasm
        except ImportError as exc:  # a configured feature that is not built refuses to start
            raise ConfigError(f"brain environments need the WebAssembly runtime (toolkits.wasm): {exc}") from exc
        self._spares = {
            name: wasm.SpareWorkers(environment.limits.spare_workers, cache_dir=wasm.default_cache_dir())
            for name, environment in self._environments.items()
        }
        problems: list[str] = []
        for environment in self._environments.values():
            for index, path in enumerate(environment.components):
                where = f"environments: {environment.name!r}: components[{index}]"
                try:
                    names = wasm.check_component(Path(path))
                except Exception as exc:  # a bad file, whatever the runtime says about it
                    problems.append(f"{where}: {path!r} is not a usable component: {exc}")
                    continue
                for name in names:
                    if (environment.name, name) in self._tools:
                        problems.append(f"{where}: tool {name!r} is exported by two components")
                    self._tools[(environment.name, name)] = Path(path)
        if problems:
            raise ConfigError.of(problems)

    def exports(self, environment: str) -> frozenset[str]:
        return frozenset(name for env, name in self._tools if env == environment)

    async def run(
        self,
        environment: str,
        *,
        tenant: str,
        tool: str,
        input: object,
        config: object,
        workspace: str,
        grant: str,
        emit: Callable[[str, object], Awaitable[None]] | None,
    ) -> ComponentRun:
        """One call of the component exporting `tool`, with the workspace granted as `grant`
        ("" grants nothing), once a worker slot is free for `tenant` (waiting at most the call's
        deadline); the workspace directory is created on first use."""
        from toolkits import wasm

        settings = self._environments[environment]
        path = self._tools.get((environment, tool))
        if path is None:
            return ComponentRun("error", None, f"no component of {environment!r} exports {tool!r}")
        grants: list[wasm.WorkspaceGrant] = []
        if grant:
            directory = Path(workspace)
            await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
            grants.append(wasm.WorkspaceGrant(path=directory, mode="read" if grant == "read" else "read-write"))
        limits = wasm.ComponentLimits(
            deadline_s=settings.limits.deadline_seconds,
            memory_bytes=settings.limits.memory_bytes,
            fuel=settings.limits.fuel,
        )
        try:
            async with self._slots[environment].held(tenant, wait_s=limits.deadline_s):
                outcome = await wasm.run_component(
                    path,
                    tool=tool,
                    input=input,
                    config=config,
                    limits=limits,
                    grants=grants,
                    emit=emit or _no_events,
                    spares=self._spares[environment],
                )
        except NoWorkerFree as busy:
            return ComponentRun("error", None, f"busy: {busy}")
        return ComponentRun(str(outcome.status), outcome.output, str(outcome.error or ""))
