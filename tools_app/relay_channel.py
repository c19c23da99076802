"""The executor relay's messages between instances, over the Channels Redis layer: sealed when
sent, opened (verified, fresh, for this channel, not seen before) when received; anything else is
dropped (tools_app.relay_seal)."""

from __future__ import annotations

import time
from typing import Any

from .relay_seal import RelaySeal

__all__ = ["CHANNEL_CAPACITY", "MESSAGE_EXPIRY_SECONDS", "REDIS_SECONDS", "RelayChannel"]

MESSAGE_EXPIRY_SECONDS = 30  # a command nobody received by then is dropped, never delivered late
CHANNEL_CAPACITY = 1000
REDIS_SECONDS = 5.0  # a Redis command (a route, a holder record) answers within this or fails
# The layer's receive is a blocking pop of 5 s (channels_redis's brpop_timeout), retried while
# nothing comes; redis-py's default socket timeout is 5 s too, which cut every idle pop short and
# failed the calls out at that moment as if Redis were gone. Its reads get this much instead.
LAYER_READ_SECONDS = 15.0
PREFIX = "brain-relay"


class RelayChannel:
    """This instance's channel (`channel`) and the sending end to the others'."""

    def __init__(self, redis_url: str, channel: str, seal: RelaySeal) -> None:
        # imported here, not at module load: redis pulls in the OpenTelemetry SDK when it is
        # installed, and a server without a fleet relay must not load it (telemetry is opt-in)
        from channels_redis.core import RedisChannelLayer

        self.channel = channel
        self._seal = seal
        self._layer: Any = RedisChannelLayer(
            hosts=[
                {"address": redis_url, "socket_timeout": LAYER_READ_SECONDS, "socket_connect_timeout": REDIS_SECONDS}
            ],
            prefix=PREFIX,
            expiry=MESSAGE_EXPIRY_SECONDS,
            capacity=CHANNEL_CAPACITY,
        )

    async def send(self, channel: str, kind: str, body: dict[str, object]) -> None:
        await self._layer.send(channel, self._seal.message(channel, kind, body, now=time.time()))

    async def receive(self) -> tuple[str, dict[str, object]] | None:
        """The next message for this channel as (kind, body); None for one dropped. Raises
        when Redis is out of reach."""
        message = await self._layer.receive(self.channel)
        return self._seal.open_message(self.channel, message, now=time.time())

    async def close(self) -> None:
        await self._layer.close_pools()
