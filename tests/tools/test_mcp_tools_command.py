"""`manage.py mcp_tools`: MCP discovery into Brain tool bindings."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from foundation.hostconfig import ToolBindingConfig
from tests.tools.mcp_server import MCP_TOKEN
from tools_app.management.commands import mcp_tools


def discover(url: str, tools: str, token_env: str = "MCP_DISCOVERY_KEY") -> list[dict[str, object]]:
    out = StringIO()
    call_command("mcp_tools", url=url, token_env=token_env, tenant="local", tools=tools, stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_it_prints_one_valid_binding_per_named_tool(mcp_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # given
    monkeypatch.setenv("MCP_DISCOVERY_KEY", MCP_TOKEN)

    # when
    bindings = discover(mcp_url, "echo,work")

    # then
    assert [binding["name"] for binding in bindings] == ["echo", "work"]
    echo = bindings[0]
    assert echo["description"] == "Echo text back."
    assert echo["input_schema"]["required"] == ["text"]  # type: ignore[index]
    assert {
        key: echo[key] for key in ("url", "mcp_tool", "token_env", "tenants", "timeout_seconds", "max_output_bytes")
    } == {
        "url": mcp_url,
        "mcp_tool": "echo",
        "token_env": "MCP_DISCOVERY_KEY",
        "tenants": ["local"],
        "timeout_seconds": 300,
        "max_output_bytes": 1048576,
    }
    for binding in bindings:
        ToolBindingConfig.model_validate(binding)


def test_it_fails_on_a_missing_tool(mcp_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # given
    monkeypatch.setenv("MCP_DISCOVERY_KEY", MCP_TOKEN)

    # when / then
    with pytest.raises(CommandError, match="no tool named nosuch"):
        discover(mcp_url, "echo,nosuch")


def test_it_fails_without_the_token_variable(mcp_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # given
    monkeypatch.delenv("MCP_DISCOVERY_KEY", raising=False)

    # when / then
    with pytest.raises(CommandError, match="MCP_DISCOVERY_KEY is not set"):
        discover(mcp_url, "echo")


def test_it_fails_when_discovery_outlasts_its_deadline(zoo_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # given: a server that never answers initialize; the 30 s deadline shortened
    monkeypatch.setattr(mcp_tools, "DISCOVERY_SECONDS", 0.5)
    monkeypatch.setenv("MCP_DISCOVERY_KEY", MCP_TOKEN)

    # when / then
    with pytest.raises(CommandError, match="longer than 0.5 s"):
        discover(zoo_url + "/stall", "echo")
