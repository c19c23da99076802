"""The first hour's mistakes, each made as a new user makes it, against the real commands: a
`manage.py` command without `--config` or with a broken one, an interpreter without Brain's
dependencies, a config with several problems, and `examples/session.py` given a wrong token, a
tool the tenant lacks, a server that is not running or a turn that fails. Each ends in one line
(one per config problem) and a non-zero exit, and leaves no file more open than 0600."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.admin.support import OPERATOR, OPERATOR_PASSWORD
from tests.fixtures.server import ROOT, BrainServer, free_port, make_server

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

COMMAND_TIMEOUT_SECONDS = 90
EXAMPLE_TIMEOUT_SECONDS = 120


def _run(
    command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = COMMAND_TIMEOUT_SECONDS
) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it: the usual umask 022."""
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False, umask=0o022
    )


def _plain_environment() -> dict[str, str]:
    """A shell's environment: no Brain variable, no PYTHONPATH."""
    return {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "HOME": os.environ.get("HOME", "/root")}


def _modes(directory: Path) -> dict[str, str]:
    found = {".": oct(directory.stat().st_mode & 0o777)}
    for path in sorted(directory.rglob("*")):
        found[str(path.relative_to(directory))] = oct(path.stat().st_mode & 0o777)
    return found


# --- manage.py without a config, or with a broken one ---------------------------------------------


def test_createsuperuser_without_a_config_migrates_the_default_database_and_keeps_it_private(tmp_path: Path) -> None:
    # given: a directory with no .brain yet and no Brain variable set
    environment = {**_plain_environment(), "DJANGO_SUPERUSER_PASSWORD": OPERATOR_PASSWORD}
    # when: the step a new user tries first
    completed = _run(
        [sys.executable, str(ROOT / "manage.py"), "createsuperuser", "--noinput", "--username", OPERATOR]
        + ["--email", "operator@example.com"],
        cwd=tmp_path,
        env=environment,
    )
    # then: the user is created in .brain/metadata.sqlite, nothing else is said
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "Superuser created successfully.\n", "")
    modes = _modes(tmp_path / ".brain")
    assert modes.pop(".") == "0o700"
    assert modes.pop("metadata.sqlite") == "0o600"
    assert set(modes) <= {"metadata.sqlite-wal", "metadata.sqlite-shm"}
    assert set(modes.values()) <= {"0o600"}
    # and: a second command finds the user there
    again = _run(
        [sys.executable, str(ROOT / "manage.py"), "changepassword", OPERATOR],
        cwd=tmp_path,
        env={**environment, "BRAIN_DATA_DIR": str(tmp_path / "elsewhere")},
    )
    assert again.returncode == 1
    assert again.stderr.splitlines() == [f"CommandError: user '{OPERATOR}' does not exist"]


def _broken_config(directory: Path) -> tuple[Path, dict[str, str]]:
    """A config with a misspelt top-level field, a misspelt limit, and two variables unset."""
    server = make_server(directory)
    config = copy.deepcopy(server.config)
    config["tols"] = config.pop("tools")
    config["limits"] = {"qeue": 4}
    config["data_dir"] = str(directory / "data")
    path = directory / "brain.json"
    path.write_text(json.dumps(config))
    env = {**_plain_environment(), **server.env}
    for name in ("TEST_BOB_TOKEN", "TEST_OPENAI_KEY", "BRAIN_DATA_DIR"):
        env.pop(name)
    return path, env


def _broken_config_report(path: Path) -> list[str]:
    return [
        f"invalid config {path}: limits.qeue: unknown field (did you mean 'queue'?)",
        f"invalid config {path}: tols: unknown field (did you mean 'tools'?)",
        f"invalid config {path}: tokens[2].token_env: environment variable TEST_BOB_TOKEN is not set",
        f"invalid config {path}: providers.openai.api_key_env: environment variable TEST_OPENAI_KEY is not set",
    ]


def test_check_brain_config_reports_every_problem_of_a_config_in_one_run(tmp_path: Path) -> None:
    # given
    path, env = _broken_config(tmp_path)
    # when
    completed = _run([sys.executable, "manage.py", "check_brain_config", "--config", str(path)], cwd=ROOT, env=env)
    # then: both unknown fields with the field meant, and both missing variables
    assert completed.returncode == 1
    assert completed.stdout == ""
    expected = _broken_config_report(path)
    assert completed.stderr.splitlines() == [f"CommandError: {expected[0]}", *expected[1:]]


