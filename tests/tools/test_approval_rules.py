"""Approval rules over every kind of tool, driven by the published client against a real server:
a host-config `approvals` rule makes a runtime executor tool's and a provider binding's calls
wait for a person's decision; approve runs the call once, reject ends it with the rejection and
never dispatches it. Rules are checked at startup."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import httpx2
import pytest
from brain import Brain, RuntimeTool

from foundation.hostconfig import ApprovalRule
from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.server import BrainServer
from tests.support.deciders import config_token_name
from tests.support.startup import serve_and_check
from tests.tools.conftest import Install, binding, context, text_of
from tests.tools.servers import ToolZoo
from tools_app.invocation import ApprovalGate, Invocation
from tools_app.invocation.approvals import ApprovalPolicy
from tools_app.transports.mcp import McpTransport

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
WAIT_SECONDS = 20.0  # a turn of the instant harness ends well within it
LOOKUP_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
RECORDS_TOKEN = "records-token-0123456789abcdef"


@pytest.fixture
def clients() -> Iterator[list[Brain]]:
    made: list[Brain] = []
    yield made
    for client in made:
        client.dispose()


class Counted:
    """A runtime tool's function that counts its runs."""

    def __init__(self) -> None:
        self.runs: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, arguments: Any, context: Any) -> dict[str, Any]:
        with self.lock:
            self.runs.append(arguments)
        return {"found": arguments["q"]}


def _until(client: Brain, session_id: str, done: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """The session's events once `done` holds for them (fails naming what it waited for)."""
    deadline = time.monotonic() + WAIT_SECONDS
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        events, after = [], ""
        while True:
            page = client.history(session_id, after=after, limit=100)
            events.extend(page["events"])  # type: ignore[arg-type]
            if len(page["events"]) < 100:
                break
            after = page["next_cursor"]
        if done(events):
            return events
        time.sleep(0.05)
    raise AssertionError(f"waited {WAIT_SECONDS} s; the session's events: {[event['type'] for event in events]}")


def _of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == type_]


def _pending(client: Brain, session_id: str) -> dict[str, Any]:
    events = _until(client, session_id, lambda found: bool(_of_type(found, "approval.requested")))
    return _of_type(events, "approval.requested")[0]


def _settled(client: Brain, session_id: str) -> list[dict[str, Any]]:
    return _until(
        client,
        session_id,
        lambda found: bool(_of_type(found, "tool.result"))
        and found[-1]["type"] == "session.status"
        and found[-1]["data"]["status"] == "idle",
    )


def _decide(server: BrainServer, session_id: str, approval_id: str, **body: Any) -> httpx.Response:
    with server.client("bob") as api:
        return api.post(f"/sessions/{session_id}/approvals/{approval_id}", json=body)


def _text(result: dict[str, Any]) -> str:
    return " ".join(item.get("text", "") for item in result["content"])


# -- runtime executor tools ------------------------------------------------------------------


@pytest.fixture
def gated_runtime(brain_factory: Callable[..., BrainServer]) -> BrainServer:
    return brain_factory(approvals=[{"tools": ["runtime_*"], "kinds": ["runtime"], "approval_timeout_seconds": 60}])


def _runtime_session(server: BrainServer, clients: list[Brain], tool: Counted) -> tuple[Brain, str]:
    client = server.sdk()
    clients.append(client)
    session = client.create(
        {"harness": "instant", "config": {"model": MODEL, "tools": []}},
        runtime_tools=[RuntimeTool("lookup", "Look something up.", LOOKUP_SCHEMA, tool)],
    )
    client.send(session["id"], {"type": "user.message", "text": 'tool:runtime_lookup {"q": "orders"}'})
    return client, session["id"]


def test_an_approval_rule_holds_a_runtime_tool_call_until_approved_then_runs_it_once(
    gated_runtime: BrainServer, clients: list[Brain]
) -> None:
    # given
    tool = Counted()
    client, session_id = _runtime_session(gated_runtime, clients, tool)
    pending = _pending(client, session_id)
    assert tool.runs == []  # the call waits: nothing ran before the decision
    assert (pending["tool"], pending["arguments"]) == ("runtime_lookup", {"q": "orders"})

    # when
    response = _decide(gated_runtime, session_id, pending["approval_id"], decision="approve")
    events = _settled(client, session_id)

    # then
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "approved"
    types = [event["type"] for event in events if event["type"].startswith(("tool.", "approval."))]
    assert types == ["tool.call", "approval.requested", "approval.decided", "tool.result"]
    (result,) = _of_type(events, "tool.result")
    assert result["outcome"] == "ok"
    assert result["result"]["structured_content"] == {"found": "orders"}
    assert tool.runs == [{"q": "orders"}]


