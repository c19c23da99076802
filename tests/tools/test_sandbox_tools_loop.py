"""Sandboxes end to end: a session created with the published client's declarations
(`ManagedTool("sandbox_create")` … for the host config's provider tools, `ManagedTool("local",
operations=[...])` for a session binding) and a model (the `loop` harness with the scripted
provider) that creates a local sandbox and runs Python in it, on a real `runbrain`. A configured
local sandbox without bubblewrap refuses startup with one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import brain
import httpx
import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer
from tests.support.startup import serve_and_check
from tests.tools.test_builtin_tools_loop import results_of, turn

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

SIGNING_KEY = "s" * 40
PROVIDERS = {
    "sandbox": {"class": "tools_app.providers.sandbox.SandboxProvider", "options": {"backend": "local"}},
    "local": {"class": "tools_app.providers.sandbox.SandboxProvider"},
}
TOOLS = ["sandbox_create", "sandbox_exec", "sandbox_inspect", "sandbox_terminate"]
COMMAND = "python3 -c 'print(6*7)'"
COMMAND_SECONDS = 60


def sandbox_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "transport": "provider",
            "provider": "sandbox",
            "operation": name.removeprefix("sandbox_"),
            "tenants": ["acme"],
        }
        for name in TOOLS
    ]


def sandbox_server(brain_factory: Callable[..., BrainServer], provider: ScriptedProvider) -> BrainServer:
    server = brain_factory(
        start=False, harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), tools=sandbox_tools()
    )
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    server.env["SANDBOX_SIGNING_KEY"] = SIGNING_KEY
    server.start()
    return server


def create_session(server: BrainServer, *, tools: list[str], binding: list[str] | None = None) -> str:
    """With 2.3.0's declarations where the client has them, else the wire body they lower to."""
    model = "openai/gpt-4.1-mini"
    sdk = server.sdk()
    if hasattr(brain, "ManagedTool"):
        declared = [brain.ManagedTool(name) for name in tools]
        if binding is not None:
            declared.append(brain.ManagedTool("local", operations=binding))
        session = sdk.create(harness="loop", model=brain.Model(model), tools=declared)
    else:
        config: dict[str, Any] = {"model": model, "tools": tools}
        if binding is not None:
            config["bindings"] = [{"alias": "local", "provider": "local", "operations": binding, "parameters": {}}]
        session = sdk.create({"harness": "loop", "config": config})
    return str(session["id"])


def test_a_model_creates_a_local_sandbox_and_runs_python_in_it(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given
    server = sandbox_server(brain_factory, scripted_provider)
    session_id = create_session(server, tools=TOOLS)
    # when
    created = results_of(turn(server, session_id, "call sandbox_create {}"))
    handle = created[0]["result"]["structured_content"]["handle"]
    ran = turn(server, session_id, f"call sandbox_exec {json.dumps({'handle': handle, 'command': COMMAND})}")
    ended = results_of(turn(server, session_id, f"call sandbox_terminate {json.dumps({'handle': handle})}"))
    # then
    assert [result["outcome"] for result in created] == ["ok"]
    (executed,) = results_of(ran)
    assert executed["outcome"] == "ok"
    assert executed["result"]["structured_content"] == {
        "exit_code": 0,
        "stdout": "42\n",
        "stderr": "",
        "truncated": False,
        "timed_out": False,
    }
    answer = [event["data"]["text"] for event in ran if event["type"] == "assistant.message"][-1]
    assert answer.startswith("Tool sandbox_exec returned: exit status 0") and "42" in answer
    assert ended[0]["result"]["structured_content"] == {"terminated": True}
    assert list((server.data_dir / "providers" / "sandbox" / "sandboxes").glob("[0-9a-f]*")) == []


def test_a_session_binding_of_the_local_provider_runs_commands_and_refuses_another_sessions_handle(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider
) -> None:
    # given
    server = sandbox_server(brain_factory, scripted_provider)
    owner = create_session(server, tools=[], binding=["create", "exec"])
    intruder = create_session(server, tools=[], binding=["create", "exec"])
    handle = results_of(turn(server, owner, "call local_create {}"))[0]["result"]["structured_content"]["handle"]
    # when
    arguments = json.dumps({"handle": handle, "command": "echo intruder > /work/mark.txt"})
    (refused,) = results_of(turn(server, intruder, f"call local_exec {arguments}"))
    (listed,) = results_of(
        turn(server, owner, f"call local_exec {json.dumps({'handle': handle, 'command': 'ls /work'})}")
    )
    # then
    assert refused["outcome"] == "error"
    assert refused["result"]["is_error"] is True
    assert refused["result"]["content"][0]["text"] == "this sandbox handle belongs to another session"
    assert listed["result"]["structured_content"]["stdout"] == ""


def test_a_local_sandbox_without_bubblewrap_refuses_startup_with_one_line(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: no bwrap on PATH
    server = brain_factory(start=False, tools=sandbox_tools())
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    server.env["SANDBOX_SIGNING_KEY"] = SIGNING_KEY
    server.env["PATH"] = str(tmp_path / "empty")
    served, checked = serve_and_check(server)
    # then
    line = (
        "invalid tool provider: BRAIN_TOOL_PROVIDERS.sandbox.options: local sandbox: bubblewrap is not installed "
        "(no bwrap on PATH); install the Debian package bubblewrap"
    )
    assert served.returncode != 0 and line in served.stderr
    assert "brain listening" not in served.stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health/ready", timeout=2)
    assert checked.returncode != 0 and line in checked.stderr