def test_a_command_given_a_broken_config_refuses_instead_of_using_the_default_database(tmp_path: Path) -> None:
    # given
    path, env = _broken_config(tmp_path)
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    # when
    completed = _run(
        [sys.executable, str(ROOT / "manage.py"), "createsuperuser", "--noinput", "--username", OPERATOR]
        + ["--email", "operator@example.com", "--config", str(path)],
        cwd=workdir,
        env={**env, "DJANGO_SUPERUSER_PASSWORD": OPERATOR_PASSWORD},
    )
    # then: the config's problems only (its file decodes, so its variables are checked too)
    assert completed.returncode == 1
    assert completed.stdout == ""
    assert completed.stderr.splitlines() == _broken_config_report(path)[:2]
    # and: no database was made anywhere
    assert list(workdir.iterdir()) == []
    assert not (tmp_path / "data").exists()


# --- an interpreter without the dependencies ------------------------------------------------------


def _site_without(tmp_path: Path, *hidden: str) -> Path:
    """A directory holding Brain's installed packages but `hidden` (links into site-packages)."""
    site = tmp_path / "site"
    site.mkdir()
    installed = Path(sysconfig.get_paths()["purelib"])
    for entry in installed.iterdir():
        if not any(entry.name == name or entry.name.startswith(f"{name}.") for name in hidden):
            (site / entry.name).symlink_to(entry)
    return site


@pytest.mark.parametrize(
    ("hidden", "named"),
    [(("re2",), "re2"), (("pydantic", "re2"), "pydantic, re2")],
    ids=["re2_case", "pydantic_and_re2_case"],
)
def test_manage_py_without_a_dependency_names_it_and_the_fix_in_one_line(
    tmp_path: Path, hidden: tuple[str, ...], named: str
) -> None:
    # given: an interpreter that sees every package but `hidden` (-S: no site-packages of its own)
    site = _site_without(tmp_path, *hidden)
    # when
    completed = _run(
        [sys.executable, "-S", "manage.py", "createsuperuser", "--config", "examples/local.json"],
        cwd=ROOT,
        env={**_plain_environment(), "PYTHONPATH": str(site)},
    )
    # then
    assert completed.returncode == 1
    assert completed.stdout == ""
    assert completed.stderr.splitlines() == [
        f"manage.py: {sys.executable} lacks Brain's dependencies (no module named {named}): "
        "run `make bootstrap` once, then `.venv/bin/python manage.py createsuperuser ...`"
    ]


def test_manage_py_under_a_bare_interpreter_names_a_few_missing_modules_and_counts_the_rest(tmp_path: Path) -> None:
    # when: no site-packages at all
    completed = _run([sys.executable, "-S", "manage.py", "migrate"], cwd=ROOT, env=_plain_environment())
    # then
    assert completed.returncode == 1
    [line] = completed.stderr.splitlines()
    assert re.fullmatch(
        rf"manage\.py: {re.escape(sys.executable)} lacks Brain's dependencies \(no module named django, "
        r"django_stubs_ext, asgiref and \d+ more\): "
        r"run `make bootstrap` once, then `\.venv/bin/python manage\.py migrate`",
        line,
    ), line


