"""Tool bindings in the admin: validated like the host config, served to new sessions at once."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from fleet_app.fleet import SoloFleet
from foundation.hostconfig import ToolBindingConfig
from tests.support.admin_client import BrainAdminClient
from tools_app.admin import ToolBindingForm
from tools_app.db import aload_admin_bindings, mirror_config_bindings
from tools_app.invocation import CallContext
from tools_app.models import ToolBinding
from tools_app.registry import ToolRegistry
from tools_app.tool_path import assemble_tool_path
from tools_app.transports.http_sse import HttpSseTransport, make_client

VALID: dict[str, Any] = {
    "name": "lookup",
    "description": "Look something up.",
    "input_schema": json.dumps({"type": "object", "properties": {"q": {"type": "string"}}}),
    "output_schema": "null",
    "url": "http://127.0.0.1:9/tools/lookup",
    "tenants": json.dumps(["acme"]),
    "token_env": "",
    "transport": "",
    "mcp_tool": "",
    "timeout_seconds": "300",
    "max_output_bytes": "1048576",
}


def form(**changes: Any) -> ToolBindingForm:
    return ToolBindingForm(data={**VALID, **changes})


@pytest.mark.django_db
def test_a_valid_binding_passes_the_admin_form() -> None:
    assert form().is_valid(), form().errors


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        pytest.param({"name": "9lives"}, "name", "must match", id="name_pattern_case"),
        pytest.param({"name": "a" * 65}, "name", "", id="name_length_case"),
        pytest.param(
            {"input_schema": json.dumps({"type": "nope"})},
            "input_schema",
            "not a valid JSON Schema",
            id="schema_compile_case",
        ),
        pytest.param(
            {"input_schema": json.dumps({"$ref": "https://example.com/s.json"})},
            "input_schema",
            "only references inside the schema (#...) are allowed",
            id="external_ref_case",
        ),
        pytest.param(
            {"output_schema": json.dumps({"minimum": "x"})},
            "output_schema",
            "not a valid JSON Schema",
            id="output_schema_case",
        ),
        pytest.param({"input_schema": json.dumps("text")}, "input_schema", "", id="schema_not_object_case"),
        pytest.param({"url": "http://user:pw@127.0.0.1/x"}, "url", "credentials", id="url_credentials_case"),
        pytest.param({"url": "http://127.0.0.1/x#frag"}, "url", "fragment", id="url_fragment_case"),
        pytest.param({"url": "ftp://127.0.0.1/x"}, "url", "", id="url_scheme_case"),
        pytest.param({"tenants": "[]"}, "tenants", "", id="no_tenants_case"),
        pytest.param({"timeout_seconds": "0"}, "timeout_seconds", "", id="timeout_low_case"),
        pytest.param({"timeout_seconds": "86401"}, "timeout_seconds", "", id="timeout_high_case"),
        pytest.param({"max_output_bytes": str((2 << 20) + 1)}, "max_output_bytes", "", id="output_bytes_case"),
        pytest.param(
            {"inspect_session": "on", "mcp_tool": "search"}, "inspect_session", "mcp_tool", id="inspect_with_mcp_case"
        ),
        pytest.param({"transport": "grpc"}, "transport", "unknown transport", id="transport_case"),
        pytest.param(
            {"token_env": "SURELY_UNSET_TOOL_TOKEN"},
            "token_env",
            "host config declares",
            id="token_env_undeclared_case",
        ),
    ],
)
def test_the_admin_form_is_as_strict_as_startup(changes: dict[str, Any], field: str, message: str) -> None:
    # when
    candidate = form(**changes)

    # then
    assert not candidate.is_valid()
    assert field in candidate.errors, candidate.errors
    assert message in " ".join(str(error) for error in candidate.errors[field])


def admin_client_of(tools: ToolRegistry, admin_user: Any) -> BrainAdminClient:
    """An admin session whose requests carry the application object, as under runbrain."""
    client = BrainAdminClient(SimpleNamespace(registry=tools, fleet=SoloFleet()))
    client.force_login(admin_user)
    return client


@pytest.mark.django_db(transaction=True)
async def test_an_admin_created_binding_serves_new_sessions_at_once(admin_user: Any) -> None:
    # given: a running registry whose admin cache is warm
    tools = ToolRegistry([], admin_loader=aload_admin_bindings)
    client = await sync_to_async(admin_client_of)(tools, admin_user)
    assert await tools.adescriptors_for("acme", ["lookup"]) is None

    # when
    response = await client.post("/admin/tools_app/toolbinding/add/", data=VALID)

    # then
    assert response.status_code == 302, response.content[:2000]
    descriptors = await tools.adescriptors_for("acme", ["lookup"])
    assert descriptors == [
        {
            "name": "lookup",
            "description": "Look something up.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    assert await tools.acatalog_for("globex") == []


@pytest.mark.django_db(transaction=True)
async def test_deleting_an_admin_binding_removes_it_from_new_sessions(admin_user: Any) -> None:
    # given
    tools = ToolRegistry([], admin_loader=aload_admin_bindings)
    client = await sync_to_async(admin_client_of)(tools, admin_user)
    await client.post("/admin/tools_app/toolbinding/add/", data=VALID)
    row = await ToolBinding.objects.aget(name="lookup")
    assert await tools.adescriptors_for("acme", ["lookup"]) is not None

    # when
    await client.post(f"/admin/tools_app/toolbinding/{row.pk}/delete/", data={"post": "yes"})

    # then
    assert await tools.adescriptors_for("acme", ["lookup"]) is None


@pytest.mark.django_db
def test_config_bindings_are_mirrored_read_only(admin_client: Client) -> None:
    # given
    config = ToolBindingConfig.model_validate(
        {
            **{k: v for k, v in VALID.items() if k in ("name", "description", "url")},
            "input_schema": {"type": "object"},
            "tenants": ["acme"],
        }
    )
    mirror_config_bindings([config])
    row = ToolBinding.objects.get(name="lookup")

    # when
    change = admin_client.post(
        f"/admin/tools_app/toolbinding/{row.pk}/change/", data={**VALID, "description": "edited"}
    )
    delete = admin_client.post(f"/admin/tools_app/toolbinding/{row.pk}/delete/", data={"post": "yes"})

    # then
    assert row.from_config is True
    assert change.status_code == 403 and delete.status_code == 403
    assert ToolBinding.objects.get(name="lookup").description == "Look something up."


@pytest.mark.django_db
def test_a_token_env_the_config_does_not_declare_gets_one_answer_whether_or_not_it_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: one variable that exists in the server's environment and one that does not
    monkeypatch.setenv("SOME_SERVER_SECRET", "s3cret-value")
    monkeypatch.delenv("SURELY_UNSET_TOOL_TOKEN", raising=False)

    # when
    existing, missing = form(token_env="SOME_SERVER_SECRET"), form(token_env="SURELY_UNSET_TOOL_TOKEN")

    # then: the same error, so the form is no oracle for the environment
    assert not existing.is_valid() and not missing.is_valid()
    assert existing.errors["token_env"] == missing.errors["token_env"]


@pytest.mark.django_db
def test_a_token_env_a_config_tool_declares_is_accepted_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    # given
    declared = ToolBindingConfig.model_validate(
        {**json_fields(VALID), "name": "config_tool", "token_env": "DECLARED_TOOL_TOKEN"}
    )
    mirror_config_bindings([declared])
    monkeypatch.setenv("DECLARED_TOOL_TOKEN", "tool-token-0123456789")

    # when / then
    candidate = form(token_env="DECLARED_TOOL_TOKEN")
    assert candidate.is_valid(), candidate.errors


def json_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The form's fields as config values: JSON text decoded, blanks and form-only fields dropped."""
    decoded = {key: json.loads(data[key]) for key in ("input_schema", "tenants")}
    return {
        "name": data["name"],
        "description": data["description"],
        "url": data["url"],
        **decoded,
    }


