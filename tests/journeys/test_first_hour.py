"""The first hour of a new user, each step against the real thing: a `runbrain` whose port is
taken, `make run` (scripts/run_demo.py) started twice, its conversation (an agent fetching the
demo's page and running Python in a local sandbox, or told why the sandbox is skipped), the
server's front page and the URLs people type, and the commands a fresh data dir sees first."""

from __future__ import annotations

import contextlib
import errno
import http.server
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from persistence_app.workerwatch import public_broker_url
from tests.admin.support import OPERATOR, OPERATOR_PASSWORD, AdminClient
from tests.fixtures.server import BrainServer, create_session
from tests.fixtures.services import RedisServer
from tests.persistence.test_sync_services import SyncWorker, _filesystem, _sync, _wait, _wait_synced

ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_SECONDS = 90
# The whole demo conversation: seven turns, the first of which starts the loop runner (its SDK
# import takes a while on a busy machine).
DEMO_SECONDS = 300
DEMO_CONFIG = json.loads((ROOT / "examples" / "local.json").read_text())
DEMO_BRAIN_PORT = int(DEMO_CONFIG["listen"].rsplit(":", 1)[1])
DEMO_PORTS = {DEMO_BRAIN_PORT: "Brain", 8091: "provider", 8092: "tools", 8093: "page"}


@contextlib.contextmanager
def _listening_socket() -> Iterator[int]:
    """A loopback port something listens on (and never answers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200 `{}` and records its path: an unrelated server on a port."""

    paths: list[str]

    def do_GET(self) -> None:  # noqa: N802  # http.server's handler name
        self.paths.append(self.path)
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # http.server's name
        return


@contextlib.contextmanager
def _answering_server(port: int) -> Iterator[list[str] | None]:
    """An HTTP server on 127.0.0.1:`port` recording the paths it is asked for; None when
    another process holds the port already (then that one is what answers there)."""
    paths: list[str] = []
    handler = type("Handler", (_RecordingHandler,), {"paths": paths})
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        yield None
        return
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield paths
    finally:
        server.shutdown()
        server.server_close()


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# --- a port that is taken --------------------------------------------------------------------