def test_a_rejected_runtime_tool_call_ends_with_the_rejection_and_never_reaches_the_client(
    gated_runtime: BrainServer, clients: list[Brain]
) -> None:
    # given
    tool = Counted()
    client, session_id = _runtime_session(gated_runtime, clients, tool)
    pending = _pending(client, session_id)

    # when
    response = _decide(gated_runtime, session_id, pending["approval_id"], decision="reject", reason="not today")
    events = _settled(client, session_id)

    # then
    assert response.status_code == 200, response.text
    (result,) = _of_type(events, "tool.result")
    assert result["outcome"] == "error"
    assert result["result"]["is_error"] is True
    assert "unknown_outcome" not in result["result"]
    assert f"rejected by {config_token_name(gated_runtime, 'bob')}: not today" in _text(result["result"])
    assert tool.runs == []


def test_a_rule_of_another_kind_leaves_runtime_tools_ungated(
    brain_factory: Callable[..., BrainServer], clients: list[Brain]
) -> None:
    # given: a rule for provider bindings only, whose pattern the runtime tool's name matches too
    server = brain_factory(approvals=[{"tools": ["runtime_*"], "kinds": ["provider"]}])
    tool = Counted()

    # when
    client, session_id = _runtime_session(server, clients, tool)
    events = _settled(client, session_id)

    # then
    assert _of_type(events, "approval.requested") == []
    assert [result["outcome"] for result in _of_type(events, "tool.result")] == ["ok"]
    assert tool.runs == [{"q": "orders"}]


# -- provider bindings -------------------------------------------------------------------------


@pytest.fixture
def gated_provider(brain_factory: Callable[..., BrainServer], zoo_url: str) -> BrainServer:
    server = brain_factory(start=False, approvals=[{"providers": ["records"], "tenants": ["acme"]}])
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(
        {
            "records": {
                "class": "tools_app.providers.http.HttpProvider",
                "options": {
                    "url": f"{zoo_url}/identity",
                    "token_env": "TEST_RECORDS_TOKEN",
                    "operations": [
                        {"name": "lookup", "description": "Look a record up.", "input_schema": LOOKUP_SCHEMA}
                    ],
                },
            }
        }
    )
    server.env["TEST_RECORDS_TOKEN"] = RECORDS_TOKEN
    server.start()
    return server


def _provider_session(server: BrainServer, clients: list[Brain]) -> tuple[Brain, str]:
    client = server.sdk()
    clients.append(client)
    binding = {"alias": "east", "provider": "records"}
    session = client.create({"harness": "instant", "config": {"model": MODEL, "tools": [], "bindings": [binding]}})
    client.send(session["id"], {"type": "user.message", "text": 'tool:east_lookup {"q": "order-7"}'})
    return client, session["id"]


def test_an_approval_rule_holds_a_provider_binding_call_until_approved_then_sends_it_once(
    gated_provider: BrainServer, clients: list[Brain], zoo: ToolZoo
) -> None:
    # given
    client, session_id = _provider_session(gated_provider, clients)
    pending = _pending(client, session_id)
    assert zoo.calls("/identity") == []  # the call waits: nothing was sent before the decision
    assert pending["tool"] == "east_lookup"

    # when
    response = _decide(gated_provider, session_id, pending["approval_id"], decision="approve")
    events = _settled(client, session_id)

    # then
    assert response.status_code == 200, response.text
    (result,) = _of_type(events, "tool.result")
    assert result["outcome"] == "ok"
    (sent,) = zoo.calls("/identity")
    assert (sent.body["binding"], sent.body["arguments"]) == ("east", {"q": "order-7"})


def test_a_rejected_provider_binding_call_ends_with_the_rejection_and_is_never_sent(
    gated_provider: BrainServer, clients: list[Brain], zoo: ToolZoo
) -> None:
    # given
    client, session_id = _provider_session(gated_provider, clients)
    pending = _pending(client, session_id)

    # when
    response = _decide(gated_provider, session_id, pending["approval_id"], decision="reject", reason="no")
    events = _settled(client, session_id)

    # then
    assert response.status_code == 200, response.text
    (result,) = _of_type(events, "tool.result")
    assert result["outcome"] == "error"
    assert f"rejected by {config_token_name(gated_provider, 'bob')}: no" in _text(result["result"])
    assert zoo.calls("/identity") == []


# -- startup ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        pytest.param({"tools": ["runtime_[ab]"]}, "approvals[0].tools", id="class_pattern_case"),
        pytest.param({"kinds": ["runtime", "sandbox"]}, "approvals[0].kinds", id="unknown_kind_case"),
        pytest.param({"providers": ["nowhere"]}, "approvals[0].providers: tool provider 'nowhere'", id="provider_case"),
        pytest.param({"approval_timeout_seconds": 0}, "approvals[0].approval_timeout_seconds", id="timeout_case"),
    ],
)
def test_an_invalid_approval_rule_stops_the_server_before_it_listens(
    brain_factory: Callable[..., BrainServer], rule: dict[str, Any], message: str
) -> None:
    # given
    server = brain_factory(start=False, approvals=[rule])
    served, checked = serve_and_check(server)

    # then
    assert served.returncode != 0 and checked.returncode != 0
    assert message in served.stderr
    assert message in checked.stderr
    assert "brain listening" not in served.stderr


