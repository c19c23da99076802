"""REST tool templates in the host config: what startup refuses, naming the field, and how a
template is filled."""

from __future__ import annotations

import json
from typing import Any

import pytest

from foundation.hostconfig import ConfigError, HostConfig, parse_host_config
from foundation.rest_templates import RestTemplate, fill_request

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "count": {"type": "integer"}},
}
REST_TOOL: dict[str, Any] = {
    "name": "get_order",
    "description": "Read an order.",
    "input_schema": SCHEMA,
    "transport": "rest",
    "url": "https://orders.example.com/v1/orders/{{order}}?expand={{count}}",
    "tenants": ["local"],
}


def _parse(**tool: Any) -> HostConfig:
    config = {
        "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "local"}],
        "harnesses": {"pi": {"command": ["node", "runners/pi/dist/main.js"]}},
        "tools": [{**REST_TOOL, **tool}],
    }
    return parse_host_config(json.dumps(config).encode())


def test_a_rest_tool_with_every_template_loads() -> None:
    # when
    config = _parse(
        method="POST",
        query={"limit": "{{count}}"},
        headers={"X-Order": "{{order}}", "Content-Type": "application/merge-patch+json"},
        body={"order": "{{order}}", "count": "{{count}}", "note": "about {{order}}"},
        token_env="ORDERS_KEY",
    )

    # then
    template = config.tools[0].rest_template()
    assert template == RestTemplate(
        method="POST",
        url="https://orders.example.com/v1/orders/{{order}}?expand={{count}}",
        query=(("limit", "{{count}}"),),
        headers=(("X-Order", "{{order}}"), ("Content-Type", "application/merge-patch+json")),
        body={"order": "{{order}}", "count": "{{count}}", "note": "about {{order}}"},
    )


def test_the_method_defaults_to_get() -> None:
    template = _parse().tools[0].rest_template()
    assert template is not None and template.method == "GET"


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        pytest.param(
            {"url": "https://orders.example.com/{{nope}}"},
            "tools[0].url: placeholder {{nope}} names no property of input_schema",
            id="unknown_placeholder_case",
        ),
        pytest.param(
            {"url": "https://{{order}}.example.com/v1"},
            "tools[0].url: placeholders are allowed only in the path and query values, not the scheme, host or port",
            id="placeholder_in_host_case",
        ),
        pytest.param(
            {"url": "https://orders.example.com/v1?{{order}}=1"},
            "tools[0].url: placeholders are not allowed in query parameter names",
            id="placeholder_in_query_name_case",
        ),
        pytest.param(
            {"url": "https://orders.example.com/{{ order }}"},
            "tools[0].url: has a malformed placeholder",
            id="malformed_placeholder_case",
        ),
        pytest.param(
            {"headers": {"Authorization": "Bearer {{order}}"}},
            "tools[0].headers: Authorization is not allowed: the bearer token comes from token_env",
            id="authorization_header_case",
        ),
        pytest.param(
            {"headers": {"host": "evil.example.com"}},
            "tools[0].headers: host is not allowed: Brain sets it",
            id="host_header_case",
        ),
        pytest.param(
            {"headers": {"X Bad": "1"}}, "tools[0].headers: 'X Bad' is not a valid header name", id="header_name_case"
        ),
        pytest.param(
            {"query": {"{{order}}": "1"}},
            "tools[0].query: parameter names must be non-empty and without placeholders",
            id="query_name_case",
        ),
        pytest.param(
            {"method": "POST", "body": {"{{order}}": 1}},
            "tools[0].body: placeholders are not allowed in object keys",
            id="body_key_case",
        ),
        pytest.param(
            {"method": "POST", "body": ["{{missing}}"]},
            "tools[0].body: placeholder {{missing}} names no property of input_schema",
            id="body_placeholder_case",
        ),
        pytest.param({"method": "TRACE"}, "tools[0].method: must be one of GET, POST", id="bad_method_case"),
        pytest.param({"body": {"a": 1}}, "tools[0].body: is not allowed with GET", id="get_with_body_case"),
        pytest.param(
            {"inspect_session": True},
            "tools[0].inspect_session: cannot be combined with transport rest",
            id="inspect_session_case",
        ),
        pytest.param(
            {"transport": "http", "url": "https://orders.example.com/x", "method": "POST"},
            "tools[0].method: is only for transport rest",
            id="method_on_http_case",
        ),
        pytest.param(
            {"input_schema": {"type": "object"}},
            "tools[0].url: placeholder {{order}} names no property of input_schema",
            id="schema_without_properties_case",
        ),
    ],
)
def test_startup_refuses_a_bad_rest_template_naming_the_field(tool: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(**tool)
    assert str(caught.value).startswith("tool 'get_order': " + message), str(caught.value)


def test_fill_keeps_literal_text_and_encodes_only_the_arguments() -> None:
    # given
    template = RestTemplate(method="GET", url="https://h.example.com/a%20b/{{order}}.json?q=x%2By&o={{order}}")

    # when
    filled = fill_request(template, {"order": "1 2#3"})

    # then
    assert filled.url == "https://h.example.com/a%20b/1%202%233.json?q=x%2By&o=1%202%233"
    assert filled.body is None and filled.headers == {}
