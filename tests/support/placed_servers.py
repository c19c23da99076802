"""A runbrain for placed-tool journeys: a host environment `app` and a brain environment `reader`
running the example component with a read grant on the workspace, both for tenant acme, the
agent-loop harnesses on the scripted provider; and one turn's events."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.provider import AGENT_HARNESSES, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end

__all__ = ["COMPONENT", "placed_server", "turn_events"]

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"


def placed_server(factory: Callable[..., BrainServer], provider: ScriptedProvider) -> BrainServer:
    assert COMPONENT.is_file(), f"the example component is missing: {COMPONENT}"
    server = factory(
        harnesses=AGENT_HARNESSES,
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.openai_base_url}},
        environments=[
            {"name": "app", "kind": "host", "tenants": ["acme"]},
            {
                "name": "reader",
                "kind": "brain",
                "tenants": ["acme"],
                "components": [str(COMPONENT)],
                "grants": {"workspace": ["read"]},
            },
        ],
    )
    provider.reset()  # the built-in `call NAME {json}` directive only
    return server


def turn_events(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    """The events of the turn `text` starts, once it has ended."""
    accepted = send_ok(server, session_id, text)
    wait_for_turn_end(server, session_id, accepted["id"], timeout=60)
    return [event for event in history(server, session_id) if event.get("input_id") == accepted["id"]]