# -- the admin ------------------------------------------------------------------------------------

RULES = "/admin/tools_app/approvalrule"


def test_a_rule_added_in_the_admin_holds_the_next_runtime_tool_call_at_once(
    brain_factory: Callable[..., BrainServer], clients: list[Brain]
) -> None:
    # given: a server with no rule in its host config
    server = brain_factory()
    create_superuser(server)
    tool = Counted()

    # when
    with AdminClient(server) as admin:
        admin.login()
        refused = admin.post(f"{RULES}/add/", {"tools": '["runtime_[ab]"]', "approval_timeout_seconds": "60"})
        added = admin.post(
            f"{RULES}/add/", {"tools": '["runtime_look*"]', "kinds": "runtime", "approval_timeout_seconds": "60"}
        )
    client, session_id = _runtime_session(server, clients, tool)
    pending = _pending(client, session_id)

    # then
    assert refused.status_code == 200 and "tool pattern &#x27;runtime_[ab]&#x27; must be" in refused.text
    assert added.status_code == 302, added.text[:3000]
    assert pending["tool"] == "runtime_lookup"
    assert tool.runs == []
    assert _decide(server, session_id, pending["approval_id"], decision="approve").status_code == 200
    assert [result["outcome"] for result in _of_type(_settled(client, session_id), "tool.result")] == ["ok"]
    assert tool.runs == [{"q": "orders"}]


# -- MCP tools (config tools with transport mcp), on the call path in-process ---------------------


class CountingTransport(httpx2.AsyncHTTPTransport):
    """The MCP transport's HTTP client, counting the requests it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request.method)
        return await super().handle_async_request(request)


async def test_an_approval_rule_holds_an_mcp_tool_call_and_a_rejected_one_is_never_sent(
    install: Install, mcp_url: str
) -> None:
    # given
    counting = CountingTransport()
    rules = ApprovalPolicy([ApprovalRule(tools=["docs_*"], kinds=["config"], approval_timeout_seconds=45)])
    tools = install(
        binding("docs_echo", mcp_url, mcp_tool="echo", token_env="MCP_KEY"),
        approvals=rules,
        transports={"mcp": McpTransport(counting)},
    )
    asked: list[tuple[str, dict[str, object], int]] = []

    def gate(answer: Invocation | None) -> ApprovalGate:
        async def decide(name: str, arguments: dict[str, object], *, timeout_seconds: int) -> Invocation | None:
            asked.append((name, arguments, timeout_seconds))
            return answer

        return decide

    # when
    rejected = await tools.invoke(
        context("docs_echo", approval=gate(Invocation.failed("rejected by bob: no"))), "docs_echo", {"text": "hi"}
    )
    sent_before_approval = list(counting.sent)
    approved = await tools.invoke(context("docs_echo", approval=gate(None)), "docs_echo", {"text": "hi"})

    # then
    assert asked == [("docs_echo", {"text": "hi"}, 45), ("docs_echo", {"text": "hi"}, 45)]
    assert rejected["is_error"] is True and text_of(rejected) == "rejected by bob: no"
    assert sent_before_approval == []
    assert approved["content"] == [{"type": "text", "text": "hi"}]
    assert "POST" in counting.sent


async def test_a_call_is_not_sent_while_the_admin_rules_cannot_be_read_and_keeps_the_last_rules_read(
    install: Install, mcp_url: str
) -> None:
    # given: the admin's rules are out of reach (the database), then read, then out of reach again
    reads: list[str] = []
    answers: list[list[ApprovalRule] | None] = [None, [ApprovalRule(tools=["docs_*"])], None]

    async def loader() -> list[ApprovalRule]:
        answer = answers[len(reads)]
        reads.append("ok" if answer is not None else "failed")
        if answer is None:
            raise OSError("database out of reach")
        return answer

    counting = CountingTransport()
    rules = ApprovalPolicy((), admin_loader=loader)
    tools = install(
        binding("docs_echo", mcp_url, mcp_tool="echo", token_env="MCP_KEY"),
        approvals=rules,
        transports={"mcp": McpTransport(counting)},
    )
    asked: list[str] = []

    async def reject(name: str, arguments: dict[str, object], *, timeout_seconds: int) -> Invocation | None:
        asked.append(name)
        return Invocation.failed("rejected by bob: no")

    # when
    unread = await tools.invoke(context("docs_echo", approval=reject), "docs_echo", {"text": "hi"})
    read = await tools.invoke(context("docs_echo", approval=reject), "docs_echo", {"text": "hi"})
    rules.forget_rules()
    stale = await tools.invoke(context("docs_echo", approval=reject), "docs_echo", {"text": "hi"})

    # then
    assert unread["is_error"] is True
    assert text_of(unread) == "the approval rules could not be read (database out of reach); the call was not sent"
    assert text_of(read) == text_of(stale) == "rejected by bob: no"
    assert reads == ["failed", "ok", "failed"]
    assert asked == ["docs_echo", "docs_echo"]
    assert counting.sent == []
