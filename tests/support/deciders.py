"""Who an approval names as its decider: a token from the host config decides under the start of
its digest (never the name of the environment variable it is read from)."""

from __future__ import annotations

import hashlib

from tests.fixtures.server import BrainServer


def config_token_name(server: BrainServer, name: str) -> str:
    """decided_by of a decision made with the server's config token for `name` (e.g. "bob")."""
    return f"token {hashlib.sha256(server.tokens[name].encode()).hexdigest()[:12]}"
