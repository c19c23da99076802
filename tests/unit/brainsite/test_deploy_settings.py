"""Deployment settings: `manage.py check --deploy` for production and loopback configs (a fresh
process each), and the settings module run afresh in this process for ALLOWED_HOSTS from `listen`
and BRAIN_ALLOWED_HOSTS, the TLS switches, and the variables it refuses."""

from __future__ import annotations

import json
import os
import runpy
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION_ENV = {
    "BRAIN_TLS": "1",
    "BRAIN_HSTS_SECONDS": "31536000",
    "BRAIN_SECRET_KEY": secrets.token_urlsafe(50),
}
PLAIN_HTTP_WARNINGS = ["security.W004", "security.W008", "security.W012", "security.W016"]
TLS_MIDDLEWARE = "brainsite.tls.tls_terminated_middleware"


def _config_file(directory: Path, **fields: Any) -> Path:
    value = {
        "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "local"}],
        "harnesses": {"pi": {"command": ["node"]}},
        **fields,
    }
    path = directory / "brain.json"
    path.write_text(json.dumps(value))
    return path


def _environment(directory: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any BRAIN_ setting, plus `extra`."""
    environ = {name: value for name, value in os.environ.items() if not name.startswith("BRAIN_")}
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    return {**environ, "BRAIN_DATA_DIR": str(directory / "data"), **extra}


def _check_deploy(config: Path, directory: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING", "--config", str(config)]
    return subprocess.run(
        command, cwd=ROOT, env=_environment(directory, extra), capture_output=True, text=True, timeout=60
    )


def _warning_ids(output: str) -> list[str]:
    return sorted(line.split("(", 1)[1].split(")", 1)[0] for line in output.splitlines() if line.startswith("?: ("))


def _settings(monkeypatch: pytest.MonkeyPatch, directory: Path, **extra: str) -> dict[str, Any]:
    """The settings module's names, run afresh under `extra` as a new process would read them."""
    for name in [name for name in os.environ if name.startswith("BRAIN_")]:
        monkeypatch.delenv(name)
    for name, value in {"BRAIN_DATA_DIR": str(directory / "data"), **extra}.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "brainsite" / "settings.py"))


# --- manage.py check --deploy -------------------------------------------------------------------


def test_a_production_config_passes_check_deploy_with_no_issue(tmp_path: Path) -> None:
    # given: served over TLS, HSTS for a year, a strong secret key, DEBUG off
    config = _config_file(tmp_path, public_url="https://brain.example.com")

    # when
    result = _check_deploy(config, tmp_path, **PRODUCTION_ENV)

    # then: only the preload opt-in is silenced (an explicit operator choice)
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "System check identified no issues (1 silenced).\n",
        "",
    )


def test_a_plain_http_loopback_config_passes_with_the_tls_warnings_silenced(tmp_path: Path) -> None:
    # given: the default secret key (random per process), DEBUG off
    config = _config_file(tmp_path, listen="127.0.0.1:8080")

    # when
    result = _check_deploy(config, tmp_path)

    # then
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "System check identified no issues (4 silenced).\n",
        "",
    )


def test_plain_http_on_a_wildcard_listen_keeps_its_warnings(tmp_path: Path) -> None:
    # given
    config = _config_file(tmp_path, listen="0.0.0.0:8080")

    # when
    result = _check_deploy(config, tmp_path)

    # then
    assert result.returncode == 1
    assert _warning_ids(result.stderr) == ["brain.W001", *PLAIN_HTTP_WARNINGS]
    assert '"msg": "any Host header is accepted: set BRAIN_ALLOWED_HOSTS to the names clients use"' in result.stderr


# --- the settings module ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"listen": "127.0.0.1:8080"}, PLAIN_HTTP_WARNINGS, id="plain_loopback_case"),
        pytest.param({"listen": "[::1]:8080"}, PLAIN_HTTP_WARNINGS, id="plain_ipv6_loopback_case"),
        pytest.param({"listen": "0.0.0.0:8080"}, [], id="plain_wildcard_case"),
        pytest.param({"listen": "10.1.2.3:8080"}, [], id="plain_private_address_case"),
        pytest.param(
            {"listen": "127.0.0.1:8080", "public_url": "https://brain.example.com"}, [], id="https_public_url_case"
        ),
    ],
)
def test_only_plain_http_on_loopback_silences_the_tls_warnings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fields: dict[str, str], expected: list[str]
) -> None:
    # given
    config = _config_file(tmp_path, **fields)

    # when
    derived = _settings(monkeypatch, tmp_path, BRAIN_CONFIG=str(config))

    # then
    assert derived["SILENCED_SYSTEM_CHECKS"] == expected
    assert (derived["SESSION_COOKIE_SECURE"], derived["SECURE_SSL_REDIRECT"], derived["SECURE_HSTS_SECONDS"]) == (
        False,
        False,
        0,
    )


