"""Provider bindings in-process: check_bindings at create, SessionBindings at call time, the
registry that installs providers from the setting's shape. The servers' view is in
test_providers.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import BrainError, Forbidden, InvalidRequest, Unsupported
from tests.support.providers import ProbeProvider
from tests.tools.conftest import Progress, context
from tools_app.bindings import ProviderBindings, check_bindings
from tools_app.executors import ExecutorHub
from tools_app.invocation import CallCancelled, CallContext, Invocation, Outcome, invoke_tool
from tools_app.providers.base import CredentialUnavailable, ProviderConfigError, ProviderEnvironment
from tools_app.providers.registry import ProviderRegistry, load_providers

PROBE = "tests.support.providers.ProbeProvider"
HUB = ExecutorHub()  # its schema pool compiles the bindings' schemas


def _install(tmp_path: Path, **entries: dict[str, Any]) -> ProviderRegistry:
    spec = entries or {"probe": {"class": PROBE, "options": {"tenants": ["acme"], "marks": str(tmp_path / "marks")}}}
    return load_providers(spec, environment=ProviderEnvironment(tmp_path, {"PATH": "/usr/bin"}))


async def _create(
    providers: ProviderRegistry, bindings: list[Any], *, tenant: str = "acme", tools: tuple[str, ...] = ()
):
    return await check_bindings(bindings, tenant=tenant, tools=list(tools), hub=HUB, providers=providers)


async def test_a_provider_bound_twice_gets_two_aliases_with_their_own_parameters(tmp_path: Path) -> None:
    # given
    providers = _install(tmp_path)

    # when
    checked = await _create(
        providers,
        [
            {"alias": "red", "provider": "probe", "operations": ["echo"], "parameters": {"label": "r"}},
            {"alias": "blue", "provider": "probe", "operations": ["echo", "hang"], "parameters": {"label": "b"}},
        ],
    )

    # then
    assert checked.bindings == [
        {"alias": "red", "provider": "probe", "operations": ["echo"], "parameters": {"label": "r"}},
        {"alias": "blue", "provider": "probe", "operations": ["echo", "hang"], "parameters": {"label": "b"}},
    ]
    assert [d["name"] for d in checked.descriptors] == ["red_echo", "blue_echo", "blue_hang"]
    assert checked.executors == []


async def test_without_operations_a_binding_gets_every_operation_and_saves_them(tmp_path: Path) -> None:
    checked = await _create(_install(tmp_path), [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])
    assert checked.bindings[0]["operations"] == ["echo", "hang", "fail", "shape"]


@pytest.mark.parametrize(
    ("binding", "tenant", "tools", "error", "words"),
    [
        ({"alias": "p", "provider": "nowhere"}, "acme", (), Unsupported, "not installed"),
        ({"alias": "p", "provider": "probe", "parameters": {"label": "x"}}, "globex", (), Forbidden, "not available"),
        ({"alias": "p", "provider": "probe", "parameters": {"label": 5}}, "acme", (), InvalidRequest, "parameters"),
        ({"alias": "p", "provider": "probe"}, "acme", (), InvalidRequest, "'label' is a required property"),
        (
            {"alias": "p", "provider": "probe", "operations": ["nope"], "parameters": {"label": "x"}},
            "acme",
            (),
            InvalidRequest,
            "unknown operation",
        ),
        (
            {"alias": "p", "provider": "probe", "operations": ["echo", "echo"], "parameters": {"label": "x"}},
            "acme",
            (),
            InvalidRequest,
            "twice",
        ),
        (
            {"alias": "p", "provider": "probe", "operations": ["echo"], "parameters": {"label": "x"}},
            "acme",
            ("p_echo",),
            InvalidRequest,
            "collides",
        ),
        (
            {"alias": "p", "provider": "probe", "executor": "e" * 32, "parameters": {"label": "x"}},
            "acme",
            (),
            InvalidRequest,
            "no executor",
        ),
    ],
    ids=[
        "unknown_provider_case",
        "other_tenant_case",
        "bad_parameters_case",
        "missing_parameters_case",
        "unknown_operation_case",
        "repeated_operation_case",
        "collision_case",
        "mixed_kinds_case",
    ],
)
async def test_create_refuses_a_bad_provider_binding(
    tmp_path: Path, binding: dict[str, Any], tenant: str, tools: tuple[str, ...], error: type[BrainError], words: str
) -> None:
    with pytest.raises(error) as refused:
        await _create(_install(tmp_path), [binding], tenant=tenant, tools=tools)
    assert type(refused.value) is error
    assert words in refused.value.message


async def test_the_same_alias_twice_is_refused(tmp_path: Path) -> None:
    # given
    providers = _install(tmp_path)
    binding = {"alias": "p", "provider": "probe", "operations": ["echo"], "parameters": {"label": "x"}}

    # when / then
    with pytest.raises(InvalidRequest, match="used twice"):
        await _create(providers, [binding, dict(binding)])


class _Session:
    """A session's provider bindings alone on the call path."""

    def __init__(self, bindings: ProviderBindings) -> None:
        self.bindings = bindings

    async def invoke(self, context: CallContext, name: str, arguments: object) -> Invocation:
        return await invoke_tool(context, name, arguments, kinds=(self.bindings,))


