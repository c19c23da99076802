"""Size limits of the executor WebSocket RPC, shared by its consumer and by runbrain, which sets
Daphne's WebSocket message limit from them. Imports nothing."""

from __future__ import annotations

__all__ = ["MAX_RPC_FRAME_BYTES", "MAX_RPC_MESSAGE_BYTES"]

MAX_RPC_FRAME_BYTES = 4 << 20  # a reply larger than this fails its call; the connection stays
# What Daphne accepts in one WebSocket message: a reply between the two limits is read to learn
# which call it fails; a larger message closes the connection with 1009 (message too big), which
# ends the connection's calls as unknown outcomes. Daphne's own default is 1 MiB.
MAX_RPC_MESSAGE_BYTES = 2 * MAX_RPC_FRAME_BYTES
