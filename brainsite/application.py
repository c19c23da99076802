"""The application object: built once per process, it owns the engine, the tool registry, the
token cache and telemetry, and hands narrow collaborators down. No module-level state.

Daphne has no ASGI lifespan, so the Launcher builds and starts the application on the first
scope; `runbrain` configures it and registers `shutdown()` with Twisted. Outside `runbrain` the
host config comes from $BRAIN_CONFIG.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from channels.db import database_sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest

from brainsite.handoff import release_sessions
from fleet_app import db as fleet_db
from fleet_app.journal import InputJournal
from fleet_app.leases import LeaseManager
from foundation.app_object import SCOPE_KEY, app_object_of
from foundation.hostconfig import FleetSecret, HostConfig, Secrets, load_host_config, resolve_secrets
from foundation.inspection import inspection_key
from foundation.logs import logger
from foundation.telemetry import Telemetry
from persistence_app.app_object import PersistenceAppObject
from persistence_app.archiving import ArchiveService
from sessions_app import db as sessions_db
from sessions_app.app_object import SessionsAppObject
from sessions_app.auth import TokenCache
from sessions_app.runtime.engine import Engine
from sessions_app.runtime.ownership import Ownership
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
from tools_app.relay import CHANNEL_REDIS_ENV, ExecutorRelay
from tools_app.tool_path import assemble_tool_path
from tools_app.vault import CredentialVault

from .celery_wiring import celery_dispatch, celery_send, log_upload_mode, worker_watch

# A fleet instance whose name a live process holds, or whose database is out of reach, tries again.
JOIN_RETRY_SECONDS = 1.0

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
        )
        local_executors = LocalExecutors.of(config.limits)
        # a fleet (`cluster` block): this instance's leases and the shared input journal
        self.leases: LeaseManager | None = None
        self.relay: ExecutorRelay | None = None  # runtime tools across the fleet (BRAIN_CHANNEL_REDIS)
        self.journal: InputJournal | None = None
        ownership = None
        if config.cluster is not None:
            self.leases = LeaseManager(
                instance=config.cluster.instance,
                url=config.cluster.url,
                lease_seconds=config.cluster.lease_seconds,
                telemetry=self.telemetry,
            )
            self.journal = InputJournal()
            self.relay = _executor_relay(local_executors, self.leases, secrets.fleet_secret)
        # runtime executors: those held here and, in a fleet, the relay to those held elsewhere
        self.executors = ExecutorHub(local_executors, remote=self.relay)
        self.workers = worker_watch(self.telemetry)  # with a broker: whether a worker answers on it
        # built before the engine, which gets it as its archive hooks; in a fleet `latest` is
        # written fenced with the lease epoch held (carried with the job to a sync worker)
        self.archive: ArchiveService | None = None
        if config.persistence is not None:
            self.archive = ArchiveService(
                config.persistence,
                Path(config.data_dir).resolve(),
                os.environ,
                session_bytes=config.limits.session_bytes,
                dispatch=celery_dispatch(self.leases),
                telemetry=self.telemetry,
                lease_epoch=self.leases.held_epoch if self.leases is not None else None,
                on_lease_lost=self._lease_lost if self.leases is not None else None,
                on_published=self.journal.prune_published if self.journal is not None else None,
                dispatch_problem=self.workers.problem if self.workers is not None else None,
            )
        if self.leases is not None:
            storage = SessionStorage(Path(config.data_dir).resolve())
            ownership = Ownership(self.leases, storage, self.archive, self.journal)
        self._fleet_task: asyncio.Task[None] | None = None
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
            ownership=ownership,
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
        if self.leases is not None:
            self._fleet_task = asyncio.get_running_loop().create_task(self._in_fleet(self.leases), name="brain-fleet")
        await self.engine.start()
        await self.knowledge_jobs.start()
        if self.relay is not None:
            self.relay.start()

    async def _in_fleet(self, leases: LeaseManager) -> None:
        """Join (again every JOIN_RETRY_SECONDS while the name is taken by a live process or the
        database is out of reach), then renew the leases until stopped; sessions another
        instance took are unloaded without writing."""
        await leases.join_retrying(retry_seconds=JOIN_RETRY_SECONDS)
        logger.info("joined the fleet", extra={"instance": leases.instance, "url": leases.url})

        def on_lost(session_ids: frozenset[str]) -> None:
            logger.warning("sessions taken by another instance", extra={"sessions": sorted(session_ids)})
            task = asyncio.get_running_loop().create_task(self.engine.drop_lost(session_ids), name="brain-fleet-lost")
            self.engine.track(task)

        await leases.run_renewals(on_lost)

    def _lease_lost(self, session_id: str) -> None:
        """The archive refused a publish for a newer owner: stop writing the session and unload it."""
        assert self.leases is not None
        logger.warning("session publish fenced; dropping it", extra={"session_id": session_id})
        self.leases.forget(session_id)
        task = asyncio.get_running_loop().create_task(
            self.engine.drop_lost(frozenset({session_id})), name="brain-fleet-fenced"
        )
        self.engine.track(task)

    @property
    def ready(self) -> bool:
        """Readiness: not shutting down and, with persistence, the sync backlog under control."""
        if self.leaving or self.engine.draining:
            return False
        if self.leases is not None and not self.leases.joined:
            return False
        return self.archive is None or self.archive.ready

    def begin_leaving(self) -> None:
        """A graceful stop begins while the server still answers: not ready from now on, and the
        sessions handed off in the background (see hand_off)."""
        self.leaving = True
        if self.leases is not None:
            self.leases.draining = True  # at once: nothing more is acquired here
        if self._handoff is None:
            self._handoff = asyncio.get_running_loop().create_task(self._hand_off(), name="brain-hand-off")

    async def _hand_off(self) -> None:
        """Stop new work, interrupt running turns, end streams; in a fleet, acquire nothing more,
        then upload each session and release its lease once the archive holds its whole event
        log (brainsite.handoff), so another instance takes it while this one forwards its
        requests there."""
        if self.leases is not None:
            try:
                await self.leases.set_draining(True)
            except Exception as exc:  # the database: the others then learn it when it leaves
                logger.warning("marking the instance draining failed", extra={"error": str(exc)})
        await self.knowledge_jobs.stop()
        await self.engine.shutdown()
        if self.leases is not None:
            await release_sessions(self.engine, self.archive, self.leases)

    async def stop(self) -> None:
        self.begin_leaving()
        assert self._handoff is not None
        await self._handoff
        if self.relay is not None:
            await self.relay.stop()
        if self.leases is not None:
            await self._leave_fleet(self.leases)
        if self.archive is not None:
            await self.archive.close()  # unsynced sessions are found again by the next start's scan
        if self.workers is not None:
            await self.workers.close()
        await self.tool_path.aclose()
        await self.providers.aclose()
        await self.telemetry.ashutdown()  # after the engine: the last turns' spans and metrics go out

    async def _leave_fleet(self, leases: LeaseManager) -> None:
        """Stop renewing, release what is left and leave, so routing skips the instance at once."""
        if self._fleet_task is not None:
            self._fleet_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fleet_task
        await leases.leave_quietly()


def _executor_relay(local: LocalExecutors, leases: LeaseManager, secret: FleetSecret | None) -> ExecutorRelay | None:
    """Runtime tools across the fleet over the Redis that BRAIN_CHANNEL_REDIS names, sealed
    under the fleet secret; without it an executor serves only sessions its own instance owns."""
    url = os.environ.get(CHANNEL_REDIS_ENV, "").strip()
    if not url:
        logger.warning(
            "no BRAIN_CHANNEL_REDIS: runtime tools serve only the sessions their executor's instance owns",
            extra={"instance": leases.instance},
        )
        return None

    if secret is None:  # never with a `cluster` block: check_cluster requires BRAIN_FLEET_SECRET
        raise RuntimeError("the executor relay needs the fleet secret")

    async def member(instance: str, incarnation: str) -> str | None:
        return await fleet_db.amember_url(instance, incarnation=incarnation, using=leases.database)

    return ExecutorRelay(
        local,
        redis_url=url,
        instance=leases.instance,
        incarnation=leases.incarnation,
        secret=secret.key,
        member=member,
    )


# Each app reads the application object through a view of its own; these assignments make mypy
# check that BrainApp still satisfies every one of them.
def _as_sessions_app_object(app: BrainApp) -> SessionsAppObject:
    return app


def _as_tools_app_object(app: BrainApp) -> ToolsAppObject:
    return app


def _as_persistence_app_object(app: BrainApp) -> PersistenceAppObject:
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