async def test_an_admin_binding_with_an_undeclared_token_env_is_refused_at_call_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: an admin binding (perhaps written before this check) naming a server secret
    monkeypatch.setenv("SOME_SERVER_SECRET", "s3cret-value")
    sent: list[httpx.Request] = []
    admin_binding = ToolBindingConfig.model_validate({**json_fields(VALID), "token_env": "SOME_SERVER_SECRET"})

    async def loader() -> list[ToolBindingConfig]:
        return [admin_binding]

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"content": [{"type": "text", "text": "ok"}]})

    tools = assemble_tool_path(
        ToolRegistry([], admin_loader=loader),
        transports={"http": HttpSseTransport(make_client(httpx.MockTransport(reply)))},
    )
    context = CallContext(tenant="acme", session_id="5" * 32, call_id="c" * 32, tools=("lookup",), progress=print)

    # when
    result = await tools.invoke(context, "lookup", {"q": "x"})
    await tools.aclose()

    # then: refused before dispatch, and the secret never left
    assert result["is_error"] is True
    assert sent == []


@pytest.mark.django_db
def test_a_declared_token_env_cannot_be_paired_with_a_url_of_another_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: the config sends DECLARED_TOOL_TOKEN to 127.0.0.1:9 only
    declared = ToolBindingConfig.model_validate(
        {**json_fields(VALID), "name": "config_tool", "token_env": "DECLARED_TOOL_TOKEN"}
    )
    mirror_config_bindings([declared])
    monkeypatch.setenv("DECLARED_TOOL_TOKEN", "tool-token-0123456789")

    # when: an admin binding points the same variable at a server of its own choosing
    elsewhere = form(token_env="DECLARED_TOOL_TOKEN", url="http://127.0.0.1:8/collect")
    other_scheme = form(token_env="DECLARED_TOOL_TOKEN", url="https://127.0.0.1:9/tools/lookup")
    same_origin = form(token_env="DECLARED_TOOL_TOKEN", url="http://127.0.0.1:9/other/path")

    # then
    assert elsewhere.errors["token_env"] == [
        "DECLARED_TOOL_TOKEN may only be sent to the origins of the config tools declaring it"
    ]
    assert other_scheme.errors["token_env"] == elsewhere.errors["token_env"]
    assert same_origin.is_valid(), same_origin.errors


