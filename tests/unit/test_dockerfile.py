"""The container image as far as it can be checked without a container daemon: the Dockerfile's
instructions are parsed, the files it copies are laid out in a directory per stage as the image
would hold them (the project's venv standing in for the image's), and its entry point and health
check are run from that layout with the image's environment."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.fixtures.provider import ScriptedProvider
from tests.fixtures.server import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
START_SECONDS = 60.0  # bounded waits, never timed assertions
STOP_SECONDS = 30.0
# Variables of the base image, Python and pip that the image may set besides Brain's own.
PLATFORM_VARIABLES = {
    "PATH",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PIP_NO_CACHE_DIR",
    "PIP_DISABLE_PIP_VERSION_CHECK",
}
# Where the project reads its BRAIN_* variables.
PROJECT_SOURCES = ("manage.py", "brainsite", "foundation", "sessions_app", "tools_app", "persistence_app", "fleet_app")


@dataclass
class Instruction:
    keyword: str  # upper case
    arguments: str  # the rest of the (joined) line
    flags: dict[str, str] = field(default_factory=dict)  # --from=..., --interval=...

    def exec_form(self) -> list[str]:
        """The JSON exec form's array (the only form this project's Dockerfile uses for commands)."""
        value = json.loads(self.arguments)
        assert isinstance(value, list) and all(isinstance(item, str) for item in value), self.arguments
        return value


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [instruction for instruction in self.instructions if instruction.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name} has no {keyword}"
        return found[-1]

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """The stage's ENV instructions applied in order over `base`, $NAME and ${NAME} expanded."""
        env = dict(base)
        for instruction in self.all("ENV"):
            for pair in shlex.split(instruction.arguments):
                name, separator, value = pair.partition("=")
                assert separator, f"ENV {pair!r}: use NAME=value"
                env[name] = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), ""), value)
        return env

    def workdir(self) -> str:
        directory = "/"
        for instruction in self.all("WORKDIR"):
            directory = str(Path(directory) / instruction.arguments)
        return directory


def _logical_lines(text: str) -> Iterator[str]:
    """Instructions with their continuation lines joined; comments and blank lines dropped."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"


def parse_dockerfile(text: str) -> list[Stage]:
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, rest = line.partition(" ")
        rest = rest.strip()
        flags: dict[str, str] = {}
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags[name] = value
            rest = rest.strip()
        instruction = Instruction(keyword.upper(), rest, flags)
        if instruction.keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            stages.append(Stage(base=base.strip(), name=name.strip() or str(len(stages)), instructions=[]))
            continue
        if not stages and instruction.keyword == "ARG":
            continue  # a build argument FROM may use
        assert stages, f"{keyword} before FROM"
        stages[-1].instructions.append(instruction)
    return stages


STAGES = parse_dockerfile(DOCKERFILE.read_text())
BUILDER, RUNTIME = STAGES[0], STAGES[-1]


def _ignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as (excluded?, regex) in file order; the last match decides."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        index = 0
        while index < len(pattern):
            if pattern.startswith("**/", index):
                regex += "(?:.*/)?"
                index += 3
            elif pattern.startswith("**", index):
                regex += ".*"
                index += 2
            elif pattern[index] == "*":
                regex += "[^/]*"
                index += 1
            elif pattern[index] == "?":
                regex += "[^/]"
                index += 1
            else:
                regex += re.escape(pattern[index])
                index += 1
        patterns.append((exclude, re.compile(regex)))
    return patterns


IGNORE = _ignore_patterns()


def ignored(relative: str) -> bool:
    """Whether the build context leaves `relative` out: a pattern matching the path or one of
    its parent directories excludes it; a later `!pattern` brings it back."""
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[: count + 1]) for count in range(len(parts))]
    result = False
    for exclude, regex in IGNORE:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            result = exclude
    return result


def _copy_sources(instruction: Instruction) -> tuple[list[str], str]:
    *sources, destination = shlex.split(instruction.arguments)
    return sources, destination


def _in(root: Path, image_path: str) -> Path:
    return root / image_path.lstrip("/")


def _map_paths(value: str, root: Path) -> str:
    """Image paths inside a `:`-separated value, as this machine reaches them: a path the image
    layout holds (its venv, /app, /config, /data) maps into `root`; others are the system's."""
    mapped = []
    for part in value.split(":"):
        top = part.lstrip("/").split("/")[0]
        mapped.append(str(_in(root, part)) if part.startswith("/") and top and (root / top).exists() else part)
    return ":".join(mapped)


