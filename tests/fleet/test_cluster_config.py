"""The `cluster` block: its fields, and the refusal of a fleet without its shared parts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from foundation.hostconfig import ConfigError, Persistence
from foundation.hostconfig.cluster import ClusterConfig, FleetSecret, check_cluster
from tests.fixtures.server import ROOT, make_server

SECRET = "7f3c9a1e5b2d8064f1a9c3e7b5d20486"  # 32 bytes that look random
DATABASE = "postgres://brain@db.internal:5432/brain"
S3 = Persistence(provider="s3", bucket="brain-archive")
FILESYSTEM = Persistence(provider="filesystem", directory="/mnt/shared/brain-archive")


def cluster(**fields: Any) -> ClusterConfig:
    return ClusterConfig.model_validate({"instance": "brain-a", "url": "http://10.0.0.1:8080", **fields})


def test_the_defaults_are_a_ten_second_lease_and_no_shared_directory() -> None:
    # when
    config = cluster(url="http://brain-a.internal:8080/")
    # then
    assert config.instance == "brain-a"
    assert config.url == "http://brain-a.internal:8080"  # a trailing / dropped: targets are appended
    assert config.lease_seconds == 10
    assert config.shared_directory is False


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"instance": ""}, "must be 1-63 lowercase letters"),
        ({"instance": "Brain-A"}, "must be 1-63 lowercase letters"),
        ({"instance": "-a"}, "must be 1-63 lowercase letters"),
        ({"instance": "a-"}, "must be 1-63 lowercase letters"),
        ({"instance": "a" * 64}, "must be 1-63 lowercase letters"),
        ({"instance": "a\n"}, "must be 1-63 lowercase letters"),
        ({"url": "10.0.0.1:8080"}, "must be an absolute http or https URL"),
        ({"url": "ftp://10.0.0.1"}, "must be an absolute http or https URL"),
        ({"url": "https://10.0.0.1:8443"}, "must be an http:// URL: instances forward requests to each other"),
        ({"url": "http://u:p@10.0.0.1"}, "must not contain credentials"),
        ({"url": "http://10.0.0.1/brain"}, "must not contain a path"),
        ({"url": "http://10.0.0.1/?a=1"}, "must not contain a query or a fragment"),
        ({"url": "http://10.0.0.1:99999"}, "must be a valid URL"),
        ({"lease_seconds": 2}, "greater than or equal to 3"),
        ({"lease_seconds": 301}, "less than or equal to 300"),
        ({"lease_seconds": "10"}, "valid integer"),
        ({"replicas": 3}, "Extra inputs are not permitted"),
    ],
    ids=[
        "empty_name_case",
        "uppercase_name_case",
        "leading_dash_case",
        "trailing_dash_case",
        "long_name_case",
        "newline_name_case",
        "no_scheme_case",
        "ftp_case",
        "https_case",
        "credentials_case",
        "path_case",
        "query_case",
        "bad_port_case",
        "short_lease_case",
        "long_lease_case",
        "string_lease_case",
        "unknown_field_case",
    ],
)
def test_a_bad_field_is_refused(fields: dict[str, Any], message: str) -> None:
    # when
    with pytest.raises(ValidationError) as refused:
        cluster(**fields)
    # then
    assert message in str(refused.value)


def test_a_complete_fleet_gives_its_secret() -> None:
    # when
    secret = check_cluster(
        cluster(), persistence=S3, environ={"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": SECRET}
    )
    # then
    assert secret == FleetSecret(SECRET.encode())
    assert repr(secret) == "FleetSecret(<redacted>)"
    assert SECRET not in str(secret)


def test_the_secret_may_come_from_a_file(tmp_path: Path) -> None:
    # given
    path = tmp_path / "fleet-secret"
    path.write_text(SECRET + "\n")
    # when
    secret = check_cluster(
        cluster(), persistence=S3, environ={"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET_FILE": str(path)}
    )
    # then
    assert secret.key == SECRET.encode()


def test_a_shared_filesystem_archive_is_accepted_when_the_operator_says_it_is_shared() -> None:
    # when
    secret = check_cluster(
        cluster(shared_directory=True),
        persistence=FILESYSTEM,
        environ={"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": SECRET},
    )
    # then
    assert secret.key == SECRET.encode()


@pytest.mark.parametrize(
    ("persistence", "environ", "message"),
    [
        (S3, {"BRAIN_FLEET_SECRET": SECRET}, "cluster: BRAIN_DATABASE_URL must name a PostgreSQL database"),
        (
            S3,
            {"BRAIN_DATABASE_URL": "sqlite:///x", "BRAIN_FLEET_SECRET": SECRET},
            "cluster: BRAIN_DATABASE_URL must name a PostgreSQL database",
        ),
        (
            None,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": SECRET},
            "cluster: a persistence block is required",
        ),
        (
            FILESYSTEM,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": SECRET},
            "cluster.shared_directory: a filesystem archive must be a directory every instance shares",
        ),
        (S3, {"BRAIN_DATABASE_URL": DATABASE}, "cluster: environment variable BRAIN_FLEET_SECRET is not set"),
        (
            S3,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": SECRET[:31]},
            "cluster: BRAIN_FLEET_SECRET must hold at least 32 bytes",
        ),
        (
            S3,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": "replace-with-at-least-32-random-bytes-0000000000"},
            "cluster: BRAIN_FLEET_SECRET is a placeholder (it contains 'replace'): set it to random bytes",
        ),
        (
            S3,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": "CHANGE-ME-" + SECRET},
            "cluster: BRAIN_FLEET_SECRET is a placeholder (it contains 'change-me'): set it to random bytes",
        ),
        (
            S3,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": "ab" * 32},
            "cluster: BRAIN_FLEET_SECRET is not random (fewer than 8 distinct characters)",
        ),
        (
            S3,
            {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET_FILE": "/nonexistent/fleet-secret"},
            "cluster: cannot read BRAIN_FLEET_SECRET_FILE: No such file or directory",
        ),
    ],
    ids=[
        "no_database_case",
        "not_postgres_case",
        "no_archive_case",
        "private_directory_case",
        "no_secret_case",
        "short_secret_case",
        "example_secret_case",
        "change_me_secret_case",
        "few_characters_secret_case",
        "missing_secret_file_case",
    ],
)
def test_a_fleet_without_its_shared_parts_is_refused(
    persistence: Persistence | None, environ: dict[str, str], message: str
) -> None:
    # when
    with pytest.raises(ConfigError) as refused:
        check_cluster(cluster(), persistence=persistence, environ=environ)
    # then
    assert str(refused.value) == message or str(refused.value).startswith(message)
    assert SECRET not in str(refused.value)


def test_the_secret_is_counted_in_bytes_not_characters() -> None:
    # given: 11 three-byte characters are 33 bytes
    environ = {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": "€₤₩₪₫₭₮₯₰₱₲"}
    # when
    secret = check_cluster(cluster(), persistence=S3, environ=environ)
    # then
    assert len(secret.key) == 33


def _check_brain_config(tmp_path: Path, change: dict[str, Any], environ: dict[str, str]) -> tuple[int, str]:
    server = make_server(tmp_path)
    config = {**server.config, **change}
    path = tmp_path / "brain.json"
    path.write_text(json.dumps(config))
    env = {key: value for key, value in server.env.items() if key not in ("BRAIN_DATABASE_URL", "BRAIN_FLEET_SECRET")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check_brain_config", "--config", str(path)],
        cwd=ROOT,
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stderr.strip()


CLUSTER_BLOCK = {"instance": "brain-a", "url": "http://127.0.0.1:8080"}


def test_check_brain_config_refuses_a_cluster_block_without_postgresql(tmp_path: Path) -> None:
    # given a fleet secret and a shared archive, but Django's database left on SQLite
    archive = {"provider": "filesystem", "directory": str(tmp_path / "archive")}
    change = {"cluster": {**CLUSTER_BLOCK, "shared_directory": True}, "persistence": archive}
    # when
    code, stderr = _check_brain_config(tmp_path, change, {"BRAIN_FLEET_SECRET": SECRET})
    # then
    assert code != 0
    assert "cluster: BRAIN_DATABASE_URL must name a PostgreSQL database" in stderr


def test_check_brain_config_refuses_a_cluster_block_without_the_fleet_secret(tmp_path: Path) -> None:
    # given
    archive = {"provider": "filesystem", "directory": str(tmp_path / "archive")}
    change = {"cluster": {**CLUSTER_BLOCK, "shared_directory": True}, "persistence": archive}
    # when
    code, stderr = _check_brain_config(tmp_path, change, {"BRAIN_DATABASE_URL": DATABASE})
    # then
    assert code != 0
    assert "cluster: environment variable BRAIN_FLEET_SECRET is not set" in stderr


def test_check_brain_config_accepts_a_complete_cluster_block(tmp_path: Path) -> None:
    # given
    archive = {"provider": "filesystem", "directory": str(tmp_path / "archive")}
    change = {"cluster": {**CLUSTER_BLOCK, "shared_directory": True}, "persistence": archive}
    # when
    code, stderr = _check_brain_config(tmp_path, change, {"BRAIN_DATABASE_URL": DATABASE, "BRAIN_FLEET_SECRET": SECRET})
    # then
    assert (code, stderr) == (0, "")