async def test_an_admin_binding_sending_a_declared_token_to_another_origin_is_refused_at_call_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: a config tool declares the variable for 127.0.0.1:9; an admin row (written before this
    # check, or edited in the database) sends it to 127.0.0.1:8
    monkeypatch.setenv("DECLARED_TOOL_TOKEN", "tool-token-0123456789")
    config_tool = ToolBindingConfig.model_validate(
        {**json_fields(VALID), "name": "config_tool", "token_env": "DECLARED_TOOL_TOKEN"}
    )
    admin_binding = ToolBindingConfig.model_validate(
        {**json_fields(VALID), "url": "http://127.0.0.1:8/collect", "token_env": "DECLARED_TOOL_TOKEN"}
    )
    sent: list[httpx.Request] = []

    async def loader() -> list[ToolBindingConfig]:
        return [admin_binding]

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"content": [{"type": "text", "text": "ok"}]})

    tools = assemble_tool_path(
        ToolRegistry([config_tool], tool_tokens={"config_tool": "tool-token-0123456789"}, admin_loader=loader),
        transports={"http": HttpSseTransport(make_client(httpx.MockTransport(reply)))},
    )
    context = CallContext(tenant="acme", session_id="5" * 32, call_id="c" * 32, tools=("lookup",), progress=print)

    # when
    result = await tools.invoke(context, "lookup", {"q": "x"})
    await tools.aclose()

    # then: refused before dispatch; the token never left
    assert result["is_error"] is True
    assert sent == []
