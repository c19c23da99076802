"""brain.json: defaults, ranges, strict decoding, and environment checks (reference-configuration)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from foundation.hostconfig import (
    MAX_CONFIG_BYTES,
    ConfigError,
    HostConfig,
    load_host_config,
    parse_host_config,
    resolve_secrets,
)

TOKEN = "t" * 24  # the shortest token value the spec accepts
OTHER_TOKEN = "u" * 32
MINIMAL: dict[str, Any] = {
    "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "local"}],
    "harnesses": {"pi": {"command": ["node", "runners/pi/dist/main.js"]}},
}
TOOL: dict[str, Any] = {
    "name": "echo",
    "description": "Echo text",
    "input_schema": {"type": "object"},
    "url": "http://127.0.0.1:9000/echo",
    "tenants": ["local"],
}


def _config(**overrides: Any) -> dict[str, Any]:
    value = copy.deepcopy(MINIMAL)
    value.update(copy.deepcopy(overrides))
    return value


def _parse(value: dict[str, Any]) -> HostConfig:
    return parse_host_config(json.dumps(value).encode())


def _error(value: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        _parse(value)
    return str(caught.value)


def _with_tool(**fields: Any) -> dict[str, Any]:
    return _config(tools=[{**TOOL, **fields}])


def _with_harness(**fields: Any) -> dict[str, Any]:
    return _config(harnesses={"pi": {"command": ["node"], **fields}})


def _with_persistence(**fields: Any) -> dict[str, Any]:
    return _config(persistence=fields)


# --- defaults -------------------------------------------------------------------------------


def test_the_minimal_config_gets_every_documented_default() -> None:
    # when
    config = _parse(_config())

    # then
    assert config.listen == "127.0.0.1:8080"
    assert config.public_url == "http://127.0.0.1:8080"
    assert config.data_dir == ".brain"
    assert config.providers == {}
    assert config.tools == []
    assert config.persistence is None
    assert config.credential_keys is None
    assert config.listen_host == "127.0.0.1"
    assert config.listen_port == 8080


def test_limits_default_to_the_documented_values() -> None:
    # when
    limits = _parse(_config()).limits

    # then
    assert limits.model_dump() == {
        "active": 16,
        "loaded": 1024,
        "queue": 16,
        "input_bytes": 65536,
        "session_bytes": 1073741824,
        "subscribers": 128,
        "subscriber_events": 128,
        "subscriber_bytes": 2097152,
        "tenant_executors": 1024,
        "unbound_executor_seconds": 600,
        "receiving_per_address": 32,
        "tenant_forwarded_streams": 256,
    }


def test_omitted_limits_keep_their_defaults_when_others_are_overridden() -> None:
    # when
    limits = _parse(_config(limits={"queue": 4})).limits

    # then
    assert (limits.queue, limits.active, limits.loaded) == (4, 16, 1024)


def test_token_grant_defaults_are_an_unscoped_unprivileged_token() -> None:
    # when
    grant = _parse(_config()).tokens[0]

    # then
    assert (grant.session, grant.manage, grant.read_only) == ("", False, False)


def test_harness_defaults_and_active_turns_default_to_max_shared() -> None:
    # when
    harness = _parse(_with_harness(max_shared=5)).harnesses["pi"]

    # then
    assert (harness.max_shared, harness.max_active_turns, harness.active_turns) == (5, None, 5)
    assert (harness.max_hosts, harness.max_starting) == (16, 4)


def test_harness_max_shared_defaults_to_8() -> None:
    # when
    harness = _parse(_config()).harnesses["pi"]

    # then
    assert (harness.max_shared, harness.active_turns) == (8, 8)


def test_provider_defaults_are_empty_overrides() -> None:
    # when
    provider = _parse(_config(providers={"openai": {"api_key_env": "OPENAI_API_KEY"}})).providers["openai"]

    # then
    assert (provider.api_key_env, provider.base_url, provider.api) == ("OPENAI_API_KEY", "", "")


def test_tool_binding_defaults() -> None:
    # when
    binding = _parse(_with_tool()).tools[0]

    # then
    assert binding.token_env == ""
    assert binding.mcp_tool == ""
    assert binding.effective_transport == "http"
    assert binding.timeout_seconds == 300
    assert binding.max_output_bytes == 1048576
    assert binding.inspect_session is False
    assert binding.output_schema is None
    assert binding.descriptor() == {"name": "echo", "description": "Echo text", "input_schema": {"type": "object"}}


def test_a_tool_with_mcp_tool_defaults_to_the_mcp_transport() -> None:
    # when
    binding = _parse(_with_tool(mcp_tool="remote_echo")).tools[0]

    # then
    assert binding.effective_transport == "mcp"


def test_persistence_defaults() -> None:
    # when
    persistence = _parse(_with_persistence(provider="filesystem", directory="/tmp/brain")).persistence

    # then
    assert persistence is not None
    assert (persistence.interval_seconds, persistence.queue, persistence.prefix) == (5, 128, "")


def test_the_documented_minimal_example_parses() -> None:
    # given the example from reference-configuration
    raw = b"""{
      "listen": "127.0.0.1:8080",
      "public_url": "http://127.0.0.1:8080",
      "data_dir": ".brain",
      "tokens": [{ "token_env": "BRAIN_API_KEY", "tenant": "local", "manage": true }],
      "harnesses": {"pi": { "command": ["node", "runners/pi/dist/main.js"] }},
      "providers": {"openai": { "api_key_env": "OPENAI_API_KEY" }},
      "tools": []
    }"""

    # when
    config = parse_host_config(raw)

    # then
    assert config.tokens[0].manage is True
    assert config.harnesses["pi"].command == ["node", "runners/pi/dist/main.js"]
    assert list(config.providers) == ["openai"]


# --- ranges ---------------------------------------------------------------------------------

LIMIT_BOUNDS = [
    pytest.param("active", 1, id="active_minimum_case"),
    pytest.param("queue", 1, id="queue_minimum_case"),
    pytest.param("queue", 1024, id="queue_maximum_case"),
    pytest.param("input_bytes", 1, id="input_bytes_minimum_case"),
    pytest.param("input_bytes", 1 << 20, id="input_bytes_maximum_case"),
    pytest.param("session_bytes", 16 << 20, id="session_bytes_minimum_case"),
    pytest.param("subscribers", 1, id="subscribers_minimum_case"),
    pytest.param("subscriber_events", 1, id="subscriber_events_minimum_case"),
    pytest.param("subscriber_bytes", 4096, id="subscriber_bytes_minimum_case"),
    pytest.param("tenant_executors", 4096, id="tenant_executors_maximum_case"),
    pytest.param("unbound_executor_seconds", 1, id="unbound_executor_seconds_minimum_case"),
    pytest.param("receiving_per_address", 1, id="receiving_per_address_minimum_case"),
    pytest.param("tenant_forwarded_streams", 1, id="tenant_forwarded_streams_minimum_case"),
    pytest.param("tenant_forwarded_streams", 1024, id="tenant_forwarded_streams_maximum_case"),
]


@pytest.mark.parametrize(("field", "value"), LIMIT_BOUNDS)
def test_a_limit_at_the_edge_of_its_range_is_accepted(field: str, value: int) -> None:
    # when
    limits = _parse(_config(limits={field: value})).limits

    # then
    assert getattr(limits, field) == value


LIMIT_OUT_OF_RANGE = [
    pytest.param("active", 0, "limits.active: Input should be greater than or equal to 1", id="active_zero_case"),
    pytest.param("loaded", 15, "limits.loaded: must be at least active", id="loaded_below_active_case"),
    pytest.param("queue", 0, "limits.queue: Input should be greater than or equal to 1", id="queue_zero_case"),
    pytest.param("queue", 1025, "limits.queue: Input should be less than or equal to 1024", id="queue_over_case"),
    pytest.param(
        "input_bytes", 0, "limits.input_bytes: Input should be greater than or equal to 1", id="input_bytes_zero_case"
    ),
    pytest.param(
        "input_bytes",
        (1 << 20) + 1,
        "limits.input_bytes: Input should be less than or equal to 1048576",
        id="input_bytes_over_case",
    ),
    pytest.param(
        "session_bytes",
        (16 << 20) - 1,
        "limits.session_bytes: Input should be greater than or equal to 16777216",
        id="session_bytes_under_case",
    ),
    pytest.param(
        "subscribers", 0, "limits.subscribers: Input should be greater than or equal to 1", id="subscribers_zero_case"
    ),
    pytest.param(
        "subscriber_events",
        0,
        "limits.subscriber_events: Input should be greater than or equal to 1",
        id="subscriber_events_zero_case",
    ),
    pytest.param(
        "subscriber_bytes",
        4095,
        "limits.subscriber_bytes: Input should be greater than or equal to 4096",
        id="subscriber_bytes_under_case",
    ),
    pytest.param(
        "tenant_executors",
        4097,
        "limits.tenant_executors: Input should be less than or equal to 4096",
        id="tenant_executors_over_case",
    ),
    pytest.param(
        "unbound_executor_seconds",
        0,
        "limits.unbound_executor_seconds: Input should be greater than or equal to 1",
        id="unbound_executor_seconds_zero_case",
    ),
    pytest.param(
        "receiving_per_address",
        0,
        "limits.receiving_per_address: Input should be greater than or equal to 1",
        id="receiving_per_address_zero_case",
    ),
    pytest.param(
        "tenant_forwarded_streams",
        1025,
        "limits.tenant_forwarded_streams: Input should be less than or equal to 1024",
        id="tenant_forwarded_streams_over_case",
    ),
    pytest.param("queue", "16", "limits.queue: Input should be a valid integer", id="queue_string_case"),
    pytest.param("queue", 16.0, "limits.queue: Input should be a valid integer", id="queue_float_case"),
    pytest.param("queue", True, "limits.queue: Input should be a valid integer", id="queue_boolean_case"),
]


@pytest.mark.parametrize(("field", "value", "message"), LIMIT_OUT_OF_RANGE)
def test_a_limit_out_of_range_is_rejected_naming_the_field(field: str, value: Any, message: str) -> None:
    # when
    error = _error(_config(limits={field: value}))

    # then
    assert error == message


def test_loaded_equal_to_active_is_accepted() -> None:
    # when
    limits = _parse(_config(limits={"active": 64, "loaded": 64})).limits

    # then
    assert (limits.active, limits.loaded) == (64, 64)


HARNESS_VALID = [
    pytest.param({"max_shared": 1}, id="max_shared_minimum_case"),
    pytest.param({"max_shared": 1024}, id="max_shared_maximum_case"),
    pytest.param({"max_shared": 4, "max_active_turns": 4}, id="active_turns_equal_to_shared_case"),
    pytest.param({"max_shared": 4, "max_active_turns": 1}, id="active_turns_minimum_case"),
    pytest.param({"max_hosts": 1, "max_starting": 1}, id="hosts_and_starting_minimum_case"),
]


@pytest.mark.parametrize("fields", HARNESS_VALID)
def test_harness_values_in_range_are_accepted(fields: dict[str, int]) -> None:
    # when
    harness = _parse(_with_harness(**fields)).harnesses["pi"]

    # then
    assert {name: getattr(harness, name) for name in fields} == fields


HARNESS_INVALID = [
    pytest.param(
        {"max_shared": 0},
        "harnesses.pi.max_shared: Input should be greater than or equal to 1",
        id="max_shared_zero_case",
    ),
    pytest.param(
        {"max_shared": 1025},
        "harnesses.pi.max_shared: Input should be less than or equal to 1024",
        id="max_shared_over_case",
    ),
    pytest.param(
        {"max_active_turns": 0},
        "harnesses.pi.max_active_turns: Input should be greater than or equal to 1",
        id="active_turns_zero_case",
    ),
    pytest.param(
        {"max_shared": 4, "max_active_turns": 5},
        "harnesses.pi.max_active_turns: must be between 1 and max_shared",
        id="active_turns_above_shared_case",
    ),
    pytest.param(
        {"max_active_turns": 9},
        "harnesses.pi.max_active_turns: must be between 1 and max_shared",
        id="active_turns_above_default_shared_case",
    ),
    pytest.param(
        {"max_hosts": 0}, "harnesses.pi.max_hosts: Input should be greater than or equal to 1", id="max_hosts_zero_case"
    ),
    pytest.param(
        {"max_starting": 0},
        "harnesses.pi.max_starting: Input should be greater than or equal to 1",
        id="max_starting_zero_case",
    ),
    pytest.param(
        {"command": []},
        "harnesses.pi.command: List should have at least 1 item after validation, not 0",
        id="command_empty_case",
    ),
    pytest.param({"command": [""]}, "harnesses.pi.command: command[0] must be non-empty", id="command_zero_empty_case"),
    pytest.param(
        {"command": ["node", 1]},
        "harnesses.pi.command[1]: Input should be a valid string",
        id="command_argument_not_string_case",
    ),
]


@pytest.mark.parametrize(("fields", "message"), HARNESS_INVALID)
def test_invalid_harness_values_are_rejected_naming_the_field(fields: dict[str, Any], message: str) -> None:
    # when
    error = _error(_with_harness(**fields))

    # then
    assert error == message


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        pytest.param("p", True, id="one_character_case"),
        pytest.param("h" * 64, True, id="sixty_four_characters_case"),
        pytest.param("h" * 65, False, id="sixty_five_characters_case"),
        pytest.param("", False, id="empty_name_case"),
    ],
)
def test_harness_names_are_1_to_64_characters(name: str, accepted: bool) -> None:
    # given
    value = _config(harnesses={name: {"command": ["node"]}})

    # when / then
    if accepted:
        assert list(_parse(value).harnesses) == [name]
    else:
        assert _error(value) == f"harnesses: harness name {name!r} must be 1-64 characters"


def test_at_least_one_harness_is_required() -> None:
    # when
    error = _error(_config(harnesses={}))

    # then
    assert error == "harnesses: Dictionary should have at least 1 item after validation, not 0"


def test_at_least_one_token_is_required() -> None:
    # when
    error = _error(_config(tokens=[]))

    # then
    assert error == "tokens: List should have at least 1 item after validation, not 0"


@pytest.mark.parametrize(
    ("field", "message"),
    [
        pytest.param("tokens", "tokens: Field required", id="tokens_case"),
        pytest.param("harnesses", "harnesses: Field required", id="harnesses_case"),
    ],
)
def test_required_top_level_fields_are_named_when_missing(field: str, message: str) -> None:
    # given
    value = _config()
    del value[field]

    # when
    error = _error(value)

    # then
    assert error == message


TOKEN_INVALID = [
    pytest.param(
        {"token_env": ""}, "tokens[0].token_env: String should have at least 1 character", id="empty_env_case"
    ),
    pytest.param({"tenant": ""}, "tokens[0].tenant: tenant must be 1-128 bytes", id="empty_tenant_case"),
    pytest.param({"tenant": "é" * 65}, "tokens[0].tenant: tenant must be 1-128 bytes", id="tenant_over_128_bytes_case"),
    pytest.param(
        {"session": "ABC"},
        "tokens[0].session: session must be a 32-character hex session ID",
        id="session_not_hex_case",
    ),
    pytest.param(
        {"session": "0123456789abcdef0123456789abcdef\n"},
        "tokens[0].session: session must be a 32-character hex session ID",
        id="session_trailing_newline_case",
    ),
    pytest.param({"manage": 1}, "tokens[0].manage: Input should be a valid boolean", id="manage_not_boolean_case"),
    pytest.param(
        {"read_only": "yes"}, "tokens[0].read_only: Input should be a valid boolean", id="read_only_not_boolean_case"
    ),
]


@pytest.mark.parametrize(("fields", "message"), TOKEN_INVALID)
def test_invalid_token_grants_are_rejected_naming_the_field(fields: dict[str, Any], message: str) -> None:
    # given
    value = _config(tokens=[{"token_env": "BRAIN_API_KEY", "tenant": "local", **fields}])

    # when
    error = _error(value)

    # then
    assert error == message


def test_a_tenant_of_128_bytes_and_a_hex_session_are_accepted() -> None:
    # given
    grant = {"token_env": "K", "tenant": "x" * 128, "session": "0123456789abcdef0123456789abcdef"}

    # when
    parsed = _parse(_config(tokens=[grant])).tokens[0]

    # then
    assert (parsed.tenant, parsed.session) == ("x" * 128, "0123456789abcdef0123456789abcdef")


def test_a_token_limited_to_a_mixed_case_session_id_holds_it_lowercased_like_every_route() -> None:
    # given: the contract's session-id pattern takes either case; routes lower-case the id they take
    grant = {"token_env": "K", "tenant": "acme", "session": "0123456789ABCDEF0123456789abcdef"}

    # when
    parsed = _parse(_config(tokens=[grant])).tokens[0]

    # then
    assert parsed.session == "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        pytest.param("127.0.0.1:8080", "127.0.0.1", 8080, id="ipv4_case"),
        pytest.param(":9000", "0.0.0.0", 9000, id="all_interfaces_case"),
        pytest.param("[::1]:8080", "::1", 8080, id="ipv6_case"),
    ],
)
def test_listen_is_split_into_host_and_port(listen: str, host: str, port: int) -> None:
    # when
    config = _parse(_config(listen=listen))

    # then
    assert (config.listen_host, config.listen_port) == (host, port)


@pytest.mark.parametrize(
    "listen",
    [
        pytest.param("127.0.0.1", id="no_port_case"),
        pytest.param("127.0.0.1:http", id="named_port_case"),
        pytest.param("127.0.0.1:70000", id="port_out_of_range_case"),
        pytest.param("[::1:8080", id="unbalanced_bracket_case"),
    ],
)
def test_an_invalid_listen_address_is_rejected(listen: str) -> None:
    # when
    error = _error(_config(listen=listen))

    # then
    assert error == "listen: listen must be host:port"


def test_an_empty_data_dir_is_rejected() -> None:
    # when
    error = _error(_config(data_dir=""))

    # then
    assert error == "data_dir: String should have at least 1 character"


# --- public_url -----------------------------------------------------------------------------

PUBLIC_URL_INVALID = [
    pytest.param("http://user:secret@example.com", "public_url: must not contain credentials", id="credentials_case"),
    pytest.param("http://user@example.com", "public_url: must not contain credentials", id="username_case"),
    pytest.param("http://example.com/?q=1", "public_url: must not contain query parameters", id="query_case"),
    pytest.param("http://example.com/?", "public_url: must not contain query parameters", id="empty_query_case"),
    pytest.param("http://example.com/#top", "public_url: must not contain a fragment", id="fragment_case"),
    pytest.param("http://example.com/#", "public_url: must not contain a fragment", id="empty_fragment_case"),
    pytest.param("ftp://example.com", "public_url: must be an absolute http or https URL", id="scheme_case"),
    pytest.param("/relative", "public_url: must be an absolute http or https URL", id="relative_case"),
    pytest.param(
        "http://example.com:99999", "public_url: must be a valid URL: Port out of range 0-65535", id="port_case"
    ),
]


@pytest.mark.parametrize(("url", "message"), PUBLIC_URL_INVALID)
def test_an_invalid_public_url_is_rejected(url: str, message: str) -> None:
    # when
    error = _error(_config(public_url=url))

    # then
    assert error == message


def test_an_https_public_url_with_a_path_is_accepted() -> None:
    # when
    config = _parse(_config(public_url="https://brain.example.com/base"))

    # then
    assert config.public_url == "https://brain.example.com/base"


# --- providers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        pytest.param({}, "providers.openai.api_key_env: Field required", id="missing_key_env_case"),
        pytest.param(
            {"api_key_env": ""},
            "providers.openai.api_key_env: String should have at least 1 character",
            id="empty_key_env_case",
        ),
        pytest.param(
            {"api_key_env": "K", "base_url": "https://u:p@proxy.example"},
            "providers.openai.base_url: must not contain credentials",
            id="base_url_credentials_case",
        ),
        pytest.param(
            {"api_key_env": "K", "base_url": "file:///tmp"},
            "providers.openai.base_url: must be an absolute http or https URL",
            id="base_url_scheme_case",
        ),
        pytest.param(
            {"api_key_env": "K", "region": "x"}, "providers.openai.region: unknown field", id="unknown_field_case"
        ),
    ],
)
def test_invalid_providers_are_rejected_naming_the_field(provider: dict[str, Any], message: str) -> None:
    # when
    error = _error(_config(providers={"openai": provider}))

    # then
    assert error == message


# --- tools ----------------------------------------------------------------------------------

TOOL_NAMES_VALID = [
    pytest.param("a", id="one_letter_case"),
    pytest.param("Echo_2", id="mixed_case"),
    pytest.param("a" * 64, id="sixty_four_characters_case"),
]


@pytest.mark.parametrize("name", TOOL_NAMES_VALID)
def test_tool_names_matching_the_pattern_are_accepted(name: str) -> None:
    # when
    binding = _parse(_with_tool(name=name)).tools[0]

    # then
    assert binding.name == name


TOOL_NAMES_INVALID = [
    pytest.param("", id="empty_case"),
    pytest.param("1echo", id="leading_digit_case"),
    pytest.param("_echo", id="leading_underscore_case"),
    pytest.param("echo-tool", id="hyphen_case"),
    pytest.param("a" * 65, id="sixty_five_characters_case"),
    pytest.param("echo\n", id="trailing_newline_case"),
]


@pytest.mark.parametrize("name", TOOL_NAMES_INVALID)
def test_tool_names_outside_the_pattern_are_rejected(name: str) -> None:
    # when
    error = _error(_with_tool(name=name))

    # then
    named = f"tool {name!r}: " if name else ""
    assert error == f"{named}tools[0].name: name must match ^[a-zA-Z][a-zA-Z0-9_]{{0,63}}$"


TOOL_INVALID = [
    pytest.param(
        {"description": ""},
        "tools[0].description: is required by transport http",
        id="empty_description_case",
    ),
    pytest.param(
        {"tenants": []},
        "tools[0].tenants: List should have at least 1 item after validation, not 0",
        id="no_tenants_case",
    ),
    pytest.param(
        {"input_schema": {"$ref": "https://example.com/schema.json"}},
        "tools[0].input_schema: tool 'echo': $ref 'https://example.com/schema.json' at the root: only references "
        "inside the schema (#...) are allowed",
        id="external_ref_case",
    ),
    pytest.param(
        {"input_schema": {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}},
        "tools[0].input_schema: tool 'echo': $ref 'other.json#/x' at /properties/a: only references inside the "
        "schema (#...) are allowed",
        id="nested_relative_ref_case",
    ),
    pytest.param(
        {"input_schema": {"anyOf": [{"$ref": "http://e/x"}]}},
        "tools[0].input_schema: tool 'echo': $ref 'http://e/x' at /anyOf/0: only references inside the schema "
        "(#...) are allowed",
        id="ref_in_list_case",
    ),
    pytest.param(
        {"output_schema": {"$ref": "http://e/x"}},
        "tools[0].output_schema: tool 'echo': $ref 'http://e/x' at the root: only references inside the schema "
        "(#...) are allowed",
        id="output_schema_ref_case",
    ),
    pytest.param(
        {"input_schema": "object"},
        "tools[0].input_schema: Input should be a valid dictionary",
        id="schema_not_object_case",
    ),
    pytest.param(
        {"url": "http://user:pw@tools.example/echo"},
        "tools[0].url: must not contain credentials",
        id="url_credentials_case",
    ),
    pytest.param(
        {"url": "http://tools.example/echo#part"}, "tools[0].url: must not contain a fragment", id="url_fragment_case"
    ),
    pytest.param(
        {"url": "ws://tools.example/echo"}, "tools[0].url: must be an absolute http or https URL", id="url_scheme_case"
    ),
    pytest.param(
        {"mcp_tool": "remote", "inspect_session": True},
        "tools[0].inspect_session: cannot be combined with mcp_tool",
        id="inspect_with_mcp_case",
    ),
    pytest.param({"transport": "grpc"}, "tools[0].transport: unknown transport 'grpc'", id="unknown_transport_case"),
    pytest.param({"transport": "mcp"}, "tools[0].mcp_tool: is required by transport mcp", id="mcp_without_tool_case"),
    pytest.param(
        {"timeout_seconds": 0},
        "tools[0].timeout_seconds: Input should be greater than or equal to 1",
        id="timeout_zero_case",
    ),
    pytest.param(
        {"timeout_seconds": 86401},
        "tools[0].timeout_seconds: Input should be less than or equal to 86400",
        id="timeout_over_case",
    ),
    pytest.param(
        {"max_output_bytes": 0},
        "tools[0].max_output_bytes: Input should be greater than or equal to 1",
        id="max_output_zero_case",
    ),
    pytest.param(
        {"max_output_bytes": (2 << 20) + 1},
        "tools[0].max_output_bytes: Input should be less than or equal to 2097152",
        id="max_output_over_case",
    ),
    pytest.param({"retries": 3}, "tools[0].retries: unknown field", id="unknown_field_case"),
]


@pytest.mark.parametrize(("fields", "message"), TOOL_INVALID)
def test_invalid_tool_bindings_are_rejected_naming_the_field(fields: dict[str, Any], message: str) -> None:
    # when
    error = _error(_with_tool(**fields))

    # then: the tool is named, and the field at fault
    named = "" if ": tool 'echo': " in message else "tool 'echo': "  # schema problems name it already
    assert error == named + message


@pytest.mark.parametrize("field", ["name", "description", "input_schema", "url", "tenants"])
def test_required_tool_fields_are_named_when_missing(field: str) -> None:
    # given
    binding = dict(TOOL)
    del binding[field]

    # when
    error = _error(_config(tools=[binding]))

    # then: name and tenants every tool needs; the others an HTTP tool needs (a provider-backed
    # tool takes its description and schema from its provider, and has no url)
    expected = "Field required" if field in ("name", "tenants") else "is required by transport http"
    assert error == f"tool 'echo': tools[0].{field}: {expected}" if field != "name" else f"tools[0].{field}: {expected}"


TOOL_VALID = [
    pytest.param({"timeout_seconds": 1, "max_output_bytes": 1}, id="minimums_case"),
    pytest.param({"timeout_seconds": 86400, "max_output_bytes": 2 << 20}, id="maximums_case"),
    pytest.param(
        {"input_schema": {"$defs": {"a": {}}, "properties": {"x": {"$ref": "#/$defs/a"}}}}, id="local_ref_case"
    ),
    pytest.param({"url": "https://tools.example/echo?version=2"}, id="url_query_case"),
    pytest.param({"inspect_session": True}, id="inspect_session_case"),
    pytest.param({"transport": "http"}, id="explicit_http_case"),
    pytest.param({"token_env": "ECHO_TOKEN"}, id="token_env_case"),
    pytest.param({"output_schema": {"type": "object"}}, id="output_schema_case"),
]


@pytest.mark.parametrize("fields", TOOL_VALID)
def test_valid_tool_bindings_are_accepted(fields: dict[str, Any]) -> None:
    # when
    binding = _parse(_with_tool(**fields)).tools[0]

    # then
    assert {name: getattr(binding, name) for name in fields} == fields


def test_duplicate_tool_names_are_rejected_naming_the_second() -> None:
    # given
    value = _config(tools=[TOOL, {**TOOL, "name": "other"}, {**TOOL, "url": "http://elsewhere.example/"}])

    # when
    error = _error(value)

    # then
    assert error == "tools[2].name: duplicate tool name 'echo'"


def test_a_tool_descriptor_includes_the_output_schema_when_set() -> None:
    # when
    binding = _parse(_with_tool(output_schema={"type": "object"})).tools[0]

    # then
    assert binding.descriptor() == {
        "name": "echo",
        "description": "Echo text",
        "input_schema": {"type": "object"},
        "output_schema": {"type": "object"},
    }


# --- persistence ----------------------------------------------------------------------------

PERSISTENCE_VALID = [
    pytest.param({"provider": "filesystem", "directory": "/var/brain"}, id="filesystem_case"),
    pytest.param({"provider": "s3", "bucket": "b"}, id="s3_default_chain_case"),
    pytest.param(
        {
            "provider": "s3",
            "bucket": "b",
            "region": "eu-west-1",
            "access_key_env": "A",
            "secret_key_env": "S",
            "endpoint": "https://minio.local:9000",
        },
        id="s3_full_case",
    ),
    pytest.param(
        {
            "provider": "r2",
            "bucket": "b",
            "endpoint": "https://acct.r2.cloudflarestorage.com",
            "access_key_env": "A",
            "secret_key_env": "S",
        },
        id="r2_case",
    ),
    pytest.param({"provider": "gcs", "bucket": "b", "prefix": "brain/prod"}, id="gcs_prefix_case"),
    pytest.param({"provider": "gcs", "bucket": "b", "postgres_env": "PG"}, id="gcs_postgres_case"),
    pytest.param({"provider": "s3", "bucket": "b", "interval_seconds": 3600, "queue": 10000}, id="maximums_case"),
    pytest.param({"provider": "s3", "bucket": "b", "interval_seconds": 1, "queue": 1}, id="minimums_case"),
]


@pytest.mark.parametrize("fields", PERSISTENCE_VALID)
def test_valid_persistence_settings_are_accepted(fields: dict[str, Any]) -> None:
    # when
    persistence = _parse(_with_persistence(**fields)).persistence

    # then
    assert persistence is not None
    assert {name: getattr(persistence, name) for name in fields} == fields


PERSISTENCE_INVALID = [
    pytest.param({}, "persistence.provider: Field required", id="no_provider_case"),
    pytest.param(
        {"provider": "azure", "bucket": "b"},
        "persistence.provider: Input should be 'filesystem', 's3', 'r2' or 'gcs'",
        id="unknown_provider_case",
    ),
    pytest.param(
        {"provider": "filesystem"},
        "persistence.directory: is required for the filesystem provider",
        id="filesystem_without_directory_case",
    ),
    pytest.param(
        {"provider": "s3"}, "persistence.bucket: is required for the s3 provider", id="s3_without_bucket_case"
    ),
    pytest.param(
        {"provider": "gcs"}, "persistence.bucket: is required for the gcs provider", id="gcs_without_bucket_case"
    ),
    pytest.param(
        {"provider": "gcs", "bucket": "b", "region": "us"},
        "persistence.region: is not allowed for the gcs provider",
        id="gcs_region_case",
    ),
    pytest.param(
        {"provider": "gcs", "bucket": "b", "endpoint": "https://x"},
        "persistence.endpoint: is not allowed for the gcs provider",
        id="gcs_endpoint_case",
    ),
    pytest.param(
        {"provider": "gcs", "bucket": "b", "access_key_env": "A", "secret_key_env": "S"},
        "persistence.access_key_env: is not allowed for the gcs provider",
        id="gcs_keys_case",
    ),
    pytest.param(
        {"provider": "r2", "bucket": "b", "access_key_env": "A", "secret_key_env": "S"},
        "persistence.endpoint: is required for the r2 provider",
        id="r2_without_endpoint_case",
    ),
    pytest.param(
        {"provider": "r2", "bucket": "b", "endpoint": "https://r2.example"},
        "persistence.access_key_env: is required for the r2 provider",
        id="r2_without_keys_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "access_key_env": "A"},
        "persistence.secret_key_env: access_key_env and secret_key_env must be set together",
        id="s3_access_key_alone_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "secret_key_env": "S"},
        "persistence.access_key_env: access_key_env and secret_key_env must be set together",
        id="s3_secret_key_alone_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "endpoint": "minio:9000"},
        "persistence.endpoint: must be an absolute http or https URL",
        id="endpoint_not_url_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "endpoint": "https://k:s@minio"},
        "persistence.endpoint: must not contain credentials",
        id="endpoint_credentials_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "prefix": "/abs"},
        "persistence.prefix: must be relative without '\\' or '..'",
        id="prefix_absolute_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "prefix": "a/../b"},
        "persistence.prefix: must be relative without '\\' or '..'",
        id="prefix_traversal_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "prefix": "a\\b"},
        "persistence.prefix: must be relative without '\\' or '..'",
        id="prefix_backslash_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "interval_seconds": 0},
        "persistence.interval_seconds: Input should be greater than or equal to 1",
        id="interval_zero_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "interval_seconds": 3601},
        "persistence.interval_seconds: Input should be less than or equal to 3600",
        id="interval_over_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "queue": 0},
        "persistence.queue: Input should be greater than or equal to 1",
        id="queue_zero_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "queue": 10001},
        "persistence.queue: Input should be less than or equal to 10000",
        id="queue_over_case",
    ),
    pytest.param(
        {"provider": "s3", "bucket": "b", "lock": True}, "persistence.lock: unknown field", id="unknown_field_case"
    ),
]


@pytest.mark.parametrize(("fields", "message"), PERSISTENCE_INVALID)
def test_invalid_persistence_settings_are_rejected_naming_the_field(fields: dict[str, Any], message: str) -> None:
    # when
    error = _error(_with_persistence(**fields))

    # then
    assert error == message


# --- credential keys ------------------------------------------------------------------------


def test_credential_keys_active_must_name_a_configured_key() -> None:
    # when
    error = _error(_config(credential_keys={"active": "k2", "keys": {"k1": "KEY_ONE"}}))

    # then
    assert error == "credential_keys.active: must name one of keys"


# --- strict decoding ------------------------------------------------------------------------

UNKNOWN_FIELDS = [
    pytest.param({"listen_addr": "x"}, "listen_addr: unknown field (did you mean 'listen'?)", id="top_level_case"),
    pytest.param(
        {"tokens": [{"token_env": "K", "tenant": "t", "admin": True}]},
        "tokens[0].admin: unknown field",
        id="token_case",
    ),
    pytest.param(
        {"harnesses": {"pi": {"command": ["node"], "env": {}}}}, "harnesses.pi.env: unknown field", id="harness_case"
    ),
    pytest.param(
        {"providers": {"openai": {"api_key_env": "K", "model": "x"}}},
        "providers.openai.model: unknown field",
        id="provider_case",
    ),
    pytest.param({"tools": [{**TOOL, "retries": 3}]}, "tool 'echo': tools[0].retries: unknown field", id="tool_case"),
    pytest.param({"limits": {"turns": 3}}, "limits.turns: unknown field", id="limits_case"),
    pytest.param(
        {"persistence": {"provider": "s3", "bucket": "b", "acl": "x"}},
        "persistence.acl: unknown field",
        id="persistence_case",
    ),
    pytest.param(
        {"credential_keys": {"active": "k", "keys": {"k": "K"}, "cipher": "x"}},
        "credential_keys.cipher: unknown field",
        id="credential_keys_case",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), UNKNOWN_FIELDS)
def test_unknown_fields_are_rejected_at_every_level(overrides: dict[str, Any], message: str) -> None:
    # when
    error = _error(_config(**overrides))

    # then
    assert error == message


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"tokens":[]} {}', id="second_object_case"),
        pytest.param(b'{"tokens":[]} x', id="garbage_case"),
        pytest.param(b'{"tokens":[]}]', id="stray_bracket_case"),
    ],
)
def test_trailing_data_after_the_object_is_rejected(raw: bytes) -> None:
    # when
    with pytest.raises(ConfigError) as caught:
        parse_host_config(raw)

    # then
    assert str(caught.value).startswith("config: invalid JSON: Extra data")


def test_trailing_whitespace_is_not_trailing_data() -> None:
    # when
    config = parse_host_config(json.dumps(MINIMAL).encode() + b"\n\n  \t")

    # then
    assert config.tokens[0].token_env == "BRAIN_API_KEY"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"[]", id="array_case"),
        pytest.param(b'"brain"', id="string_case"),
        pytest.param(b"null", id="null_case"),
        pytest.param(b"42", id="number_case"),
    ],
)
def test_a_config_that_is_not_a_json_object_is_rejected(raw: bytes) -> None:
    # when
    with pytest.raises(ConfigError) as caught:
        parse_host_config(raw)

    # then
    assert str(caught.value) == "config: must be a JSON object"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="empty_case"),
        pytest.param(b"{", id="truncated_case"),
        pytest.param(b"\xff\xfe{}", id="not_utf8_case"),
    ],
)
def test_a_config_that_is_not_json_is_rejected(raw: bytes) -> None:
    # when
    with pytest.raises(ConfigError) as caught:
        parse_host_config(raw)

    # then
    assert str(caught.value).startswith("config: invalid JSON: ")


def test_a_config_file_of_exactly_4_mib_is_read(tmp_path: Path) -> None:
    # given a valid config padded with whitespace to the cap
    body = json.dumps(MINIMAL).encode()
    path = tmp_path / "brain.json"
    path.write_bytes(body + b" " * (MAX_CONFIG_BYTES - len(body)))

    # when
    config = load_host_config(path)

    # then
    assert MAX_CONFIG_BYTES == 4 * 1024 * 1024
    assert config.harnesses["pi"].command == ["node", "runners/pi/dist/main.js"]


def test_a_config_file_over_4_mib_is_rejected(tmp_path: Path) -> None:
    # given a valid config one byte over the cap
    body = json.dumps(MINIMAL).encode()
    path = tmp_path / "brain.json"
    path.write_bytes(body + b" " * (MAX_CONFIG_BYTES + 1 - len(body)))

    # when
    with pytest.raises(ConfigError) as caught:
        load_host_config(path)

    # then
    assert str(caught.value) == "config: file exceeds 4194304 bytes"


def test_a_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    # when
    with pytest.raises(ConfigError) as caught:
        load_host_config(tmp_path / "absent.json")

    # then
    assert str(caught.value) == f"config: cannot read {tmp_path / 'absent.json'}: No such file or directory"


# --- resolve_secrets ------------------------------------------------------------------------


def test_resolve_secrets_reads_every_credential_once() -> None:
    # given
    config = _parse(
        _config(
            tokens=[{"token_env": "A", "tenant": "t"}, {"token_env": "B", "tenant": "u"}],
            providers={"openai": {"api_key_env": "OPENAI_API_KEY"}},
            tools=[{**TOOL, "token_env": "ECHO_TOKEN"}],
        )
    )
    environ = {"A": TOKEN, "B": OTHER_TOKEN, "OPENAI_API_KEY": "sk-1", "ECHO_TOKEN": "echo-secret"}

    # when
    secrets = resolve_secrets(config, environ)

    # then
    assert secrets.tokens == (TOKEN, OTHER_TOKEN)
    assert dict(secrets.provider_keys) == {"openai": "sk-1"}
    assert dict(secrets.tool_tokens) == {"echo": "echo-secret"}
    assert repr(secrets) == "Secrets(<redacted>)"


SECRET_ERRORS = [
    pytest.param(
        _config(),
        {},
        "tokens[0].token_env: environment variable BRAIN_API_KEY is not set",
        id="token_env_missing_case",
    ),
    pytest.param(
        _config(),
        {"BRAIN_API_KEY": "t" * 23},
        "tokens[0].token_env: BRAIN_API_KEY must hold at least 24 bytes",
        id="token_23_bytes_case",
    ),
    pytest.param(
        _config(tokens=[{"token_env": "A", "tenant": "t"}, {"token_env": "B", "tenant": "u"}]),
        {"A": TOKEN, "B": TOKEN},
        "tokens[1].token_env: B duplicates another token value",
        id="duplicate_token_values_case",
    ),
    pytest.param(
        _config(providers={"openai": {"api_key_env": "OPENAI_API_KEY"}}),
        {"BRAIN_API_KEY": TOKEN},
        "providers.openai.api_key_env: environment variable OPENAI_API_KEY is not set",
        id="provider_key_missing_case",
    ),
    pytest.param(
        _config(providers={"openai": {"api_key_env": "OPENAI_API_KEY"}}),
        {"BRAIN_API_KEY": TOKEN, "OPENAI_API_KEY": ""},
        "providers.openai.api_key_env: environment variable OPENAI_API_KEY is not set",
        id="provider_key_empty_case",
    ),
    pytest.param(
        _config(tools=[{**TOOL, "token_env": "ECHO_TOKEN"}]),
        {"BRAIN_API_KEY": TOKEN},
        "tool 'echo': tools[0].token_env: environment variable ECHO_TOKEN is not set",
        id="tool_token_missing_case",
    ),
    pytest.param(
        _config(persistence={"provider": "s3", "bucket": "b", "postgres_env": "PG_URL"}),
        {"BRAIN_API_KEY": TOKEN},
        "persistence.postgres_env: environment variable PG_URL is not set",
        id="postgres_env_missing_case",
    ),
    pytest.param(
        _config(persistence={"provider": "s3", "bucket": "b", "access_key_env": "AK", "secret_key_env": "SK"}),
        {"BRAIN_API_KEY": TOKEN, "AK": "x"},
        "persistence.secret_key_env: environment variable SK is not set",
        id="secret_key_missing_case",
    ),
    pytest.param(
        _config(credential_keys={"active": "k1", "keys": {"k1": "KEY_ONE"}}),
        {"BRAIN_API_KEY": TOKEN},
        "credential_keys.keys.k1: environment variable KEY_ONE is not set",
        id="credential_key_missing_case",
    ),
]


@pytest.mark.parametrize(("value", "environ", "message"), SECRET_ERRORS)
def test_resolve_secrets_names_the_field_of_the_first_problem(
    value: dict[str, Any], environ: dict[str, str], message: str
) -> None:
    # given
    config = _parse(value)

    # when
    with pytest.raises(ConfigError) as caught:
        resolve_secrets(config, environ)

    # then
    assert str(caught.value) == message


def test_a_token_of_24_multibyte_bytes_is_long_enough() -> None:
    # given 8 three-byte characters: 8 characters, 24 bytes
    config = _parse(_config())

    # when
    secrets = resolve_secrets(config, {"BRAIN_API_KEY": "€" * 8})

    # then
    assert secrets.tokens == ("€" * 8,)


def test_resolve_secrets_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # given
    monkeypatch.setenv("BRAIN_API_KEY", TOKEN)

    # when
    secrets = resolve_secrets(_parse(_config()))

    # then
    assert secrets.tokens == (TOKEN,)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("not base64!", id="not_base64_case"),
        pytest.param(base64.b64encode(b"k" * 31).decode(), id="31_bytes_case"),
        pytest.param(base64.b64encode(b"k" * 33).decode(), id="33_bytes_case"),
        pytest.param("k" * 32, id="raw_32_characters_case"),
    ],
)
def test_a_credential_key_must_be_a_base64_encoded_32_byte_key(value: str) -> None:
    # given
    config = _parse(_config(credential_keys={"active": "k1", "keys": {"k1": "KEY_ONE"}}))

    # when
    with pytest.raises(ConfigError) as caught:
        resolve_secrets(config, {"BRAIN_API_KEY": TOKEN, "KEY_ONE": value})

    # then
    assert str(caught.value) == "credential_keys.keys.k1: KEY_ONE must hold a base64-encoded 32-byte key"


def test_a_base64_encoded_32_byte_credential_key_is_accepted() -> None:
    # given
    config = _parse(_config(credential_keys={"active": "k1", "keys": {"k1": "KEY_ONE"}}))

    # when
    secrets = resolve_secrets(config, {"BRAIN_API_KEY": TOKEN, "KEY_ONE": base64.b64encode(bytes(range(32))).decode()})

    # then
    assert secrets.tokens == (TOKEN,)


# --- every problem in one pass ----------------------------------------------------------------


def test_resolve_secrets_lists_every_missing_variable_in_the_order_of_the_config() -> None:
    # given: two tokens, a provider and a tool, none of whose variables is set
    config = _parse(
        _config(
            tokens=[{"token_env": "TOKEN_A", "tenant": "a"}, {"token_env": "TOKEN_B", "tenant": "b"}],
            providers={"openai": {"api_key_env": "OPENAI_KEY"}, "anthropic": {"api_key_env": "ANTHROPIC_KEY"}},
            tools=[{**TOOL, "token_env": "TOOL_KEY"}],
        )
    )

    # when
    with pytest.raises(ConfigError) as caught:
        resolve_secrets(config, {"TOKEN_B": "x" * 3})

    # then: the first problem is the message, as before; all of them are listed
    assert str(caught.value) == "tokens[0].token_env: environment variable TOKEN_A is not set"
    assert caught.value.problems == (
        "tokens[0].token_env: environment variable TOKEN_A is not set",
        "tokens[1].token_env: TOKEN_B must hold at least 24 bytes",
        "providers.openai.api_key_env: environment variable OPENAI_KEY is not set",
        "providers.anthropic.api_key_env: environment variable ANTHROPIC_KEY is not set",
        "tool 'echo': tools[0].token_env: environment variable TOOL_KEY is not set",
    )


def test_parsing_lists_every_invalid_field_with_the_field_an_unknown_one_was_meant_to_be() -> None:
    # given
    value = _config(limits={"queue": 0, "activ": 3}, tols=[], public_url="ftp://x")
    del value["harnesses"]

    # when
    with pytest.raises(ConfigError) as caught:
        _parse(value)

    # then
    assert caught.value.problems == (
        "public_url: must be an absolute http or https URL",
        "harnesses: Field required",
        "limits.queue: Input should be greater than or equal to 1",
        "limits.activ: unknown field (did you mean 'active'?)",
        "tols: unknown field (did you mean 'tools'?)",
    )


def test_a_report_of_many_problems_lists_the_first_fifty_and_counts_the_rest() -> None:
    # given: 60 unknown fields
    value = _config(**{f"field_{index}": index for index in range(60)})

    # when
    with pytest.raises(ConfigError) as caught:
        _parse(value)
    report = caught.value.report("brain.json").splitlines()

    # then
    assert len(caught.value.problems) == 60
    assert len(report) == 51
    assert report[0] == "invalid config brain.json: field_0: unknown field"
    assert report[-1] == "invalid config brain.json: and 10 more problems"
