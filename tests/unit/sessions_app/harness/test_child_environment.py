"""A harness child gets a whitelisted environment; credentials travel only in the `open` frame."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sessions_app.harness.host import INHERITED_VARIABLES, PROJECT_ROOT, child_environment, resolve_command

WHITELIST = ("PATH", "SystemRoot", "WINDIR", "COMSPEC", "PATHEXT", "TMP", "TEMP", "TMPDIR", "LANG", "LC_ALL")
SECRETS = {
    "BRAIN_API_KEY": "brain-token-0123456789abcdef",
    "OPENAI_API_KEY": "sk-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "BRAIN_DATABASE_URL": "postgres://user:pw@db/brain",
    "DJANGO_SETTINGS_MODULE": "brainsite.settings",
    "PYTHONPATH": "/somewhere/else",
    "HOME": "/root",
    "LC_CTYPE": "C.UTF-8",
}


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every whitelisted name set to a known value, next to secrets that must not leak."""
    values = {name: f"value-of-{name}" for name in WHITELIST}
    for name, value in {**values, **SECRETS}.items():
        monkeypatch.setenv(name, value)
    return values


def test_the_whitelist_is_the_spec_list() -> None:
    # then
    assert INHERITED_VARIABLES == WHITELIST


def test_a_child_gets_only_whitelisted_variables_plus_no_color_and_its_home(
    environ: dict[str, str], tmp_path: Path
) -> None:
    # when
    env = child_environment(["node", "runners/pi/dist/main.js"], tmp_path / "home")

    # then
    assert env == {**environ, "NO_COLOR": "1", "HOME": str(tmp_path / "home")}


def test_no_secret_value_reaches_the_child(environ: dict[str, str], tmp_path: Path) -> None:
    # when
    env = child_environment([sys.executable, "-m", "runners.loop"], tmp_path / "home")

    # then
    leaked = [value for value in SECRETS.values() if value in env.values()]
    assert leaked == []


def test_unset_whitelisted_variables_are_left_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # given only PATH among the whitelisted names
    for name in WHITELIST:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")

    # when
    env = child_environment(["node"], tmp_path)

    # then
    assert env == {"PATH": "/usr/bin", "NO_COLOR": "1", "HOME": str(tmp_path)}


def test_the_python_interpreter_also_gets_the_project_on_pythonpath(environ: dict[str, str], tmp_path: Path) -> None:
    # when
    env = child_environment([sys.executable, "-m", "runners.loop"], tmp_path)

    # then
    assert env == {**environ, "NO_COLOR": "1", "HOME": str(tmp_path), "PYTHONPATH": str(PROJECT_ROOT)}
    assert (PROJECT_ROOT / "runners" / "protocol.py").is_file()


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["node", "main.js"], id="node_case"),
        pytest.param(["/usr/bin/python3-other", "main.py"], id="other_python_case"),
        pytest.param(["python"], id="unresolved_bare_python_case"),
    ],
)
def test_other_commands_get_no_pythonpath(environ: dict[str, str], tmp_path: Path, command: list[str]) -> None:
    # when
    env = child_environment(command, tmp_path)

    # then
    assert "PYTHONPATH" not in env


@pytest.mark.parametrize(
    "name",
    [pytest.param("python", id="python_case"), pytest.param("python3", id="python3_case")],
)
def test_a_bare_python_resolves_to_the_running_interpreter(name: str) -> None:
    # when
    command = resolve_command([name, "-m", "runners.loop"])

    # then
    assert command == [sys.executable, "-m", "runners.loop"]


def test_a_resolved_python_command_gets_pythonpath(environ: dict[str, str], tmp_path: Path) -> None:
    # when
    env = child_environment(resolve_command(["python", "-m", "runners.loop"]), tmp_path)

    # then
    assert env["PYTHONPATH"] == str(PROJECT_ROOT)


def test_existing_relative_arguments_resolve_from_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # given
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "main.js").write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "harness").write_text("")
    monkeypatch.chdir(tmp_path)

    # when
    command = resolve_command(["bin/harness", "runner/main.js", "--flag", "missing.js", "/abs/path.js"])

    # then
    assert command == [
        str(tmp_path / "bin" / "harness"),
        str(tmp_path / "runner" / "main.js"),
        "--flag",
        "missing.js",
        "/abs/path.js",
    ]


def test_a_command_name_without_a_slash_is_left_to_path_lookup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # given a file that happens to share the command's name in the working directory
    (tmp_path / "node").write_text("")
    monkeypatch.chdir(tmp_path)

    # when
    command = resolve_command(["node", "main.js"])

    # then
    assert command == ["node", "main.js"]
