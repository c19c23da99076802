"""The example tool service on its own: approvals expire, are bounded, and need the operator key."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from examples.tools.__main__ import host_config
from examples.tools.app import ToolService
from foundation.hostconfig import parse_host_config
from tests.tools.servers import LoopbackServer

TOOLS_KEY = "example-tools-key-0123456789abcdef"
APPROVAL_KEY = "example-approval-key-0123456789abcdef"


@pytest.fixture
def service() -> Iterator[tuple[ToolService, str]]:
    tools = ToolService(
        tools_key=TOOLS_KEY, approval_key=APPROVAL_KEY, approval_seconds=0.5, progress_seconds=0.1, max_pending=2
    )
    server = LoopbackServer(tools).start()
    yield tools, server.url
    server.stop()


def envelope(call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"tenant_id": "local", "session_id": "5" * 32, "call_id": call_id, "arguments": arguments}


def ask(url: str, call_id: str, results: dict[str, str]) -> None:
    headers = {"Authorization": f"Bearer {TOOLS_KEY}"}
    response = httpx.post(
        f"{url}/tools/ask_approval", json=envelope(call_id, question="Go?"), headers=headers, timeout=10
    )
    results[call_id] = response.text


def test_tools_and_approvals_need_their_own_keys(service: tuple[ToolService, str]) -> None:
    # when
    url = service[1]
    no_key = httpx.post(f"{url}/tools/echo", json=envelope("c1", text="hi"))
    operator_key = httpx.post(
        f"{url}/tools/echo", json=envelope("c1", text="hi"), headers={"Authorization": f"Bearer {APPROVAL_KEY}"}
    )
    tools_key = httpx.get(f"{url}/approvals", headers={"Authorization": f"Bearer {TOOLS_KEY}"})
    echo = httpx.post(
        f"{url}/tools/echo", json=envelope("c1", text="hi"), headers={"Authorization": f"Bearer {TOOLS_KEY}"}
    )

    # then
    assert (no_key.status_code, operator_key.status_code, tools_key.status_code) == (401, 401, 401)
    assert echo.json() == {"content": [{"type": "text", "text": "hi"}]}


def test_an_unanswered_approval_expires_as_an_ordinary_tool_error(service: tuple[ToolService, str]) -> None:
    # given
    results: dict[str, str] = {}

    # when
    ask(service[1], "c1", results)

    # then
    frames = [block for block in results["c1"].split("\n\n") if block]
    assert frames[0].startswith("event: progress\n")
    assert frames[-1].startswith("event: result\n")
    result = json.loads(frames[-1].split("data: ", 1)[1])
    assert result["is_error"] is True and "unknown_outcome" not in result
    assert "No operator answered" in result["content"][0]["text"]
    assert service[0].pending == {}


def test_at_most_max_pending_approvals_wait(service: tuple[ToolService, str]) -> None:
    # given: two waiting (the bound for this test)
    results: dict[str, str] = {}
    threads = [threading.Thread(target=ask, args=(service[1], f"c{n}", results)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while len(service[0].pending) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)

    # when
    ask(service[1], "c3", results)

    # then
    assert json.loads(results["c3"]) == {
        "content": [{"type": "text", "text": "too many pending approvals (at most 2)"}],
        "is_error": True,
    }
    for thread in threads:
        thread.join()


def test_answering_an_unknown_call_or_with_a_bad_body_is_refused(service: tuple[ToolService, str]) -> None:
    # when
    headers = {"Authorization": f"Bearer {APPROVAL_KEY}"}
    unknown = httpx.post(f"{service[1]}/approvals/nosuch", json={"approved": True}, headers=headers)
    bad = httpx.post(f"{service[1]}/approvals/nosuch", json={"approved": "yes"}, headers=headers)

    # then
    assert (unknown.status_code, bad.status_code) == (404, 400)


def test_print_config_is_a_valid_host_config_binding_all_three_tools() -> None:
    # when
    config = parse_host_config(
        json.dumps(host_config(tools_url="http://127.0.0.1:8081", listen="127.0.0.1:8080", tenant="local")).encode()
    )

    # then
    assert [tool.name for tool in config.tools] == ["echo", "inspect_session", "ask_approval"]
    assert [tool.inspect_session for tool in config.tools] == [False, True, False]
    assert config.persistence is not None and config.persistence.directory == ".brain-archive"
