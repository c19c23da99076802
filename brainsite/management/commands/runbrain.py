"""`runbrain --config FILE`: validate the host config, migrate, serve with Daphne."""

from __future__ import annotations

import os
from errno import EADDRINUSE
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from brainsite.management.host_config import (
    PRIVATE_UMASK,
    install_providers,
    load_checked_config,
    migrate_database,
    refuse_unstartable_harnesses,
    refusing_bad_providers,
)

if TYPE_CHECKING:
    from twisted.internet.address import IPv4Address, IPv6Address
    from twisted.python.failure import Failure

SHUTDOWN_SECONDS = 18.0  # spec: exit within about 20 s of SIGTERM/SIGINT, the drain's grace period included
SWITCH_INTERVAL_SECONDS = 0.001
PRIVATE_DIRECTORY_MODE = 0o700  # session ids are names in the data dir: nobody else may list them
# Twisted listens with a queue of 50 by default: a burst of connections (hundreds of clients
# opening streams at once) overflowed it, and the kernel reset them. The kernel caps it at somaxconn.
LISTEN_BACKLOG = 1024


class _ListeningPort(Protocol):
    """The port Daphne reports listening on: a TCP endpoint's."""

    def getHost(self) -> IPv4Address | IPv6Address: ...

    def stopListening(self) -> object: ...


class Command(BaseCommand):
    help = "Serve Brain on the config's listen address."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", default="brain.json")
        parser.add_argument("--skip-migrate", action="store_true", help="do not apply migrations first")

    def handle(self, *args: str, **options: object) -> None:
        config_path = str(options["config"])
        config, secrets = load_checked_config(config_path)
        refuse_unstartable_harnesses(config)  # a harness whose runtime is missing refuses startup
        providers = install_providers(config)  # before listening: a bad one refuses startup
        os.environ["BRAIN_CONFIG"] = config_path
        # Sessions are private: the data dir, logs, checkpoints, native files (the harness children
        # inherit the mask) and the SQLite database are readable by Brain's user only.
        os.umask(PRIVATE_UMASK)
        _make_private(Path(settings.DATA_DIR), Path(config.data_dir))
        if not options["skip_migrate"]:
            migrate_database()
        from brainsite.staticfiles import collect_static_files

        collect_static_files()  # a fresh install has none; the admin never fails for want of them

        import asyncio
        import sys

        # Worker threads (recovery scans, database writes) hand the GIL back to the event loop
        # after 1 ms instead of 5 ms, so a large session loading does not stall other turns.
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)

        from daphne.server import twisted_loop  # installs Twisted's asyncio reactor first
        from twisted.internet import defer, reactor

        from tools_app.provider_tools import resolve_provider_tools
        from tools_app.rpc_limits import MAX_RPC_MESSAGE_BYTES

        with refusing_bad_providers():  # on the loop that will serve: providers may keep connections from bind()
            config = twisted_loop.run_until_complete(resolve_provider_tools(config, providers))

        from brainsite.asgi import BODY_OVERHEAD_BYTES, application, launcher
        from brainsite.bounded_http import BoundedBodyServer, body_deadline_from_environment
        from brainsite.drain import Drain, drain_seconds_from_environment
        from foundation.logs import logger

        try:
            body_deadline_seconds = body_deadline_from_environment(os.environ)
            drain_seconds = drain_seconds_from_environment(os.environ)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc

        launcher.configure(config, secrets, providers=providers)
        # SIGTERM/SIGINT: not ready at once, serving through the grace period, then no new
        # connections and the stop once the requests in flight are answered (brainsite.drain)
        drain = Drain(
            reactor=reactor,
            grace_seconds=drain_seconds,
            budget_seconds=SHUTDOWN_SECONDS,
            begin=launcher.begin_drain,
        )

        def stop_runtime() -> defer.Deferred[None]:
            coroutine = asyncio.wait_for(launcher.shutdown(), drain.remaining())
            deferred: defer.Deferred[None] = defer.Deferred.fromFuture(asyncio.ensure_future(coroutine))
            deferred.addErrback(
                lambda failure: logger.error("shutdown incomplete", extra={"error": str(failure.value)})
            )
            return deferred

        refused: list[str] = []  # why the listen address could not be bound, once Daphne tried

        class BrainServer(BoundedBodyServer):
            def listen_error(self, failure: Failure) -> None:
                # Daphne logs the failure as critical and stops with exit code 0; the command
                # exits non-zero instead, with one line that names the address and the cause
                refused.append(_listen_refusal(failure))
                self.stop()

            def listen_success(self, port: _ListeningPort) -> None:
                super().listen_success(port)
                drain.watch(port, self.http_factory)
                address = port.getHost()
                logger.info("brain listening", extra={"listen": f"{address.host}:{address.port}"})
                # start the runtime now, so restart recovery does not wait for a request
                self.runtime_start = asyncio.ensure_future(launcher.started())

        host = config.listen_host.replace(":", r"\:")
        server = BrainServer(
            application=application,
            endpoints=[f"tcp:port={config.listen_port}:interface={host}:backlog={LISTEN_BACKLOG}"],
            signal_handlers=True,
            http_timeout=None,
            application_close_timeout=5,
            server_name="brain",
            # Daphne's default is 1 MiB; executor replies may be 4 MiB (tools_app.rpc_limits)
            websocket_max_message_size=MAX_RPC_MESSAGE_BYTES,
            websocket_max_frame_size=MAX_RPC_MESSAGE_BYTES,
            body_limit=config.limits.input_bytes + BODY_OVERHEAD_BYTES,
            body_deadline_seconds=body_deadline_seconds,
            receiving_per_address=config.limits.receiving_per_address,
        )
        # the reactor's loop is the current one, so ensure_future schedules on the loop that runs
        asyncio.set_event_loop(twisted_loop)
        reactor.addSystemEventTrigger("before", "shutdown", stop_runtime)  # type: ignore[arg-type]  # stubs mistype the phase
        reactor.callWhenRunning(drain.install)  # after Twisted installed its own handlers
        server.run()
        if refused:
            raise CommandError(f"cannot listen on {config.listen}: {refused[0]}")


def _listen_refusal(failure: Failure) -> str:
    """The cause of a failed listen in a few words (the OS's, e.g. "Address already in use")."""
    cause = getattr(failure.value, "socketError", None)
    if isinstance(cause, OSError) and cause.strerror:
        hint = " (another process serves that port: stop it or change `listen`)" if cause.errno == EADDRINUSE else ""
        return f"{cause.strerror.lower()}{hint}"
    return str(failure.getErrorMessage())


def _make_private(*directories: Path) -> None:
    """The data dirs exist and are Brain's user's alone, even when an older release or another
    tool created them readable by others."""
    for directory in directories:
        directory.mkdir(mode=PRIVATE_DIRECTORY_MODE, parents=True, exist_ok=True)
        directory.chmod(PRIVATE_DIRECTORY_MODE)
