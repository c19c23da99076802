"""Starts and stops this process's session runtime around the ASGI server.

Daphne has no ASGI lifespan, so the runtime starts on the first scope; `runbrain` registers
`shutdown()` with Twisted. Outside `runbrain`, the host config comes from $BRAIN_CONFIG.
"""

from __future__ import annotations

import asyncio
import os

from brainsite import telemetry
from brainsite.hostconfig import HostConfig, Secrets, load_host_config, resolve_secrets
from brainsite.logs import logger

__all__ = ["BodyTooLarge", "body_limit", "configure", "ensure_started", "shutdown"]

_config: HostConfig | None = None
_secrets: Secrets | None = None
_started = False
_lock: asyncio.Lock | None = None


class BodyTooLarge(Exception):
    """A request body past input_bytes + 16 KiB (413)."""


def configure(config: HostConfig, secrets: Secrets) -> None:
    global _config, _secrets
    _config, _secrets = config, secrets


def _ensure_configured() -> tuple[HostConfig, Secrets]:
    global _config, _secrets
    if _config is None or _secrets is None:
        _config = load_host_config(os.environ.get("BRAIN_CONFIG", "brain.json"))
        _secrets = resolve_secrets(_config)
    return _config, _secrets


def body_limit() -> int:
    return _ensure_configured()[0].limits.input_bytes


async def ensure_started() -> None:
    """Create and start the engine once, before the first request is handled."""
    global _started, _lock
    if _started:
        return
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _started:
            return
        from channels.db import database_sync_to_async

        from sessions_app import db
        from sessions_app.runtime import install_engine
        from sessions_app.runtime.engine import Engine
        from tools_app import db as tools_db
        from tools_app import registry

        config, secrets = _ensure_configured()
        telemetry.setup()
        await database_sync_to_async(db.mirror_config_tokens)(config, secrets.tokens)
        await database_sync_to_async(tools_db.mirror_config_bindings)(config.tools)
        registry.install(config.tools, tool_tokens=secrets.tool_tokens, public_url=config.public_url)
        engine = Engine(config, secrets)
        install_engine(engine)
        await engine.start()
        _started = True


async def shutdown() -> None:
    from sessions_app.runtime import current_engine

    if not _started:
        return
    logger.info("brain shutting down")
    await current_engine().shutdown()
    from tools_app import registry

    await registry.aclose()
    await telemetry.ashutdown()  # after the engine: the last turns' spans and metrics go out
    logger.info("brain stopped")