def _session(providers: ProviderRegistry, checked: Any, **options: Any) -> _Session:
    return _Session(
        ProviderBindings(checked.bindings, providers, schemas=HUB.schemas, descriptors=checked.descriptors, **options)
    )


async def test_a_call_reaches_the_provider_with_the_trusted_identity_parameters_and_credential(tmp_path: Path) -> None:
    # given
    providers = _install(tmp_path)
    checked = await _create(
        providers, [{"alias": "red", "provider": "probe", "operations": ["echo"], "parameters": {"label": "r"}}]
    )
    asked: list[tuple[str, str, str]] = []

    async def credentials(tenant: str, session_id: str, alias: str) -> dict[str, str]:
        asked.append((tenant, session_id, alias))
        return {"token": "private"}

    bindings = _session(providers, checked, credentials=credentials)
    progress = Progress()

    # when
    invocation = await bindings.invoke(context(progress=progress), "red_echo", {"text": "hi"})

    # then
    assert invocation.outcome is Outcome.OK
    assert invocation.result["structured_content"] == {
        "identity": {
            "tenant": "acme",
            "session_id": "5" * 32,
            "call_id": "c" * 32,
            "alias": "red",
            "operation": "echo",
        },
        "parameters": {"label": "r"},
        "arguments": {"text": "hi"},
        "credential": {"token": "private"},
        "reads_session": False,
    }
    assert asked == [("acme", "5" * 32, "red")]
    assert progress == [{"stage": "echoing"}]


async def test_a_missing_credential_refuses_the_call_before_it_is_sent(tmp_path: Path) -> None:
    providers = _install(tmp_path)
    checked = await _create(providers, [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])

    async def credentials(tenant: str, session_id: str, alias: str) -> None:
        raise CredentialUnavailable("no key for this record")

    invocation = await _session(providers, checked, credentials=credentials).invoke(context(), "p_hang", {})
    assert invocation.outcome is Outcome.ERROR
    assert "unknown_outcome" not in invocation.result
    assert "no key for this record" in invocation.result["content"][0]["text"]
    assert not (tmp_path / "marks").exists()  # hang never started


@pytest.mark.parametrize(
    ("name", "arguments", "outcome", "words"),
    [
        ("p_echo", {"text": 5}, Outcome.ERROR, "invalid arguments for p_echo at text"),
        ("p_fail", {"reached": False}, Outcome.ERROR, "the probe failed"),
        ("p_fail", {"reached": True}, Outcome.UNKNOWN, "remote outcome may be unknown"),
        ("p_shape", {}, Outcome.UNKNOWN, "does not match output_schema"),
    ],
    ids=["bad_arguments_case", "not_reached_case", "reached_case", "output_schema_case"],
)
async def test_provider_failures_map_to_outcomes(
    tmp_path: Path, name: str, arguments: dict[str, Any], outcome: Outcome, words: str
) -> None:
    providers = _install(tmp_path)
    checked = await _create(providers, [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])
    invocation = await _session(providers, checked).invoke(context(), name, arguments)
    assert invocation.outcome is outcome
    assert invocation.result["is_error"] is True
    assert invocation.result.get("unknown_outcome", False) is (outcome is Outcome.UNKNOWN)
    assert words in invocation.result["content"][0]["text"]


async def test_a_provider_past_its_deadline_is_a_timeout_and_sees_the_cancellation(tmp_path: Path) -> None:
    spec = {"probe": {"class": PROBE, "options": {"timeout_seconds": 1, "marks": str(tmp_path / "marks")}}}
    providers = _install(tmp_path, **spec)
    checked = await _create(providers, [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])
    invocation = await _session(providers, checked).invoke(context(), "p_hang", {})
    assert invocation.outcome is Outcome.TIMEOUT
    assert invocation.result["unknown_outcome"] is True
    assert sorted(path.name for path in (tmp_path / "marks").iterdir()) == [
        f"{'c' * 32}.cancelled",
        f"{'c' * 32}.started",
    ]


async def test_cancellation_once_the_provider_runs_is_call_cancelled(tmp_path: Path) -> None:
    providers = _install(tmp_path)
    checked = await _create(providers, [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])
    task = asyncio.create_task(_session(providers, checked).invoke(context(), "p_hang", {}))
    marks = tmp_path / "marks"
    while not marks.exists():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(CallCancelled):
        await task
    assert (marks / f"{'c' * 32}.cancelled").exists()


