"""The application object: built once per process, it owns the engine, the tool registry, the
token cache and telemetry, and hands narrow collaborators down. No module-level state.

Daphne has no ASGI lifespan, so the Launcher builds and starts the application on the first
scope; `runbrain` configures it and registers `shutdown()` with Twisted. Outside `runbrain` the
host config comes from $BRAIN_CONFIG.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from channels.db import database_sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest

from brainsite.handoff import release_sessions
from fleet_app.app_object import FleetAppObject
from fleet_app.fleet import Fleet, SoloFleet, build_fleet
from foundation.app_object import SCOPE_KEY, app_object_of
from foundation.emit_tokens import emit_key
from foundation.hostconfig import HostConfig, Secrets, load_host_config, resolve_secrets
from foundation.inspection import inspection_key
from foundation.logs import logger
from foundation.telemetry import Telemetry
from persistence_app.app_object import PersistenceAppObject
from persistence_app.archiving import ArchiveService
from sessions_app import db as sessions_db
from sessions_app.app_object import SessionsAppObject
from sessions_app.auth import TokenCache
from sessions_app.runtime.engine import Engine
from sessions_app.storage import SessionStorage
from sessions_app.subagents import EngineChildSessions
from tools_app import db as tools_db
from tools_app.app_object import ToolsAppObject
from tools_app.credentials import BindingCredentials
from tools_app.executors import ExecutorHub, LocalExecutors
from tools_app.invocation.approvals import ApprovalPolicy
from tools_app.invocation.config_tools import InspectionGrants
from tools_app.provider_tools import resolve_provider_tools
from tools_app.providers.base import ProviderEnvironment
from tools_app.providers.knowledge.jobs import KNOWLEDGE_TASK, JobBudgets, KnowledgeJobs
from tools_app.providers.registry import ProviderRegistry, load_providers
from tools_app.providers.subagents import SubagentProvider
from tools_app.registry import ToolRegistry
from tools_app.relay import ExecutorRelay
from tools_app.tool_path import assemble_tool_path
from tools_app.vault import CredentialVault

from .celery_wiring import celery_dispatch, celery_send, log_upload_mode, worker_watch

__all__ = ["SCOPE_KEY", "BrainApp", "Launcher", "brain_of", "install_tool_providers", "request_brain"]


def install_tool_providers(config: HostConfig, environ: Mapping[str, str] | None = None) -> ProviderRegistry:
    """The providers the `BRAIN_TOOL_PROVIDERS` setting installs, built once (their secrets read
    from the environment); raises ProviderConfigError for one that cannot be installed."""
    from django.conf import settings

    environment = ProviderEnvironment(
        data_dir=Path(config.data_dir).resolve(), environ=dict(os.environ if environ is None else environ)
    )
    return load_providers(getattr(settings, "BRAIN_TOOL_PROVIDERS", None), environment=environment)


class BrainApp:
    """`providers` are the installed tool providers (runbrain installs them before it listens,
    so a bad one refuses startup); without them, the setting's are installed here."""

    def __init__(
        self,
        config: HostConfig,
        secrets: Secrets,
        *,
        telemetry: Telemetry | None = None,
        providers: ProviderRegistry | None = None,
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.telemetry = telemetry if telemetry is not None else Telemetry.from_environment()
        self.providers = providers if providers is not None else install_tool_providers(config)
        fleet_secret = secrets.fleet_secret
        self.tokens = TokenCache(inspection_key=inspection_key(fleet_secret.key) if fleet_secret is not None else None)
        # the tool path: the catalog of config tools, how their calls are sent, the approval rules
        self.registry = ToolRegistry(
            config.tools, tool_tokens=secrets.tool_tokens, admin_loader=tools_db.aload_admin_bindings
        )
        self.tool_path = assemble_tool_path(
            self.registry,
            providers=self.providers,
            inspections=InspectionGrants(grant=self.tokens.grant_inspection, revoke=self.tokens.revoke_inspection),
            approvals=ApprovalPolicy(config.approvals, admin_loader=tools_db.aload_approval_rules),
            public_url=config.public_url,
            environments=config.environments,
            emit_key=emit_key(fleet_secret.key) if fleet_secret is not None else None,
        )
        local_executors = LocalExecutors.of(config.limits)
        # a fleet (`cluster` block): leases, input journal, routing, relay; else the solo stand-in
        self.fleet: Fleet | SoloFleet = build_fleet(
            config.cluster, secrets.fleet_secret, telemetry=self.telemetry, drop=self._drop_lost
        )
        self.relay = _executor_relay(local_executors, self.fleet)  # runtime tools across the fleet
        # runtime executors: those held here and, in a fleet, the relay to those held elsewhere
        self.executors = ExecutorHub(local_executors, remote=self.relay)
        self.workers = worker_watch(self.telemetry)  # with a broker: whether a worker answers on it
        # built before the engine, which gets it as its archive hooks; in a fleet `latest` is
        # written fenced with the lease epoch held (carried with the job to a sync worker)
        self.archive: ArchiveService | None = None
        if config.persistence is not None:
            fencing = self.fleet.archive_fencing()
            self.archive = ArchiveService(
                config.persistence,
                Path(config.data_dir).resolve(),
                os.environ,
                session_bytes=config.limits.session_bytes,
                dispatch=celery_dispatch(self.fleet.job_lease),
                telemetry=self.telemetry,
                lease_epoch=fencing.lease_epoch,
                on_lease_lost=fencing.on_lease_lost,
                on_published=fencing.on_published,
                dispatch_problem=self.workers.problem if self.workers is not None else None,
            )
        self.leaving = False  # a graceful stop began: not ready, sessions being handed off
        self._handoff: asyncio.Task[None] | None = None
        self.engine = Engine(
            config,
            secrets,
            registry=self.registry,
            tool_path=self.tool_path,
            telemetry=self.telemetry,
            executors=self.executors,
            providers=self.providers,
            binding_credentials=BindingCredentials(
                CredentialVault.configured(config.credential_keys, secrets), required=self._credential_bindings
            ),
            archive=self.archive,
            ownership=self.fleet.ownership(SessionStorage(Path(config.data_dir).resolve()), self.archive),
        )
        children = EngineChildSessions(self.engine)
        for provider in self.providers.values():
            if isinstance(provider, SubagentProvider):
                provider.use_child_sessions(children)
        # document ingestion: Celery workers when a broker is configured, else this server's runner
        self.knowledge_jobs = KnowledgeJobs(
            JobBudgets.from_environment(os.environ), broker_send=celery_send(KNOWLEDGE_TASK)
        )

    async def saved_session_config(self, tenant: str, session_id: str) -> Mapping[str, Any] | None:
        record = await sessions_db.aget_session(tenant, session_id)
        return record.config if record is not None else None

    def _credential_bindings(self, session_id: str) -> list[str]:
        """The aliases a loaded session was created with credentials for: a call of one whose
        record is missing stops instead of running without it."""
        record = self.engine.loaded_record(session_id)
        return record.credential_bindings if record is not None else []

    async def start(self) -> None:
        await database_sync_to_async(sessions_db.mirror_config_tokens)(self.config, self.secrets.tokens)
        await database_sync_to_async(tools_db.mirror_config_bindings)(self.config.tools)
        if self.workers is not None:
            await self.workers.start()
        if self.archive is not None:
            log_upload_mode(self.config, self.workers)
            await self.archive.start()  # before the engine: loading settles sessions
        self.fleet.start()  # joins in the background; sessions load once it has joined
        await self.engine.start()
        await self.knowledge_jobs.start()

    def _drop_lost(self, session_ids: frozenset[str]) -> None:
        """Sessions this instance may no longer write (taken by another, or a publish fenced): unloaded."""
        task = asyncio.get_running_loop().create_task(self.engine.drop_lost(session_ids), name="brain-fleet-lost")
        self.engine.track(task)

    @property
    def ready(self) -> bool:
        """Readiness: not shutting down and, with persistence, the sync backlog under control."""
        if self.leaving or self.engine.draining:
            return False
        if not self.fleet.ready:
            return False
        return self.archive is None or self.archive.ready

    def begin_leaving(self) -> None:
        """A graceful stop begins while the server still answers: not ready from now on, and the
        sessions handed off in the background (see hand_off)."""
        self.leaving = True
        self.fleet.begin_leaving()  # at once: nothing more is acquired here
        if self._handoff is None:
            self._handoff = asyncio.get_running_loop().create_task(self._hand_off(), name="brain-hand-off")

    async def _hand_off(self) -> None:
        """Stop new work, interrupt running turns, end streams; in a fleet, acquire nothing more,
        then upload each session and release its lease once the archive holds its whole event
        log (brainsite.handoff), so another instance takes it while this one forwards its
        requests there."""
        await self.fleet.mark_draining()
        await self.knowledge_jobs.stop()
        await self.engine.shutdown()
        await self.fleet.hand_off(functools.partial(release_sessions, self.engine, self.archive))

    async def stop(self) -> None:
        self.begin_leaving()
        assert self._handoff is not None
        await self._handoff
        await self.fleet.stop()  # relay, renewals, leases, the router's connections
        if self.archive is not None:
            await self.archive.close()  # unsynced sessions are found again by the next start's scan
        if self.workers is not None:
            await self.workers.close()
        await self.tool_path.aclose()
        await self.providers.aclose()
        await self.telemetry.ashutdown()  # after the engine: the last turns' spans and metrics go out


def _executor_relay(local: LocalExecutors, fleet: Fleet | SoloFleet) -> ExecutorRelay | None:
    """Runtime tools across a fleet, when it has a relay's Redis (BRAIN_CHANNEL_REDIS); the
    relay then starts and stops with the fleet."""
    membership = fleet.relay_membership()
    if membership is None:
        return None
    relay = ExecutorRelay(
        local,
        redis_url=membership.redis_url,
        instance=membership.instance,
        incarnation=membership.incarnation,
        secret=membership.secret,
        member=membership.member,
    )
    fleet.adopt_relay(relay)
    return relay


# Each app reads the application object through a view of its own; these assignments make mypy
# check that BrainApp still satisfies every one of them.
def _as_sessions_app_object(app: BrainApp) -> SessionsAppObject:
    return app


def _as_tools_app_object(app: BrainApp) -> ToolsAppObject:
    return app


def _as_persistence_app_object(app: BrainApp) -> PersistenceAppObject:
    return app


def _as_fleet_app_object(app: BrainApp) -> FleetAppObject:
    return app


def brain_of(scope: Mapping[str, Any]) -> BrainApp:
    """The application object the ASGI entry attached to a request's scope."""
    return cast(BrainApp, app_object_of(scope))


def request_brain(request: HttpRequest) -> BrainApp:
    """brain_of() for a view's request (always an ASGIRequest under Brain's ASGI entry)."""
    return brain_of(cast(ASGIRequest, request).scope)


class Launcher:
    """Builds the application once, on the first ASGI scope or when `runbrain` starts listening."""

    def __init__(self) -> None:
        self._config: tuple[HostConfig, Secrets] | None = None
        self._providers: ProviderRegistry | None = None
        self._app: BrainApp | None = None
        self._starting: asyncio.Future[BrainApp] | None = None

    def configure(self, config: HostConfig, secrets: Secrets, *, providers: ProviderRegistry | None = None) -> None:
        self._config = (config, secrets)
        self._providers = providers

    def host_config(self) -> HostConfig:
        return self._configured()[0]

    def _configured(self) -> tuple[HostConfig, Secrets]:
        if self._config is None:
            config = load_host_config(os.environ.get("BRAIN_CONFIG", "brain.json"))
            self._config = (config, resolve_secrets(config))
        return self._config

    async def started(self) -> BrainApp:
        """The running application, starting it on the first call; concurrent callers wait."""
        if self._app is not None:
            return self._app
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_future()
            try:
                config, secrets = self._configured()
                providers = self._providers if self._providers is not None else install_tool_providers(config)
                config = await resolve_provider_tools(config, providers)  # runbrain did it already
                app = BrainApp(config, secrets, providers=providers)
                await app.start()
            except BaseException as exc:
                self._starting.set_exception(exc)
                self._starting.exception()  # retrieved: waiters re-raise it themselves
                self._starting = None
                raise
            self._app = app
            self._starting.set_result(app)
            return app
        return await asyncio.shield(self._starting)

    def begin_drain(self) -> None:
        """SIGTERM: the application stops being ready and hands its sessions off while serving."""
        if self._app is not None:
            self._app.begin_leaving()

    async def shutdown(self) -> None:
        app = self._app
        if app is None:
            return
        logger.info("brain shutting down")
        await app.stop()
        logger.info("brain stopped")
