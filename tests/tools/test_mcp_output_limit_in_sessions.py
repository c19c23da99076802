"""An MCP tool that sends more than max_output_bytes, as progress or as its result, ends as an error
result in a real session, within its deadline, and the session runs its next turn."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_status, wait_for_turn_end
from tests.tools.mcp_server import MCP_TOKEN

OUTPUT_LIMIT = 64 * 1024
TIMEOUT_SECONDS = 30  # generous: only the byte count may end the call early


def mcp_binding(name: str, url: str, remote: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The MCP {remote} tool.",
        "input_schema": {"type": "object"},
        "url": url,
        "mcp_tool": remote,
        "token_env": "TEST_MCP_KEY",
        "tenants": ["acme"],
        **fields,
    }


@pytest.fixture
def mcp_brain(brain_factory: Callable[..., BrainServer], mcp_url: str) -> BrainServer:
    limited = {"max_output_bytes": OUTPUT_LIMIT, "timeout_seconds": TIMEOUT_SECONDS}
    bindings = [
        mcp_binding("docs_chatter", mcp_url, "chatter", **limited),
        mcp_binding("docs_big", mcp_url, "big", **limited),
        mcp_binding("docs_echo", mcp_url, "echo"),
    ]
    server = brain_factory(start=False, tools=bindings)
    server.env["TEST_MCP_KEY"] = MCP_TOKEN
    server.start()
    return server


def tool_result(server: BrainServer, session_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    message = send_ok(server, session_id, f"tool:{name} {json.dumps(arguments)}")
    events = wait_for_turn_end(server, session_id, message["id"])
    (result,) = [event for event in events if event["type"] == "tool.result" and event["input_id"] == message["id"]]
    return result["data"]["result"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        pytest.param("docs_chatter", {"size": 10_000}, id="endless_progress_case"),
        pytest.param("docs_big", {"n": 16 << 20}, id="huge_result_case"),
    ],
)
def test_an_mcp_tool_over_its_output_limit_fails_the_call_and_the_session_goes_on(
    mcp_brain: BrainServer, tool: str, arguments: dict[str, Any]
) -> None:
    # given
    session = create_session(mcp_brain, tools=[tool, "docs_echo"])
    started = time.monotonic()

    # when
    cut = tool_result(mcp_brain, session["id"], tool, arguments)
    elapsed = time.monotonic() - started
    after = tool_result(mcp_brain, session["id"], "docs_echo", {"text": "next turn"})

    # then
    assert elapsed < TIMEOUT_SECONDS / 3
    assert cut["is_error"] is True and cut["unknown_outcome"] is True
    assert f"tool output exceeds max_output_bytes ({OUTPUT_LIMIT})" in cut["content"][0]["text"]
    assert after["content"] == [{"type": "text", "text": "next turn"}]
    wait_for_status(mcp_brain, session["id"], "idle")