async def test_a_saved_binding_whose_descriptors_changed_is_refused_before_a_call(tmp_path: Path) -> None:
    # given: a session created against one installation, loaded by a server whose provider changed
    before = _install(tmp_path)
    checked = await _create(before, [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])
    spec = {"probe": {"class": PROBE, "options": {"description": "Changed.", "marks": str(tmp_path / "marks")}}}
    after = _install(tmp_path, **spec)

    # when
    invocation = await _session(after, checked).invoke(context(), "p_echo", {"text": "x"})
    unchanged = await _session(after, checked).invoke(context(), "p_fail", {})

    # then
    assert invocation.outcome is Outcome.ERROR
    assert "unknown_outcome" not in invocation.result
    assert "descriptor changed" in invocation.result["content"][0]["text"]
    assert "the probe failed" in unchanged.result["content"][0]["text"]  # other operations still run


async def test_a_saved_binding_of_a_provider_no_longer_installed_is_refused(tmp_path: Path) -> None:
    checked = await _create(_install(tmp_path), [{"alias": "p", "provider": "probe", "parameters": {"label": "x"}}])
    invocation = await _session(ProviderRegistry(), checked).invoke(context(), "p_echo", {"text": "x"})
    assert invocation.outcome is Outcome.ERROR
    assert "not installed" in invocation.result["content"][0]["text"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"p": {"class": "tests.support.nowhere.Provider"}}, "BRAIN_TOOL_PROVIDERS.p.class: cannot import"),
        ({"p": {"class": "tests.support.providers.NotAProvider"}}, "is not a ToolProvider class"),
        ({"p": {"class": "tools_app.providers.base.ToolProvider"}}, "does not implement"),
        ({"p": {"class": PROBE, "options": {"colour": "red"}}}, "BRAIN_TOOL_PROVIDERS.p.options: colour"),
        ({"p": {"class": PROBE, "options": {"timeout_seconds": 0}}}, "timeout_seconds"),
        ({"p": {"class": PROBE, "extra": 1}}, "must be {class, options}"),
        ({"bad name": {"class": PROBE}}, "provider name"),
        ([], "must map provider names"),
        (
            {
                "p": {
                    "class": "tools_app.providers.http.HttpProvider",
                    "options": {"url": "http://x", "token_env": "NOPE"},
                }
            },
            "operations",
        ),
        (
            {
                "p": {
                    "class": "tools_app.providers.http.HttpProvider",
                    "options": {
                        "url": "http://127.0.0.1:1/x",
                        "token_env": "NOPE_TOKEN",
                        "operations": [{"name": "a", "description": "a", "input_schema": {"type": "object"}}],
                    },
                }
            },
            "environment variable NOPE_TOKEN is not set",
        ),
        (
            {"p": {"class": "tools_app.providers.mcp.McpProvider", "options": {"url": "ftp://x", "tools": ["a"]}}},
            "url",
        ),
        (
            {"p": {"class": "tools_app.providers.mcp.McpStdioProvider", "options": {"command": ["x"], "tools": []}}},
            "tools",
        ),
        (
            {
                "p": {
                    "class": "tools_app.providers.mcp.McpStdioProvider",
                    "options": {"command": ["x"], "tools": ["a"], "env": ["NOT_SET_HERE"]},
                }
            },
            "NOT_SET_HERE is not set",
        ),
        (
            {"p": {"class": "tools_app.providers.sessions.SessionReadsProvider", "options": {"max_events": 0}}},
            "max_events",
        ),
    ],
    ids=[
        "missing_module_case",
        "not_a_provider_case",
        "abstract_case",
        "unknown_option_case",
        "bad_timeout_case",
        "unknown_key_case",
        "bad_name_case",
        "not_a_mapping_case",
        "http_without_operations_case",
        "unset_token_case",
        "mcp_bad_url_case",
        "stdio_no_tools_case",
        "stdio_unset_env_case",
        "session_reads_bad_option_case",
    ],
)
def test_a_provider_that_cannot_be_installed_is_a_config_error(tmp_path: Path, spec: Any, words: str) -> None:
    with pytest.raises(ProviderConfigError) as refused:
        load_providers(spec, environment=ProviderEnvironment(tmp_path, {"PATH": "/usr/bin"}))
    assert words in str(refused.value)


def test_a_secret_never_appears_in_a_providers_repr(tmp_path: Path) -> None:
    spec = {
        "records": {
            "class": "tools_app.providers.http.HttpProvider",
            "options": {
                "url": "http://127.0.0.1:1/x",
                "token_env": "RECORDS_TOKEN",
                "operations": [{"name": "a", "description": "a", "input_schema": {"type": "object"}}],
            },
        }
    }
    environment = ProviderEnvironment(tmp_path, {"RECORDS_TOKEN": "very-secret-value-0123456789"})
    providers = load_providers(spec, environment=environment)
    assert "very-secret" not in repr(providers["records"]) + repr(environment) + repr(providers)


async def test_closing_the_registry_closes_every_provider(tmp_path: Path) -> None:
    providers = _install(tmp_path)
    probe = providers["probe"]
    assert isinstance(probe, ProbeProvider)
    await providers.aclose()
    assert probe.closed is True
    assert len(providers) == 0
