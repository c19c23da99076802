"""Startup refuses a built-in tool it cannot serve: a config tool with `transport: provider` naming
a provider that is not installed, an operation the provider does not serve, or parameters it
refuses. `resolve_provider_tools` names the tool and the field at fault; `runbrain` exits
non-zero with that message before it listens, and `check_brain_config` reports the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from foundation.hostconfig import HostConfig
from tests.fixtures.server import make_server
from tests.support.startup import serve_and_check
from tests.tools.test_builtin_tools import PROVIDERS
from tools_app.provider_tools import resolve_provider_tools
from tools_app.providers.base import ProviderConfigError, ProviderEnvironment
from tools_app.providers.registry import ProviderRegistry, load_providers

COMMAND_SECONDS = 60


def provider_tool(name: str, provider: str, operation: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "transport": "provider",
        "provider": provider,
        "operation": operation,
        "tenants": ["acme"],
        **extra,
    }


GOOD_TOOL = provider_tool("memory_store", "memory", "memory_store")
BAD_TOOLS = [
    pytest.param(
        provider_tool("team_notes", "notes", "memory_recall"),
        "tools[1].provider: tool provider 'notes' is not installed (BRAIN_TOOL_PROVIDERS) (tool 'team_notes')",
        id="provider_not_installed_case",
    ),
    pytest.param(
        provider_tool("memory_shred", "memory", "memory_shred"),
        "tools[1].operation: tool provider 'memory' refused it: unknown operation 'memory_shred' "
        "(this provider serves: memory_store, memory_recall, memory_forget) (tool 'memory_shred')",
        id="unknown_operation_case",
    ),
    pytest.param(
        provider_tool("task_board", "tasks", "manage_task"),
        "tools[1].operation: tool provider 'tasks' refused it: unknown operation 'manage_task'",
        id="misspelt_operation_case",
    ),
    pytest.param(
        provider_tool("memory_recall", "memory", "memory_recall", parameters={"space": "team notes"}),
        "tools[1].parameters: tool provider 'memory' refused them: parameters.space: must be 1-64 of",
        id="bad_space_case",
    ),
    pytest.param(
        provider_tool("memory_recall", "memory", "memory_recall", parameters={"bucket": "x"}),
        "tools[1].parameters: tool provider 'memory' refused them: parameters: memory bindings take only {space}",
        id="unknown_parameter_case",
    ),
    pytest.param(
        provider_tool("show_structured_output", "structured", "show_structured_output", parameters={"theme": "x"}),
        "tools[1].parameters: tool provider 'structured' refused them: "
        "parameters: structured output bindings take no parameters (tool 'show_structured_output')",
        id="structured_parameters_case",
    ),
]


@pytest.fixture
def providers(tmp_path: Path) -> ProviderRegistry:
    return load_providers(PROVIDERS, environment=ProviderEnvironment(tmp_path, {"PATH": "/usr/bin"}))


def host_config(tmp_path: Path, *tools: dict[str, Any]) -> HostConfig:
    return HostConfig.model_validate(make_server(tmp_path, tools=list(tools)).config)


async def test_a_good_provider_tool_gets_its_providers_descriptor(tmp_path: Path, providers: ProviderRegistry) -> None:
    # when
    resolved = await resolve_provider_tools(host_config(tmp_path, GOOD_TOOL), providers)
    # then
    (tool,) = resolved.tools
    assert tool.description.startswith("Store one fact to remember in later sessions")
    assert tool.input_schema is not None and tool.input_schema["required"] == ["content"]


@pytest.mark.parametrize(("tool", "message"), BAD_TOOLS)
async def test_a_tool_the_provider_cannot_serve_is_refused_naming_the_tool_and_field(
    tmp_path: Path, providers: ProviderRegistry, tool: dict[str, Any], message: str
) -> None:
    # when
    with pytest.raises(ProviderConfigError) as refused:
        await resolve_provider_tools(host_config(tmp_path, GOOD_TOOL, tool), providers)
    # then
    assert str(refused.value).startswith(message)
    assert str(refused.value).endswith(f"(tool {tool['name']!r})")


STARTUP_CASES = ("provider_not_installed_case", "unknown_operation_case")


@pytest.mark.parametrize(("tool", "message"), [case for case in BAD_TOOLS if case.id in STARTUP_CASES])
def test_runbrain_exits_and_check_brain_config_fails_naming_the_tool(
    tmp_path: Path, tool: dict[str, Any], message: str
) -> None:
    # given
    server = make_server(tmp_path, tools=[GOOD_TOOL, tool])
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    served, checked = serve_and_check(server)

    # then
    assert served.returncode != 0
    assert f"invalid tool provider: {message}" in served.stderr
    assert "brain listening" not in served.stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health/ready", timeout=2)
    assert checked.returncode != 0
    assert f"invalid tool provider: {message}" in checked.stderr
    assert "is valid" not in checked.stdout
