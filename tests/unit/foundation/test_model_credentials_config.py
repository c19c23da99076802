"""The host config's `model_credentials` block: each declared name's provider must be configured,
its name is plain, and its variable (or NAME_FILE) must hold a key at startup, as a provider's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from foundation.hostconfig import ConfigError, HostConfig, parse_host_config, resolve_secrets

TOKEN = "t" * 24
BASE: dict[str, Any] = {
    "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "local"}],
    "harnesses": {"loop": {"command": ["python", "-m", "runners.loop"]}},
    "providers": {"openai": {"api_key_env": "OPENAI_API_KEY"}},
}
ENVIRON = {"BRAIN_API_KEY": TOKEN, "OPENAI_API_KEY": "sk-configured"}


def _config(model_credentials: Any) -> dict[str, Any]:
    return {**BASE, "model_credentials": model_credentials}


def _parse(value: dict[str, Any]) -> HostConfig:
    return parse_host_config(json.dumps(value).encode())


def test_a_declared_key_is_read_by_reference_name_and_never_shown() -> None:
    # given
    config = _parse(_config({"team-a.openai_1": {"provider": "openai", "api_key_env": "TEAM_A_KEY"}}))

    # when
    secrets = resolve_secrets(config, {**ENVIRON, "TEAM_A_KEY": "sk-team-a"})

    # then
    assert dict(secrets.model_credential_keys) == {"team-a.openai_1": "sk-team-a"}
    assert "sk-team-a" not in repr(secrets.model_credential_keys)
    assert _parse(BASE).model_credentials == {}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        pytest.param(
            {"team-a": {"provider": "anthropic", "api_key_env": "TEAM_A_KEY"}},
            "model_credentials.team-a.provider: provider 'anthropic' is not configured in providers",
            id="unconfigured_provider_case",
        ),
        pytest.param(
            {"team a": {"provider": "openai", "api_key_env": "TEAM_A_KEY"}},
            "model_credentials.team a: name must be 1-64 letters, digits, '_', '.' or '-',"
            " starting with a letter or digit",
            id="bad_name_case",
        ),
        pytest.param(
            {"x" * 65: {"provider": "openai", "api_key_env": "TEAM_A_KEY"}},
            f"model_credentials.{'x' * 65}: name must be 1-64 letters, digits, '_', '.' or '-',"
            " starting with a letter or digit",
            id="long_name_case",
        ),
        pytest.param(
            {"team-a": {"provider": "openai"}}, "model_credentials.team-a.api_key_env: Field required", id="no_env_case"
        ),
        pytest.param(
            {"team-a": {"provider": "openai", "api_key_env": "K", "base_url": "http://x"}},
            "model_credentials.team-a.base_url: unknown field",
            id="unknown_field_case",
        ),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_field(declared: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _parse(_config(declared))
    assert str(refused.value) == message


def test_a_declared_key_missing_from_the_environment_stops_startup_as_a_providers_does(tmp_path: Path) -> None:
    config = _parse(_config({"team-a": {"provider": "openai", "api_key_env": "TEAM_A_KEY"}}))
    with pytest.raises(ConfigError) as missing:
        resolve_secrets(config, ENVIRON)
    assert str(missing.value) == "model_credentials.team-a.api_key_env: environment variable TEAM_A_KEY is not set"
    empty = tmp_path / "key"
    empty.write_text("\n")
    with pytest.raises(ConfigError) as empty_file:
        resolve_secrets(config, {**ENVIRON, "TEAM_A_KEY_FILE": str(empty)})
    assert str(empty_file.value) == (
        "model_credentials.team-a.api_key_env: environment variable TEAM_A_KEY is not set"
        " (TEAM_A_KEY_FILE names an empty file)"
    )