def _build_stage(stage: Stage, root: Path, roots: dict[str, Path]) -> None:
    """Lay out what `stage` copies under `root`. The project's venv stands in for the one the
    stage creates; of its RUN steps only those running manage.py (the layout's own build steps,
    collectstatic) run here, since system provisioning (pip, useradd) has the host's stand-ins."""
    root.mkdir()
    env = stage.environment({"PATH": os.environ["PATH"], "LANG": "C.UTF-8"})
    workdir = "/"
    for instruction in stage.instructions:
        if instruction.keyword == "WORKDIR":
            workdir = str(Path(workdir) / instruction.arguments)
            _in(root, workdir).mkdir(parents=True, exist_ok=True)
        elif instruction.keyword == "RUN":
            venv = re.search(r"python -m venv (\S+)", instruction.arguments)
            if venv:
                _in(root, venv.group(1)).parent.mkdir(parents=True, exist_ok=True)
                _in(root, venv.group(1)).symlink_to(Path(sys.prefix))
            elif "manage.py" in instruction.arguments:
                mapped = {name: _map_paths(value, root) for name, value in env.items()}
                subprocess.run(
                    ["sh", "-c", instruction.arguments], cwd=_in(root, workdir), env=mapped, check=True, timeout=300
                )
        elif instruction.keyword == "COPY":
            sources, destination = _copy_sources(instruction)
            target = _in(root, str(Path(workdir) / destination))
            for source in sources:
                origin = _in(roots[instruction.flags["from"]], source) if "from" in instruction.flags else ROOT / source
                into = target / origin.name if destination.endswith("/") and origin.is_file() else target
                if origin.is_symlink():
                    into.parent.mkdir(parents=True, exist_ok=True)
                    into.symlink_to(origin.readlink())
                elif origin.is_dir():
                    shutil.copytree(origin, into, symlinks=True, dirs_exist_ok=True, ignore=_context_filter(origin))
                else:
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, into)
        elif instruction.keyword == "VOLUME":
            for volume in json.loads(instruction.arguments):
                _in(root, volume).mkdir(parents=True, exist_ok=True)