def test_every_module_manage_py_checks_comes_from_a_distribution_in_requirements_txt() -> None:
    # given
    sys.path.insert(0, str(ROOT))
    try:
        import manage
    finally:
        sys.path.remove(str(ROOT))
    required = {
        re.split(r"[=\[]", line, maxsplit=1)[0].lower()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    # then
    assert {name.lower() for name in manage.REQUIRED_MODULES.values()} <= required


# --- examples/session.py --------------------------------------------------------------------------


def _example(server_url: str, token: str, *arguments: str, tools: str = "") -> subprocess.CompletedProcess[str]:
    """examples/session.py as a user runs it, with the installed client."""
    environment = {**_plain_environment(), "BRAIN_API_KEY": token, "BRAIN_URL": server_url, "BRAIN_TOOLS": tools}
    return _run(
        [sys.executable, "examples/session.py", *arguments],
        cwd=ROOT,
        env=environment,
        timeout=EXAMPLE_TIMEOUT_SECONDS,
    )


@pytest.mark.parametrize(
    ("token", "tools", "line"),
    [
        (
            "wrong-token-0123456789abcdef",
            "",
            "session.py: Brain refused: 401 forbidden: missing or invalid bearer token "
            "(is BRAIN_API_KEY a token of the server's config?)",
        ),
        (
            "alice",
            "nosuch",
            "session.py: Brain refused: 403 forbidden: tool 'nosuch' is not available to this tenant",
        ),
    ],
    ids=["wrong_token_case", "unknown_tool_case"],
)
def test_the_example_answers_a_refusal_with_one_line_and_exit_code_1(
    module_brain: BrainServer, token: str, tools: str, line: str
) -> None:
    # when
    completed = _example(
        module_brain.url, module_brain.tokens.get(token, token), "--harness", "instant", "hi", tools=tools
    )
    # then
    assert (completed.returncode, completed.stdout, completed.stderr.splitlines()) == (1, "", [line])


def test_the_example_answers_a_server_that_is_not_running_with_one_line(tmp_path: Path) -> None:
    # given: a loopback port nothing listens on
    url = f"http://127.0.0.1:{free_port()}"
    # when
    completed = _example(url, "a-token-of-at-least-24-bytes-long", "hi")
    # then
    assert (completed.returncode, completed.stdout) == (1, "")
    assert completed.stderr.splitlines() == [
        f"session.py: cannot reach Brain at {url}: connection refused (is runbrain running there?)"
    ]


def test_the_example_exits_1_with_the_error_when_a_turn_fails(module_brain: BrainServer) -> None:
    # when: the second message's turn fails; the third is never sent
    completed = _example(module_brain.url, module_brain.token(), "--harness", "instant", "hi", "brain_error", "more")
    # then
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.splitlines()[-1].startswith("session.py: the turn failed: brain_error: ")
    assert len(completed.stderr.splitlines()) == 1
    assert "you> hi\nagent> echo: hi" in completed.stdout
    assert "you> more" not in completed.stdout


def test_the_example_exits_0_when_every_turn_ends_idle_and_can_close_its_session(module_brain: BrainServer) -> None:
    # when
    completed = _example(module_brain.url, module_brain.token(), "--harness", "instant", "--close", "hi")
    # then
    assert (completed.returncode, completed.stderr) == (0, "")
    session_id = completed.stdout.split("Session: ", 1)[1].split()[0]
    assert module_brain.sdk().get(session_id)["status"] == "closed"


def test_the_example_can_delete_its_session_at_the_end(module_brain: BrainServer) -> None:
    # when
    completed = _example(module_brain.url, module_brain.token(), "--harness", "instant", "--delete", "hi")
    # then
    assert (completed.returncode, completed.stderr) == (0, "")
    session_id = completed.stdout.split("Session: ", 1)[1].split()[0]
    with module_brain.client() as http:
        assert http.get(f"/sessions/{session_id}").status_code == 404


# --- the server names the tools it refuses --------------------------------------------------------


def test_creating_a_session_with_unavailable_tools_names_each_of_them(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: a tool of another tenant, and a tool no one has
    from brain import BrainError

    server = brain_factory(tools=[_tool("crm", tenants=["globex"]), _tool("notes", tenants=["acme"])])
    wire: dict[str, Any] = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    # when / then
    for tools, message in [
        (["notes", "crm"], "tool 'crm' is not available to this tenant"),
        (["nosuch", "notes", "crm"], "tools 'nosuch', 'crm' are not available to this tenant"),
        (
            [f"t{index}" for index in range(7)],
            "tools 't0', 't1', 't2', 't3', 't4' and 2 more are not available to this tenant",
        ),
    ]:
        wire["config"]["tools"] = tools
        with pytest.raises(BrainError) as refused:
            server.sdk().create(wire)
        assert (refused.value.status, refused.value.code, str(refused.value)) == (403, "forbidden", message)
    # and: the tenant's own tool still works
    wire["config"]["tools"] = ["notes"]
    assert server.sdk().create(wire)["config"]["tools"] == ["notes"]


def _tool(name: str, *, tenants: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name} tool",
        "input_schema": {"type": "object"},
        "url": f"http://127.0.0.1:1/tools/{name}",
        "tenants": tenants,
    }