def test_runbrain_that_cannot_listen_exits_non_zero_with_one_line(brain_factory: Callable[..., BrainServer]) -> None:
    # given: a config whose listen port another process holds
    with _listening_socket() as port:
        server = brain_factory(start=False, listen=f"127.0.0.1:{port}")
        server.config_path.write_text(json.dumps(server.config))
        # when
        completed = subprocess.run(
            [sys.executable, "manage.py", "runbrain", "--config", str(server.config_path)],
            cwd=ROOT,
            env=server.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
    # then: exit code 1, one line naming the address and the cause, no traceback
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout == ""
    assert completed.stderr.splitlines() == [
        f"CommandError: cannot listen on 127.0.0.1:{port}: address already in use "
        "(another process serves that port: stop it or change `listen`)"
    ]


def test_make_run_refuses_to_start_when_brains_port_is_taken() -> None:
    # given: something else answers HTTP on the demo's Brain port (an earlier demo, another app)
    helpers = {8091: _free(8091), 8092: _free(8092), 8093: _free(8093)}
    with _answering_server(DEMO_BRAIN_PORT) as asked:
        # when
        completed = subprocess.run(
            [sys.executable, "scripts/run_demo.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        # then: it refuses at once, naming the port, and never talks to what answers there
        assert completed.returncode == 1, completed.stderr
        assert completed.stdout == ""
        assert completed.stderr.splitlines() == [
            f"make run: port {DEMO_BRAIN_PORT} (Brain) already in use on 127.0.0.1; "
            "stop what listens there (examples/local.json names these ports) and try again"
        ]
        if asked is not None:
            assert asked == []
    # and: it started neither the scripted provider nor the tool service
    assert {port: _free(port) for port in helpers} == helpers


@pytest.mark.parametrize(
    ("port", "what"),
    [(8091, "the scripted model provider"), (8092, "the example tool service"), (8093, "the demo's web page")],
    ids=["provider_case", "tools_case", "page_case"],
)
def test_make_run_names_each_demo_port_that_is_taken(port: int, what: str) -> None:
    # given: only one of the demo's service ports is held
    if not _free(DEMO_BRAIN_PORT):
        pytest.fail(f"port {DEMO_BRAIN_PORT} must be free for this test")
    with _answering_server(port) as asked:
        # when
        completed = subprocess.run(
            [sys.executable, "scripts/run_demo.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        # then
        assert completed.returncode == 1, completed.stderr
        assert completed.stderr.splitlines() == [
            f"make run: port {port} ({what}) already in use on 127.0.0.1; "
            "stop what listens there (examples/local.json names these ports) and try again"
        ]
        if asked is not None:
            assert asked == []
    assert _free(DEMO_BRAIN_PORT)


# --- the demo's conversation -------------------------------------------------------------------


def _run_demo(environment: dict[str, str], stderr_path: Path) -> tuple[int, list[str], str]:
    """scripts/run_demo.py until it says Ctrl-C stops Brain, then Ctrl-C (SIGINT to its process
    group, as a terminal sends it): the exit code, the lines it printed, what it said on stderr."""
    for port, what in DEMO_PORTS.items():
        if not _free(port):
            pytest.fail(f"port {port} ({what}) must be free for the demo")
    lines: queue.Queue[str | None] = queue.Queue()
    with stderr_path.open("wb") as stderr:
        demo = subprocess.Popen(
            [sys.executable, "scripts/run_demo.py"],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )

    def read() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    printed: list[str] = []
    try:
        while not printed or "Ctrl-C stops Brain." not in printed[-1]:
            line = lines.get(timeout=DEMO_SECONDS)
            if line is None:
                break
            printed.append(line)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGINT)
        code = demo.wait(timeout=COMMAND_TIMEOUT_SECONDS)
    return code, printed, stderr_path.read_text()


def _tool_lines(printed: list[str], kind: str, name: str) -> list[str]:
    """The `[tool.call NAME …]` lines, or the `[tool.result …]` line right after each."""
    calls = [index for index, line in enumerate(printed) if line.strip().startswith(f"[tool.call {name} ")]
    if kind == "call":
        return [printed[index].strip() for index in calls]
    return [printed[index + 1].strip() for index in calls if printed[index + 1].strip().startswith("[tool.result ")]


@pytest.mark.timeout(DEMO_SECONDS + 2 * COMMAND_TIMEOUT_SECONDS)
def test_make_run_shows_an_agent_fetching_the_demo_page_and_running_python_in_a_local_sandbox(
    tmp_path: Path,
) -> None:
    # when: `make run` on a machine with bubblewrap, until its conversation ends
    code, printed, said = _run_demo({**os.environ}, tmp_path / "demo.stderr")
    # then: every turn ended, and Ctrl-C stopped it cleanly
    assert code == 0, said
    assert "the demo conversation failed" not in said and "skipped" not in said, said
    assert printed[-1].endswith("Ctrl-C stops Brain."), printed
    # and: web_fetch read the page the demo serves, as text, in the streamed conversation
    assert _tool_lines(printed, "call", "web_fetch") == ["[tool.call web_fetch {'url': 'http://127.0.0.1:8093/'}]"]
    (fetched,) = _tool_lines(printed, "result", "web_fetch")
    assert "The agent fetched this paragraph with web_fetch from a page the demo serves on 127.0.0.1:8093." in fetched
    assert "'status': 200" in fetched and "'truncated': False" in fetched
    assert "var unseen" not in fetched and "Home" not in fetched
    # and: the agent created a local sandbox, read its handle and ran Python in it
    (created,) = _tool_lines(printed, "result", "local_create")
    handle = re.search(r"'handle': '(sbx1\.[^']+)'", created)
    assert handle is not None, created
    (ran,) = _tool_lines(printed, "call", "local_exec")
    assert ran.startswith(f"[tool.call local_exec {{'handle': '{handle.group(1)}', 'command': 'python3 -c")
    (output,) = _tool_lines(printed, "result", "local_exec")
    assert re.search(
        r"'structured_content': \{'exit_code': 0, 'stdout': 'Python 3\.\d+\.\d+ says 6 \* 7 = 42\\n'", output
    )
    assert "'timed_out': False" in output
    assert any(re.fullmatch(r"Python 3\.\d+\.\d+ says 6 \* 7 = 42", line) for line in printed)
    # and: nothing it started is left listening
    assert {port: _free(port) for port in DEMO_PORTS} == dict.fromkeys(DEMO_PORTS, True)


@pytest.mark.timeout(DEMO_SECONDS + 2 * COMMAND_TIMEOUT_SECONDS)
def test_make_run_without_bubblewrap_says_in_one_line_that_the_sandbox_is_skipped_and_runs_the_rest(
    tmp_path: Path,
) -> None:
    # given: a PATH with Python and no bwrap
    environment = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    # when
    code, printed, said = _run_demo(environment, tmp_path / "demo.stderr")
    # then: one line says why, and the rest of the demo ran, the page fetched
    assert code == 0, said
    skipped = [line for line in said.splitlines() if "sandbox" in line]
    assert skipped == [
        "make run: the sandbox part of the demo is skipped: bubblewrap is not installed (no bwrap on PATH); "
        "install the Debian package bubblewrap"
    ]
    assert "the demo conversation failed" not in said
    # and: that PATH has no node either, so the pi harness is left out, in one line
    assert [line for line in said.splitlines() if "pi harness" in line] == [
        "make run: the pi harness is left out of the demo: harness 'pi': 'node' is not on PATH: Pi needs Node 20.6"
        " or later"
    ]
    (fetched,) = _tool_lines(printed, "result", "web_fetch")
    assert "The agent fetched this paragraph with web_fetch" in fetched
    assert _tool_lines(printed, "call", "local_create") == []
    assert not any("sandbox" in line for line in printed)
    assert printed[-1].endswith("Ctrl-C stops Brain.")


def test_make_run_installs_bubblewrap_and_none_of_the_test_suites_debian_packages() -> None:
    # when: what `make run` would run (nothing is run)
    planned = subprocess.run(
        ["make", "-n", "run"], cwd=ROOT, env={**os.environ, "MAKEFLAGS": ""}, capture_output=True, text=True, check=True
    ).stdout
    # then: bubblewrap, before the demo starts, and nothing else from apt
    installs = re.findall(r"apt-get install -y -qq ([^>]+?) >/dev/null", planned)
    assert installs == ["bubblewrap"]
    assert planned.index("apt-get install") < planned.index("scripts/run_demo.py")


def test_make_run_goes_on_with_one_line_where_bubblewrap_cannot_be_installed(tmp_path: Path) -> None:
    # given: a machine where neither dpkg, apt-get nor sudo can be found
    environment = {"PATH": str(tmp_path), "HOME": str(tmp_path), "MAKEFLAGS": ""}
    # when
    completed = subprocess.run(
        ["/usr/bin/make", "--no-print-directory", "demo-packages"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    # then: it says so and succeeds, so `make run` starts the demo (which skips its sandbox)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "installing Debian package: bubblewrap (the demo's local sandbox)",
        "make run: bubblewrap could not be installed; the demo runs without its sandbox",
    ]


# --- the URLs people type ----------------------------------------------------------------------


def test_the_front_page_links_the_api_docs_and_the_admin(module_brain: BrainServer) -> None:
    # when: a browser and a script ask for /
    page = httpx.get(module_brain.url + "/", headers={"Accept": "text/html,application/xhtml+xml"}, timeout=10)
    plain = httpx.get(module_brain.url + "/", timeout=10)
    posted = httpx.post(module_brain.url + "/", timeout=10)
    # then: links, never a 500 (or a traceback in the log)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert re.findall(r'href="([^"]+)"', page.text) == ["/docs", "/openapi.json", "/admin/", "/health/ready"]
    assert plain.status_code == 200
    assert plain.json() == {
        "name": "brain",
        "docs": "/docs",
        "openapi": "/openapi.json",
        "admin": "/admin/",
        "health": "/health/ready",
    }
    assert posted.status_code == 405
    assert posted.json()["error"] == {"code": "invalid_request", "message": "method not allowed on this route"}
    # and: every link answers
    for link in plain.json().values():
        if link.startswith("/"):
            assert httpx.get(module_brain.url + link, timeout=10).status_code in (200, 302), link
    assert '"level": "error"' not in module_brain.logs()


@pytest.mark.parametrize(
    ("typed", "location"), [("/admin", "/admin/"), ("/docs/", "/docs")], ids=["admin_case", "docs_case"]
)
def test_a_url_with_the_wrong_slash_redirects(module_brain: BrainServer, typed: str, location: str) -> None:
    # when
    response = httpx.get(module_brain.url + typed, timeout=10)
    followed = httpx.get(module_brain.url + typed, timeout=10, follow_redirects=True)
    # then
    assert (response.status_code, response.headers["location"]) == (301, location)
    assert followed.status_code == 200
    assert followed.url.path in (location, "/admin/login/")


# --- commands on a fresh data dir ----------------------------------------------------------------


def _manage_fresh(
    server: BrainServer, *arguments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`manage.py ARGUMENTS --config <server's config>` as a user would run it first, with the
    usual umask 022, on a data dir that does not exist yet."""
    server.config_path.write_text(json.dumps(server.config))
    assert not server.data_dir.exists()
    return subprocess.run(
        [sys.executable, "manage.py", *arguments, "--config", str(server.config_path)],
        cwd=ROOT,
        env={**server.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
        umask=0o022,
    )


def _modes(directory: Path) -> dict[str, str]:
    """The permission bits of the directory and everything under it, by relative path."""
    found = {".": oct(directory.stat().st_mode & 0o777)}
    for path in sorted(directory.rglob("*")):
        found[str(path.relative_to(directory))] = oct(path.stat().st_mode & 0o777)
    return found


def test_createsuperuser_on_a_fresh_data_dir_migrates_first_and_keeps_its_files_private(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: a config whose data dir does not exist yet
    server = brain_factory(start=False)
    # when: the README's first admin step
    completed = _manage_fresh(
        server,
        "createsuperuser",
        "--noinput",
        "--username",
        OPERATOR,
        "--email",
        "operator@example.com",
        env={"DJANGO_SUPERUSER_PASSWORD": OPERATOR_PASSWORD},
    )
    # then: the user is created, nothing else is said, and only Brain's user can read the files
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "Superuser created successfully.\n", "")
    assert _modes(server.data_dir) == {".": "0o700", "metadata.sqlite": "0o600"}
    # and: runbrain on the same config lets the operator into the admin
    server.start()
    with AdminClient(server) as admin:
        assert "<title>Tenants, tokens, sessions and tools | Brain admin</title>" in admin.login().page("/admin/")


def test_add_knowledge_on_a_fresh_data_dir_migrates_first(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given
    server = brain_factory(start=False)
    document = tmp_path / "returns.txt"
    document.write_text("Returns are accepted within 30 days.")
    # when
    completed = _manage_fresh(server, "add_knowledge", "--tenant", "acme", "--base", "policies", str(document))
    # then
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == f"[1/1] {document}: added 'returns' (text/plain, 36 bytes, 1 chunks) to acme/policies\n"
    assert _modes(server.data_dir)["."] == "0o700"
    assert {mode for name, mode in _modes(server.data_dir).items() if name != "."} <= {"0o600", "0o700"}


def test_revoke_credential_on_a_fresh_data_dir_answers_with_its_own_error(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given
    server = brain_factory(start=False)
    session_id = "0123456789abcdef0123456789abcdef"
    # when
    completed = _manage_fresh(server, "revoke_credential", session_id, "crm")
    # then: the command's refusal, not a missing table
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        f"CommandError: session {session_id} has no live credential for binding 'crm'"
    ]
    assert _modes(server.data_dir) == {".": "0o700", "metadata.sqlite": "0o600"}


# --- the README's demo by hand -------------------------------------------------------------------


def _by_hand_block() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("The same demo by hand", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _environment_names(config: dict[str, object]) -> set[str]:
    """Every `*_env` value anywhere in the config."""
    found: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key.endswith("_env") and isinstance(item, str):
                    found.add(item)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(config)
    return found


def test_the_readme_runs_the_demo_by_hand_with_every_variable_and_service_it_needs() -> None:
    # given: what examples/local.json names
    providers = DEMO_CONFIG["providers"]
    provider_ports = {urlsplit(provider["base_url"]).port for provider in providers.values()}
    tool_ports = {urlsplit(tool["url"]).port for tool in DEMO_CONFIG["tools"]}
    # when
    lines = _by_hand_block()
    exported = {name for line in lines if line.startswith("export ") for name in re.findall(r"(\w+)=", line)}
    # then: every variable the config names, and the tool service's own two keys
    assert _environment_names(DEMO_CONFIG) | {"BRAIN_TOOLS_KEY", "BRAIN_APPROVAL_KEY"} <= exported
    assert provider_ports == {8091} and tool_ports == {8092}
    assert ".venv/bin/python -m services.scripted_provider --port 8091 &" in lines
    assert ".venv/bin/python -m examples.tools --port 8092 &" in lines
    assert ".venv/bin/python manage.py runbrain --config examples/local.json" in lines


def test_relative_paths_in_a_config_resolve_from_the_working_directory(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: a config in one directory naming a relative data_dir, a command started in another
    server = brain_factory(start=False, data_dir="state")
    server.env.pop("BRAIN_DATA_DIR")
    server.config_path.write_text(json.dumps(server.config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # when
    completed = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "createsuperuser", "--noinput", "--username", OPERATOR]
        + ["--email", "operator@example.com", "--config", str(server.config_path)],
        cwd=elsewhere,
        env={**server.env, "DJANGO_SUPERUSER_PASSWORD": OPERATOR_PASSWORD},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    # then: the data dir is under the working directory, not beside the config
    assert completed.returncode == 0, completed.stderr
    assert (elsewhere / "state" / "metadata.sqlite").is_file()
    assert not (server.config_path.parent / "state").exists()


# --- where uploads go ----------------------------------------------------------------------------

WATCH_SECONDS = 30.0  # a change of workers shows within a ping or two (every 2 s while none answers)
BROKER_DATABASE = 14  # this module's Redis database on the session's server


@pytest.fixture
def broker_url(redis_server: RedisServer) -> str:
    """A Redis database of its own for the broker, emptied first."""
    import redis

    url = redis_server.url.rsplit("/", 1)[0] + f"/{BROKER_DATABASE}"
    with redis.Redis.from_url(url) as connection:
        connection.flushdb()
    return url


def _log_entries(server: BrainServer, message: str) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in server.logs().splitlines() if line.startswith("{")]
    return [entry for entry in entries if entry["msg"] == message]


def test_an_in_process_server_logs_that_uploads_run_in_it(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # when
    server = brain_factory(persistence=_filesystem(tmp_path / "archive"))
    # then
    [entry] = _log_entries(server, "archive uploads run in this process")
    assert (entry["level"], entry["archive"]) == ("info", "filesystem")
    assert _log_entries(server, "archive uploads go to Celery workers") == []


def test_a_broker_without_a_worker_shows_in_the_log_and_the_sync_status_until_one_answers(
    brain_factory: Callable[..., BrainServer], broker_url: str, tmp_path: Path
) -> None:
    # given: a Celery-mode server whose broker runs, with no worker
    server = brain_factory(start=False, persistence=_filesystem(tmp_path / "archive"))
    server.env["BRAIN_CELERY_BROKER"] = broker_url
    server.start()
    # then: it says where uploads go, then that no worker answers
    [mode] = _log_entries(server, "archive uploads go to Celery workers")
    assert (mode["level"], mode["archive"], mode["broker"]) == ("info", "filesystem", broker_url)
    silent = "no sync worker answers on the broker: uploads wait until `manage.py syncworker` runs"
    [warning] = _wait(lambda: _log_entries(server, silent), WATCH_SECONDS, "the no-worker warning")
    assert (warning["level"], warning["broker"]) == ("warning", broker_url)
    # and: a session waiting for its upload says why
    session_id = create_session(server)["id"]
    status = _sync(server, session_id)
    assert (status["pending"], status["error"]) == (True, "no sync worker answers on the broker")
    # when: a worker starts
    worker = SyncWorker(server, tmp_path / "syncworker.log")
    try:
        worker.start()
        # then: the server notices, and the session is published with no error left
        [answered] = _wait(
            lambda: _log_entries(server, "sync workers answer on the broker"), WATCH_SECONDS, "workers answering"
        )
        assert (answered["level"], answered["broker"], answered["workers"]) == ("info", broker_url, 1)
        published = _wait_synced(server, session_id)
        assert published.get("error") is None
        assert len(_log_entries(server, silent)) == 1  # said once, not at every ping
    finally:
        worker.stop()
    # and when the worker is gone again, it says so again
    _wait(lambda: len(_log_entries(server, silent)) == 2, WATCH_SECONDS, "the second no-worker warning")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@10.0.0.5:6379/0", "redis://10.0.0.5:6379/0"),
        ("redis://brain:s3cret@redis.internal/2?password=other", "redis://redis.internal/2"),
        ("rediss://user:pw@[::1]:6380/1", "rediss://[::1]:6380/1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
    ids=["password_case", "user_and_query_case", "ipv6_case", "plain_case"],
)
def test_the_logged_broker_url_carries_no_credentials(url: str, shown: str) -> None:
    assert public_broker_url(url) == shown


def test_a_broker_that_cannot_be_reached_shows_in_the_log_and_the_sync_status(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: a Celery-mode server whose broker's port nothing listens on
    with _listening_socket() as port:
        pass  # a loopback port that was free a moment ago, now closed
    broker = f"redis://127.0.0.1:{port}/0"
    server = brain_factory(start=False, persistence=_filesystem(tmp_path / "archive"))
    server.env["BRAIN_CELERY_BROKER"] = broker
    server.start()
    # when
    session_id = create_session(server)["id"]
    # then
    [warning] = _wait(
        lambda: _log_entries(server, "the sync broker cannot be reached"), WATCH_SECONDS, "the broker warning"
    )
    assert (warning["level"], warning["broker"]) == ("warning", broker)
    assert f"connecting to 127.0.0.1:{port}" in warning["error"]
    status = _sync(server, session_id)
    assert (status["pending"], status["error"]) == (True, "the sync broker cannot be reached")
    assert (
        _log_entries(server, "no sync worker answers on the broker: uploads wait until `manage.py syncworker` runs")
        == []
    )
