"""One tenant's component calls cannot take another tenant's workers: a brain environment runs at
most `limits.workers` calls at once on an instance, `limits.tenant_workers` of them for one
tenant. Against a real server and the example component: while acme's endless loop holds its
only share, acme's next call waits for it and globex's call runs at once; once the loop is
interrupted, the waiting call runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history, send_ok, wait_for_turn_end

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "examples" / "components" / "workspace_reader" / "workspace_reader.wasm"
MODEL = "openai/gpt-4.1-mini"
DEADLINE_S = 120  # the endless loop is interrupted long before: no test waits for it
READ_INPUT = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
SPIN_INPUT = {"type": "object"}


def _server(factory: Callable[..., BrainServer], provider: ScriptedProvider) -> BrainServer:
    assert COMPONENT.is_file(), f"the example component is missing: {COMPONENT}"
    server = factory(
        harnesses={"loop": LOOP_HARNESS},
        providers={"openai": {"api_key_env": "TEST_OPENAI_KEY", "base_url": provider.openai_base_url}},
        environments=[
            {
                "name": "reader",
                "kind": "brain",
                "tenants": ["acme", "globex"],
                "components": [str(COMPONENT)],
                "grants": {"workspace": ["read"]},
                "limits": {"deadline_seconds": DEADLINE_S, "fuel": 10**15, "workers": 2, "tenant_workers": 1},
            }
        ],
    )
    provider.reset()
    return server


def _session(server: BrainServer, user: str) -> str:
    placement = {
        "environments": [{"name": "reader", "filesystem": {"workspace": "read"}}],
        "tools": [
            {"tool": {"name": "spin", "description": "Loop.", "input_schema": SPIN_INPUT}, "env": "reader"},
            {"tool": {"name": "read_file", "description": "Read.", "input_schema": READ_INPUT}, "env": "reader"},
        ],
    }
    with server.client(user) as api:
        created = api.post(
            "/sessions", json={"harness": "loop", "config": {"model": MODEL, "tools": [], "placement": placement}}
        )
    assert created.status_code == 201, created.text
    session_id: str = created.json()["id"]
    workspace = server.data_dir / "sessions" / session_id / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text(f"notes of {user}")
    return session_id


def _committed(server: BrainServer, session_id: str, user: str, type_: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [event for event in history(server, session_id, user) if event["type"] == type_]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no {type_} in {session_id} within {timeout} s")


def test_a_tenants_endless_component_holds_only_its_share_while_another_tenant_reads(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given: one brain environment offered to acme and globex, two workers, one per tenant
    server = _server(brain_factory, scripted_provider)
    spinning, queued = _session(server, "alice"), _session(server, "alice")
    other = _session(server, "charlie")

    # when: acme's first session starts an endless loop, then its second session and globex read
    spin_turn = send_ok(server, spinning, "call spin {}")
    _committed(server, spinning, "alice", "tool.call")
    queued_turn = send_ok(server, queued, 'call read_file {"path": "notes.txt"}')
    _committed(server, queued, "alice", "tool.call")
    send_ok(server, other, 'call read_file {"path": "notes.txt"}', name="charlie")
    other_result = _committed(server, other, "charlie", "tool.result")
    spin_result_then = [e for e in history(server, spinning) if e["type"] == "tool.result"]
    queued_result_then = [e for e in history(server, queued) if e["type"] == "tool.result"]

    # then: globex read its own file while acme's loop still ran and acme's read still waited
    assert other_result["data"]["outcome"] == "ok", other_result
    assert "notes of charlie" in str(other_result["data"]["result"])
    assert spin_result_then == [] and queued_result_then == []
    # and once acme's loop is interrupted (its worker killed), its waiting read runs (not refused)
    server.sdk().interrupt(spinning)
    wait_for_turn_end(server, spinning, spin_turn["id"], timeout=60)
    wait_for_turn_end(server, queued, queued_turn["id"], timeout=60)
    (spin_result,) = [e["data"] for e in history(server, spinning) if e["type"] == "tool.result"]
    (queued_result,) = [e["data"] for e in history(server, queued) if e["type"] == "tool.result"]
    assert spin_result["outcome"] == "cancelled", spin_result
    assert queued_result["outcome"] == "ok", queued_result
    assert "notes of alice" in str(queued_result["result"])