def test_brain_tls_marks_cookies_secure_and_counts_requests_as_https(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # when
    tls = _settings(monkeypatch, tmp_path, **PRODUCTION_ENV)
    proxied = _settings(monkeypatch, tmp_path, **PRODUCTION_ENV, BRAIN_PROXY_SSL_HEADER="X-Forwarded-Proto")

    # then: without a proxy header every request counts as https; with one, the header decides
    assert (tls["SESSION_COOKIE_SECURE"], tls["CSRF_COOKIE_SECURE"], tls["SECURE_SSL_REDIRECT"]) == (True, True, True)
    assert (tls["SECURE_HSTS_SECONDS"], tls["SECURE_HSTS_INCLUDE_SUBDOMAINS"], tls["SECURE_HSTS_PRELOAD"]) == (
        31536000,
        True,
        False,
    )
    assert tls["SILENCED_SYSTEM_CHECKS"] == ["security.W021"]
    assert tls["MIDDLEWARE"][0] == TLS_MIDDLEWARE
    assert "SECURE_PROXY_SSL_HEADER" not in tls
    assert TLS_MIDDLEWARE not in proxied["MIDDLEWARE"]
    assert proxied["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"BRAIN_HSTS_SECONDS": "3600"}, id="hsts_case"),
        pytest.param({"BRAIN_SSL_REDIRECT": "1"}, id="redirect_case"),
        pytest.param({"BRAIN_PROXY_SSL_HEADER": "X-Forwarded-Proto"}, id="proxy_header_case"),
    ],
)
def test_tls_switches_without_brain_tls_are_refused_at_startup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: dict[str, str]
) -> None:
    # when / then
    with pytest.raises(ImproperlyConfigured, match="need BRAIN_TLS=1"):
        _settings(monkeypatch, tmp_path, **extra)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("BRAIN_HSTS_SECONDS", "-1", id="negative_int_case"),
        pytest.param("BRAIN_HSTS_SECONDS", "1e3", id="not_int_case"),
        pytest.param("BRAIN_TLS", "maybe", id="not_bool_case"),
        pytest.param("BRAIN_PROXY_SSL_HEADER", "X-Forwarded-Proto: https", id="not_header_name_case"),
        pytest.param("BRAIN_ALLOWED_HOSTS", " , ", id="no_host_case"),
    ],
)
def test_malformed_deployment_variables_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str
) -> None:
    # when / then
    with pytest.raises(ImproperlyConfigured, match=f"^{name} "):
        _settings(monkeypatch, tmp_path, **{"BRAIN_TLS": "1", name: value})


@pytest.mark.parametrize(
    ("fields", "override", "expected"),
    [
        pytest.param(
            {"listen": "127.0.0.1:9000"}, None, ["127.0.0.1", "localhost", "[::1]", "::1"], id="loopback_listen_case"
        ),
        pytest.param(
            {"listen": "127.0.0.1:9000", "public_url": "https://Brain.Example.com"},
            None,
            ["127.0.0.1", "localhost", "[::1]", "::1", "brain.example.com"],
            id="loopback_behind_a_proxy_case",
        ),
        pytest.param(
            {"listen": "[fd00::5]:9000", "public_url": "http://[fd00::5]:9000"},
            None,
            ["fd00::5", "[fd00::5]"],
            id="ipv6_address_case",
        ),
        pytest.param({"listen": "10.1.2.3:9000"}, None, ["10.1.2.3", "127.0.0.1"], id="private_address_case"),
        pytest.param({"listen": "0.0.0.0:9000"}, None, ["*"], id="wildcard_listen_case"),
        pytest.param({"listen": ":9000"}, None, ["*"], id="empty_host_is_wildcard_case"),
        pytest.param(
            {"listen": "0.0.0.0:9000"},
            "brain.example.com, .internal",
            ["brain.example.com", ".internal"],
            id="override_case",
        ),
        pytest.param({"listen": "127.0.0.1:9000"}, "brain.example.com", ["brain.example.com"], id="override_wins_case"),
    ],
)
def test_allowed_hosts_come_from_the_configs_listen_unless_overridden(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    fields: dict[str, str],
    override: str | None,
    expected: list[str],
) -> None:
    # given
    config = _config_file(tmp_path, **fields)
    extra = {"BRAIN_CONFIG": str(config)} | ({"BRAIN_ALLOWED_HOSTS": override} if override is not None else {})

    # when
    derived = _settings(monkeypatch, tmp_path, **extra)

    # then
    assert derived["ALLOWED_HOSTS"] == expected
    assert derived["CSRF_TRUSTED_ORIGINS"] == [fields.get("public_url", "http://127.0.0.1:8080").lower()]


@pytest.mark.parametrize(
    "config",
    [pytest.param(None, id="no_config_case"), pytest.param("missing.json", id="unreadable_config_case")],
)
def test_without_a_readable_config_the_hosts_are_the_default_listens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config: str | None
) -> None:
    # when: the command that serves a config reports why it cannot read it
    derived = _settings(monkeypatch, tmp_path, **({"BRAIN_CONFIG": str(tmp_path / config)} if config else {}))

    # then
    assert derived["ALLOWED_HOSTS"] == ["127.0.0.1", "localhost", "[::1]", "::1"]
