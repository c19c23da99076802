"""A tool service answering with a gzip bomb (a few KiB that decode to 1 GiB) is cut off at
max_output_bytes counted on the decoded body, for HTTP JSON, SSE, REST and MCP tools in a real
session, and Brain's memory stays bounded while it reads."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, make_server, send_ok, wait_for_turn_end
from tests.support.gzip_bomb import BombService
from tests.tools.mcp_server import MCP_TOKEN
from tests.tools.servers import LoopbackServer

OUTPUT_LIMIT = 256 * 1024
RSS_GROWTH_BOUND = 200 << 20  # generous: decoding the bomb whole takes 1 GiB


def tools(url: str) -> list[dict[str, Any]]:
    limited = {"max_output_bytes": OUTPUT_LIMIT, "timeout_seconds": 60, "tenants": ["acme"]}
    made: list[dict[str, Any]] = []
    for layers in (1, 2):
        query = f"?layers={layers}"
        common = {"description": "A service that answers with a gzip bomb.", "input_schema": {"type": "object"}}
        made += [
            {**common, **limited, "name": f"bomb_json{layers}", "url": f"{url}/json{query}"},
            {**common, **limited, "name": f"bomb_sse{layers}", "url": f"{url}/sse{query}"},
            {**common, **limited, "name": f"bomb_rest{layers}", "url": f"{url}/rest{query}", "transport": "rest"},
            {
                **common,
                **limited,
                "name": f"bomb_mcp{layers}",
                "url": f"{url}/mcp{query}",
                "mcp_tool": "echo",
                "token_env": "TEST_MCP_KEY",
            },
        ]
    # the same MCP server without a bomb: the session's next turn
    made.append({**made[-1], "name": "echo_mcp", "url": f"{url}/mcp", "max_output_bytes": 1 << 20})
    made.append({**made[0], "name": "nothing_json", "url": f"{url}/json?empty=1"})
    return made


@pytest.fixture(scope="module")
def bombs() -> Iterator[tuple[BombService, str]]:
    service = BombService()
    server = LoopbackServer(service, lifespan="on").start()
    yield service, server.url
    server.stop()


@pytest.fixture(scope="module")
def bomb_brain(tmp_path_factory: pytest.TempPathFactory, bombs: tuple[BombService, str]) -> Iterator[BrainServer]:
    server = make_server(tmp_path_factory.mktemp("brain"), tools=tools(bombs[1]))
    server.env["TEST_MCP_KEY"] = MCP_TOKEN
    server.start()
    yield server
    server.stop(signal.SIGKILL)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # proc(5): resets VmHWM to the current RSS


def tool_result(server: BrainServer, session_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    message = send_ok(server, session_id, f"tool:{name} {json.dumps(arguments)}")
    events = wait_for_turn_end(server, session_id, message["id"], timeout=60)
    (result,) = [event for event in events if event["type"] == "tool.result" and event["input_id"] == message["id"]]
    return result["data"]["result"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("layers", [pytest.param(1, id="gzip_case"), pytest.param(2, id="gzip_gzip_case")])
@pytest.mark.parametrize("kind", ["json", "sse", "rest", "mcp"])
def test_a_gzip_bomb_stops_at_max_output_bytes_with_bounded_memory(
    bomb_brain: BrainServer, kind: str, layers: int
) -> None:
    # given
    assert bomb_brain.process is not None
    pid = bomb_brain.process.pid
    session = create_session(bomb_brain, tools=[f"bomb_{kind}{layers}", "echo_mcp"])
    _reset_peak(pid)
    before = _status_kib(pid, "VmRSS")

    # when
    result = tool_result(bomb_brain, session["id"], f"bomb_{kind}{layers}", {"text": "boom"})
    peak = _status_kib(pid, "VmHWM")
    after = tool_result(bomb_brain, session["id"], "echo_mcp", {"text": "next turn"})

    # then
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert f"tool output exceeds max_output_bytes ({OUTPUT_LIMIT})" in result["content"][0]["text"]
    assert (peak - before) * 1024 < RSS_GROWTH_BOUND, f"peak RSS grew by {(peak - before) // 1024} MiB"
    assert after["content"] == [{"type": "text", "text": "next turn"}]


def test_a_compressed_body_that_decodes_to_nothing_still_stops_at_the_limit(bomb_brain: BrainServer) -> None:
    # given: 64 MiB of empty deflate blocks would keep a call reading until its deadline
    session = create_session(bomb_brain, tools=["nothing_json"])

    # when
    result = tool_result(bomb_brain, session["id"], "nothing_json", {"text": "boom"})

    # then: cut off once the wire bytes pass the limit, not read to its end (then "not valid JSON")
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert f"tool output exceeds max_output_bytes ({OUTPUT_LIMIT})" in result["content"][0]["text"]
