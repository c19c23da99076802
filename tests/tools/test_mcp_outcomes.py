"""MCP tools over Streamable HTTP against an MCP server built with the mcp SDK (tools-mcp.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.tools.conftest import Install, Progress, binding, context, text_of
from tests.tools.mcp_server import PNG, build_app
from tests.tools.servers import LoopbackServer, free_port

OUTPUT_LIMIT = 64 * 1024
HUGE = 16 << 20  # far beyond the limit: a call that buffered it all would be slow and big


@pytest.fixture(scope="module")
def mcp_json_url() -> Iterator[str]:
    """The same MCP server answering each request with one JSON body instead of an SSE stream."""
    server = LoopbackServer(build_app(json_response=True), lifespan="on").start()
    yield server.url + "/mcp"
    server.stop()


def mcp(name: str, url: str, remote: str | None = None, **fields: Any) -> Any:
    fields.setdefault("token_env", "MCP_KEY")
    return binding(name, url, mcp_tool=remote or name, **fields)


async def test_an_mcp_text_result_becomes_a_text_block(install: Install, mcp_url: str) -> None:
    # given
    tools = install(mcp("docs_echo", mcp_url, "echo"))

    # when
    result = await tools.invoke(context("docs_echo"), "docs_echo", {"text": "hello"})

    # then: MCPServer also returns the str as structured {"result": ...}
    assert result == {"content": [{"type": "text", "text": "hello"}], "structured_content": {"result": "hello"}}


async def test_the_scope_metadata_carries_the_identity_and_the_call_id_is_the_progress_token(
    install: Install, mcp_url: str
) -> None:
    # given
    tools = install(mcp("whoami", mcp_url))

    # when
    result = await tools.invoke(context("whoami", call_id="a" * 32), "whoami", {})

    # then
    seen = json.loads(result["structured_content"]["result"])
    assert seen == {
        "scope": {"tenant_id": "acme", "session_id": "5" * 32, "call_id": "a" * 32},
        "progress_token": "a" * 32,
    }


async def test_mcp_progress_notifications_become_progress_in_order(install: Install, mcp_url: str) -> None:
    # given
    tools = install(mcp("work", mcp_url))
    progress = Progress()

    # when
    result = await tools.invoke(context("work", progress=progress), "work", {"steps": 3})

    # then
    assert text_of(result) == "done after 3 steps"
    assert progress == [{"progress": step, "total": 3, "message": f"step {step}"} for step in (1, 2, 3)]


async def test_an_mcp_image_becomes_an_image_block(install: Install, mcp_url: str) -> None:
    # given
    tools = install(mcp("picture", mcp_url))

    # when
    result = await tools.invoke(context("picture"), "picture", {})

    # then
    assert result == {"content": [{"type": "image", "data": PNG, "mime_type": "image/png"}]}


async def test_structured_content_is_kept_and_checked_against_output_schema(install: Install, mcp_url: str) -> None:
    # given
    schema = {"type": "object", "properties": {"length": {"type": "integer"}}, "required": ["length"]}
    tools = install(mcp("measure", mcp_url, output_schema=schema))

    # when
    result = await tools.invoke(context("measure"), "measure", {"text": "abcd"})

    # then
    assert result["structured_content"] == {"length": 4}
    assert json.loads(text_of(result)) == {"length": 4}
    assert "is_error" not in result


async def test_an_mcp_is_error_result_is_a_tool_error_with_a_known_outcome(install: Install, mcp_url: str) -> None:
    # given
    tools = install(mcp("broken", mcp_url))

    # when
    result = await tools.invoke(context("broken"), "broken", {})

    # then
    assert result == {"content": [{"type": "text", "text": "it broke"}], "is_error": True}


@pytest.mark.parametrize(
    ("url", "token", "expected"),
    [
        pytest.param("closed", "MCP", "could not reach the MCP server", id="connection_refused_case"),
        pytest.param(
            "server", "wrong-token-0123456789abcdef", "could not reach the MCP server", id="unauthorized_case"
        ),
    ],
)
async def test_failing_to_reach_the_server_is_an_error_with_a_known_outcome(
    install: Install, mcp_url: str, url: str, token: str, expected: str
) -> None:
    # given
    target = mcp_url if url == "server" else f"http://127.0.0.1:{free_port()}/mcp"
    tokens = None if token == "MCP" else {"echo": token}
    tools = install(mcp("echo", target), tokens=tokens)

    # when
    result = await tools.invoke(context("echo"), "echo", {"text": "x"})

    # then
    assert result["is_error"] is True and "unknown_outcome" not in result
    assert expected in text_of(result)


async def test_a_refused_mcp_call_is_never_sent(install: Install, mcp_url: str) -> None:
    # given
    tools = install(mcp("echo", mcp_url, input_schema={"type": "object", "required": ["text"]}))

    # when
    other_tenant = await tools.invoke(context("echo", tenant="globex"), "echo", {"text": "x"})
    invalid = await tools.invoke(context("echo"), "echo", {})

    # then
    for result in (other_tenant, invalid):
        assert result["is_error"] is True and "unknown_outcome" not in result


@pytest.mark.parametrize(
    ("remote", "arguments", "fields", "expected"),
    [
        pytest.param("protocol", {}, {}, "server exploded", id="protocol_error_case"),
        pytest.param("ask", {}, {}, "asked for user input", id="elicitation_case"),
        pytest.param("sound", {}, {}, "unsupported 'audio' content", id="unsupported_content_case"),
        pytest.param(
            "big", {"n": 5000}, {"max_output_bytes": 1024}, "exceeds max_output_bytes (1024)", id="too_big_case"
        ),
        pytest.param(
            "measure",
            {"text": "a"},
            {"output_schema": {"type": "object", "required": ["size"]}},
            "does not match output_schema",
            id="output_schema_case",
        ),
        pytest.param("nap", {"seconds": 5}, {"timeout_seconds": 1}, "timed out after 1 s", id="timeout_case"),
    ],
)
async def test_failures_after_the_call_was_sent_are_unknown_outcomes(
    install: Install, mcp_url: str, remote: str, arguments: dict[str, Any], fields: dict[str, Any], expected: str
) -> None:
    # given
    tools = install(mcp("tool", mcp_url, remote, **fields))
    started = time.monotonic()

    # when
    result = await tools.invoke(context("tool"), "tool", arguments)

    # then
    assert time.monotonic() - started < 3
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert expected in text_of(result)


async def test_each_call_opens_a_fresh_mcp_session(install: Install, mcp_url: str) -> None:
    # given
    tools = install(mcp("echo", mcp_url))

    # when
    results = [await tools.invoke(context("echo"), "echo", {"text": str(n)}) for n in range(3)]

    # then
    assert [text_of(result) for result in results] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("remote", "arguments", "server"),
    [
        pytest.param("chatter", {"size": 10_000}, "sse", id="endless_progress_case"),
        pytest.param("big", {"n": HUGE}, "sse", id="huge_streamed_result_case"),
        pytest.param("big", {"n": HUGE}, "json", id="huge_json_result_case"),
    ],
)
async def test_the_output_limit_cuts_a_call_off_while_it_is_received(
    install: Install, mcp_url: str, mcp_json_url: str, remote: str, arguments: dict[str, Any], server: str
) -> None:
    # given: a generous deadline, so only the byte count can end the call early
    url = mcp_json_url if server == "json" else mcp_url
    tools = install(
        mcp("tool", url, remote, max_output_bytes=OUTPUT_LIMIT, timeout_seconds=30),
        mcp("echo", url),
    )
    progress = Progress()
    started = time.monotonic()

    # when
    result = await tools.invoke(context("tool", progress=progress), "tool", arguments)
    elapsed = time.monotonic() - started
    after = await tools.invoke(context("echo"), "echo", {"text": "still serving"})

    # then: the words of the HTTP/SSE transport; progress forwarded before the cut fits the limit
    assert elapsed < 5
    assert result["is_error"] is True and result["unknown_outcome"] is True
    assert f"tool output exceeds max_output_bytes ({OUTPUT_LIMIT})" in text_of(result)
    assert sum(len(json.dumps(item)) for item in progress) <= OUTPUT_LIMIT
    assert text_of(after) == "still serving"


async def test_a_result_within_the_limit_over_json_still_arrives(install: Install, mcp_json_url: str) -> None:
    # given
    tools = install(mcp("big", mcp_json_url, max_output_bytes=OUTPUT_LIMIT))

    # when
    result = await tools.invoke(context("big"), "big", {"n": 1000})

    # then
    assert text_of(result) == "y" * 1000