def _context_filter(origin: Path) -> Callable[[str, list[str]], set[str]]:
    """shutil.copytree's ignore callback: what the build context leaves out of `origin`."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        if not Path(directory).is_relative_to(ROOT):
            return set()  # copied from another stage: no build context filter
        relative = Path(directory).relative_to(ROOT)
        return {name for name in names if ignored(str(relative / name))}

    return ignore


@dataclass
class ImageLayout:
    root: Path  # the runtime stage's file system
    env: dict[str, str]  # its environment, image paths mapped into root
    workdir: Path
    command: list[str]  # ENTRYPOINT + CMD
    health: list[str]  # the HEALTHCHECK command


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> ImageLayout:
    base = tmp_path_factory.mktemp("image")
    roots: dict[str, Path] = {}
    for stage in STAGES:
        roots[stage.name] = base / stage.name
        _build_stage(stage, roots[stage.name], roots)
    root = roots[RUNTIME.name]
    # slim's PATH and LANG; HOME as Docker sets it from the user's passwd entry
    base_env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "HOME": "/nonexistent"}
    image_env = RUNTIME.environment(base_env)
    (root / "config").mkdir(exist_ok=True)  # where the operator mounts the host config
    env = {name: _map_paths(value, root) for name, value in image_env.items()}
    health = RUNTIME.last("HEALTHCHECK")
    assert health.arguments.startswith("CMD ")
    health_command = json.loads(health.arguments.removeprefix("CMD "))
    command = RUNTIME.last("ENTRYPOINT").exec_form() + RUNTIME.last("CMD").exec_form()
    return ImageLayout(root, env, _in(root, RUNTIME.workdir()), command, health_command)


def test_every_path_the_dockerfile_copies_from_the_build_context_exists_and_is_not_ignored() -> None:
    # given
    copies = [instruction for stage in STAGES for instruction in stage.all("COPY") if "from" not in instruction.flags]
    # when
    sources = [source for instruction in copies for source in _copy_sources(instruction)[0]]
    # then
    assert len(sources) == 13
    assert [source for source in sources if not (ROOT / source).exists()] == []
    assert [source for source in sources if ignored(source)] == []


def test_the_runtime_stage_copies_from_the_builder_only_what_it_built() -> None:
    # given
    copies = [instruction for instruction in RUNTIME.all("COPY")]
    # then
    assert [(instruction.flags.get("from"), instruction.arguments) for instruction in copies] == [
        ("builder", "/opt/venv /opt/venv"),
        ("builder", "/app /app"),
    ]
    assert BUILDER.name == "builder"
    assert RUNTIME.base == "python:3.11-slim" == BUILDER.base


def test_the_image_installs_the_runtime_requirements_only() -> None:
    # given
    runs = [instruction.arguments for instruction in BUILDER.all("RUN")]
    # then
    assert "pip install -r requirements.txt" in runs
    assert "requirements-dev" not in DOCKERFILE.read_text()
    assert [instruction.arguments for instruction in BUILDER.all("COPY")][0] == "requirements.txt ./"


def test_the_image_runs_as_a_numeric_non_root_user_that_it_creates() -> None:
    # given
    user = RUNTIME.last("USER").arguments
    created = re.search(r"useradd .*--uid (\d+)", " ".join(i.arguments for i in RUNTIME.all("RUN")))
    # then
    assert created is not None
    uid, _, gid = user.partition(":")
    assert uid == created.group(1) == gid == "10001"
    assert uid != "0"


def test_every_variable_the_image_sets_is_read_by_the_project() -> None:
    # given
    names = [name for stage in STAGES for name in stage.environment({})]
    sources = "".join(
        path.read_text()
        for source in PROJECT_SOURCES
        for path in ([ROOT / source] if source.endswith(".py") else (ROOT / source).rglob("*.py"))
    )
    # when
    brain = sorted({name for name in names if name not in PLATFORM_VARIABLES})
    unread = [name for name in brain if f'"{name}"' not in sources]
    # then
    assert brain == ["BRAIN_CONFIG", "BRAIN_DATA_DIR"]
    assert unread == []
    assert [name for name in names if not name.startswith("BRAIN_") and name not in PLATFORM_VARIABLES] == []


def test_the_data_dir_is_a_volume_owned_by_the_image_user() -> None:
    # given
    volumes = [volume for instruction in RUNTIME.all("VOLUME") for volume in json.loads(instruction.arguments)]
    env = RUNTIME.environment({})
    # then
    assert volumes == ["/data"]
    assert env["BRAIN_DATA_DIR"] == "/data"
    assert "install -d -o 10001 -g 10001 -m 0700 /data" in RUNTIME.all("RUN")[0].arguments


@pytest.mark.parametrize(
    "path",
    [
        ".venv",
        ".venv/bin/python",
        ".git",
        ".git/HEAD",
        ".brain",
        ".brain/metadata.sqlite",
        ".brain-archive",
        "brain.json",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        "brainsite/__pycache__",
        "brainsite/__pycache__/settings.cpython-311.pyc",
        "staticfiles",
        "tests",
        "deploy/kubernetes",
    ],
)
def test_the_build_context_leaves_out_local_state_and_caches(path: str) -> None:
    assert ignored(path) is True


def test_the_build_context_keeps_what_the_image_copies() -> None:
    assert [ignored(path) for path in ("manage.py", "brainsite/settings.py", "deploy/fleet_config.py")] == [
        False,
        False,
        False,
    ]


def _health(image: ImageLayout) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(image.health, cwd=image.workdir, env=image.env, capture_output=True, timeout=30)


@pytest.mark.timeout(600)  # collectstatic, then runbrain and a turn: about 30 s on 2 busy cores
def test_the_entry_point_starts_runbrain_from_the_image_layout_and_the_health_check_follows_it(
    image: ImageLayout, scripted_provider: ScriptedProvider
) -> None:
    # given: a host config mounted where $BRAIN_CONFIG says, state under the /data volume
    port = free_port()
    token = "t" * 32
    config = {
        "listen": f"127.0.0.1:{port}",
        "public_url": f"http://127.0.0.1:{port}",
        "data_dir": str(image.root / "data" / "brain"),
        "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "acme", "manage": True}],
        "harnesses": {"loop": {"command": ["python", "-m", "runners.loop"]}},
        "providers": scripted_provider.providers("OPENAI_API_KEY"),
    }
    config_path = Path(image.env["BRAIN_CONFIG"])
    assert config_path == image.root / "config" / "brain.json"
    config_path.write_text(json.dumps(config))
    env = {**image.env, "BRAIN_API_KEY": token, "OPENAI_API_KEY": "scripted-provider-key"}
    assert image.command[:2] == ["sh", "-c"]
    assert _health(image).returncode == 1  # nothing listens yet
    log = (image.root / "runbrain.log").open("wb")
    # when
    # its own process group, so that whatever outlives a failed run is killed at the end
    process = subprocess.Popen(
        image.command, cwd=image.workdir, env=env, stdout=log, stderr=log, start_new_session=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_SECONDS
        ready = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                ready = httpx.get(f"{url}/health/ready", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        # then: runbrain itself answers (PID 1 after the shell's exec), migrated, static files served
        assert process.poll() is None, (image.root / "runbrain.log").read_text()
        assert ready is not None and ready.json() == {"status": "ready"}
        assert _health(image).returncode == 0
        login = httpx.get(f"{url}/admin/login/", timeout=10)
        hashed = re.search(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', login.text)
        assert login.status_code == 200 and hashed is not None
        assert httpx.get(url + hashed.group(1), timeout=10).status_code == 200
        created = httpx.post(
            f"{url}/sessions",
            headers={"Authorization": f"Bearer {token}"},
            json={"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}},
            timeout=10,
        )
        assert created.status_code == 201, created.text
        assert (image.root / "data" / "brain" / "sessions" / created.json()["id"] / "events.jsonl").is_file()
        assert (image.root / "data" / "brain").stat().st_mode & 0o777 == 0o700
        # a turn: the loop runner starts as a child from the layout and answers through the provider
        session_url = f"{url}/sessions/{created.json()['id']}"
        headers = {"Authorization": f"Bearer {token}"}
        sent = httpx.post(f"{session_url}/events", headers=headers, json={"type": "user.message", "text": "hello"})
        assert sent.status_code == 202, sent.text
        replies: list[str] = []
        deadline = time.monotonic() + START_SECONDS
        while not replies and time.monotonic() < deadline:
            events = httpx.get(f"{session_url}/events", headers=headers, params={"limit": 100}, timeout=10).json()
            replies = [event["data"]["text"] for event in events["events"] if event["type"] == "assistant.message"]
            time.sleep(0.1)
        assert len(replies) == 1 and replies[0].startswith("Hello! I am the scripted demo model")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            returncode = process.wait(timeout=STOP_SECONDS)
        finally:
            with contextlib.suppress(ProcessLookupError):  # a runbrain the shell did not exec
                os.killpg(process.pid, signal.SIGKILL)
            log.close()
    # then: SIGTERM reached runbrain (the shell exec'd it) and it drained and exited cleanly
    assert returncode == 0, (image.root / "runbrain.log").read_text()
    assert _health(image).returncode == 1
