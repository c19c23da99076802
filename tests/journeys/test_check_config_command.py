"""`manage.py check_brain_config`: exit 0 for a valid config, else fail naming the field."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import ROOT, make_server


def _check(directory: Path, raw: bytes, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = directory / "brain.json"
    path.write_bytes(raw)
    return subprocess.run(
        [sys.executable, "manage.py", "check_brain_config", "--config", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def valid(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, str]]:
    server = make_server(tmp_path)
    return tmp_path, server.config, server.env


def test_a_valid_config_exits_0(valid: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    # given
    directory, config, env = valid
    # when
    result = _check(directory, json.dumps(config).encode(), env)
    # then
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"config {directory / 'brain.json'} is valid"


def _limits(**limits: int) -> Any:
    def change(config: dict[str, Any]) -> None:
        config["limits"] = limits

    return change


def _set(path: str, value: Any) -> Any:
    def change(config: dict[str, Any]) -> None:
        target: Any = config
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(_set("colour", "blue"), "colour: unknown field", id="unknown_top_field_case"),
        pytest.param(_set("limits", {"queue": 4, "burst": 1}), "limits.burst: unknown field", id="unknown_limit_case"),
        pytest.param(_limits(queue=0), "limits.queue", id="queue_0_case"),
        pytest.param(_limits(queue=2000), "limits.queue", id="queue_2000_case"),
        pytest.param(_limits(active=4, loaded=2), "limits", id="loaded_below_active_case"),
        pytest.param(_limits(subscriber_bytes=4095), "limits.subscriber_bytes", id="subscriber_bytes_case"),
        pytest.param(_limits(session_bytes=(16 << 20) - 1), "limits.session_bytes", id="session_bytes_case"),
        pytest.param(_limits(input_bytes=(1 << 20) + 1), "limits.input_bytes", id="input_bytes_case"),
        pytest.param(_limits(subscriber_events=0), "limits.subscriber_events", id="subscriber_events_case"),
        pytest.param(
            _set("harnesses", {"instant": {"command": ["python"], "max_shared": 2, "max_active_turns": 3}}),
            "harnesses.instant",
            id="active_turns_over_shared_case",
        ),
        pytest.param(
            _set("harnesses", {"instant": {"command": []}}), "harnesses.instant.command", id="no_command_case"
        ),
        pytest.param(_set("tokens", []), "tokens", id="no_tokens_case"),
        pytest.param(_set("tokens.0.session", "ABC"), "tokens[0].session", id="bad_session_id_case"),
        pytest.param(_set("public_url", "http://user:pw@example.com"), "public_url", id="credentials_in_url_case"),
        pytest.param(
            _set(
                "environments",
                [
                    {
                        "name": "reader",
                        "kind": "brain",
                        "tenants": ["acme"],
                        "components": ["/srv/reader.wasm"],
                        "limits": {"workers": 2, "tenant_workers": 3},
                    }
                ],
            ),
            "environments[0].limits.tenant_workers",
            id="tenant_workers_over_workers_case",
        ),
    ],
)
def test_an_invalid_config_fails_naming_the_field(
    valid: tuple[Path, dict[str, Any], dict[str, str]], change: Any, field: str
) -> None:
    # given
    directory, config, env = valid
    broken = copy.deepcopy(config)
    change(broken)
    # when
    result = _check(directory, json.dumps(broken).encode(), env)
    # then
    assert result.returncode != 0
    assert f"invalid config {directory / 'brain.json'}: {field}" in result.stderr
    assert result.stdout == ""


def test_trailing_data_after_the_config_object_fails(valid: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    # given
    directory, config, env = valid
    # when
    result = _check(directory, json.dumps(config).encode() + b' {"more": 1}', env)
    # then
    assert result.returncode != 0
    assert "config: invalid JSON" in result.stderr


def test_a_config_over_4_mib_fails(valid: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    # given: valid JSON padded with whitespace past the limit
    directory, config, env = valid
    raw = json.dumps(config).encode() + b" " * (4 << 20)
    # when
    result = _check(directory, raw, env)
    # then
    assert result.returncode != 0
    assert f"config: file exceeds {4 << 20} bytes" in result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        pytest.param(
            "TEST_ALICE_TOKEN",
            "short-token",
            "tokens[0].token_env: TEST_ALICE_TOKEN must hold at least 24 bytes",
            id="short_token_case",
        ),
        pytest.param(
            "TEST_ALICE_TOKEN",
            "",
            "tokens[0].token_env: environment variable TEST_ALICE_TOKEN is not set",
            id="missing_token_case",
        ),
        pytest.param(
            "TEST_OPENAI_KEY",
            "",
            "providers.openai.api_key_env: environment variable TEST_OPENAI_KEY is not set",
            id="missing_provider_key_case",
        ),
    ],
)
def test_a_bad_environment_fails_naming_the_field(
    valid: tuple[Path, dict[str, Any], dict[str, str]], variable: str, value: str, message: str
) -> None:
    # given
    directory, config, env = valid
    env = {**env, variable: value}
    if not value:
        del env[variable]
    # when
    result = _check(directory, json.dumps(config).encode(), env)
    # then
    assert result.returncode != 0
    assert message in result.stderr


def test_two_tokens_with_the_same_value_fail(valid: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    # given
    directory, config, env = valid
    env = {**env, "TEST_BOB_TOKEN": env["TEST_ALICE_TOKEN"]}
    # when
    result = _check(directory, json.dumps(config).encode(), env)
    # then
    assert result.returncode != 0
    assert "tokens[2].token_env: TEST_BOB_TOKEN duplicates another token value" in result.stderr


def test_runbrain_refuses_to_start_with_an_invalid_config(valid: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    # given
    directory, config, env = valid
    config = {**config, "limits": {"queue": 0}}
    path = directory / "brain.json"
    path.write_text(json.dumps(config))
    # when
    result = subprocess.run(
        [sys.executable, "manage.py", "runbrain", "--config", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # then
    assert result.returncode != 0
    assert "limits.queue" in result.stderr
