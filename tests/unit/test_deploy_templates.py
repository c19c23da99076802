"""The deployment templates under deploy/ (compose, Kubernetes, Fly.io, ECS) against the project:
every file parses; every container of Brain's image runs a command, management command and flags
that exist, from files the image holds; every environment variable it is given is one the project
or its host config reads; every host config it names exists and passes `check_brain_config` with
exactly the environment the template gives it."""

from __future__ import annotations

import functools
import json
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_dockerfile import BUILDER, RUNTIME, ignored, parse_dockerfile

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TEMPLATES = [
    "compose/brain-a.json",
    "compose/brain-b.json",
    "compose/brain-c.json",
    "compose/docker-compose.yml",
    "ecs/brain.json",
    "ecs/service.json",
    "ecs/task-definition.json",
    "fly/brain.json",
    "fly/fly.toml",
    "kubernetes/configmap.yaml",
    "kubernetes/deployment.yaml",
    "kubernetes/kustomization.yaml",
    "kubernetes/migrate-job.yaml",
    "kubernetes/pdb.yaml",
    "kubernetes/secrets.example.yaml",
    "kubernetes/service.yaml",
]
IMAGE_ENV = RUNTIME.environment({})
IMAGE_ENTRYPOINT = RUNTIME.last("ENTRYPOINT").exec_form()
IMAGE_COMMAND = IMAGE_ENTRYPOINT + RUNTIME.last("CMD").exec_form()
IMAGE_HEALTH = json.loads(RUNTIME.last("HEALTHCHECK").arguments.removeprefix("CMD "))
# What the image holds under its WORKDIR: the build context paths the builder copies.
IMAGE_FILES = [source for instruction in BUILDER.all("COPY") for source in shlex.split(instruction.arguments)[:-1]]
# Where the project reads its variables: the server, and the example tool service the compose file runs.
PROJECT_SOURCES = (
    "manage.py",
    "brainsite",
    "foundation",
    "sessions_app",
    "tools_app",
    "persistence_app",
    "fleet_app",
    "examples",
)
RUNBRAIN = ROOT / "brainsite" / "management" / "commands" / "runbrain.py"
# How long runbrain's SIGTERM drain may take (stop the runtime, upload and release in a fleet).
DRAIN_SECONDS = float(re.search(r"^SHUTDOWN_SECONDS = ([0-9.]+)", RUNBRAIN.read_text(), re.M).group(1))  # type: ignore[union-attr]  # the constant exists: the test fails loudly otherwise
EXIT_MARGIN_SECONDS = 5  # Daphne closing connections, the interpreter exiting
DRAIN = ROOT / "brainsite" / "drain.py"
# BRAIN_DRAIN_SECONDS' upper bound: the grace period runbrain answers through after SIGTERM
MAX_GRACE_SECONDS = float(re.search(r"^MAX_DRAIN_SECONDS = ([0-9.]+)", DRAIN.read_text(), re.M).group(1))  # type: ignore[union-attr]  # the constant exists: the test fails loudly otherwise
# Variables of the platform a template may give Brain's containers (none: Brain's own only).
PLATFORM_VARIABLES: frozenset[str] = frozenset()


def _load(relative: str) -> list[Any]:
    path = DEPLOY / relative
    if path.suffix == ".json":
        return [json.loads(path.read_text())]
    if path.suffix == ".toml":
        return [tomllib.loads(path.read_text())]
    return list(yaml.safe_load_all(path.read_text()))


def _one(relative: str) -> Any:
    (document,) = _load(relative)
    return document


def _project_sources() -> str:
    return "".join(
        path.read_text()
        for source in PROJECT_SOURCES
        for path in ([ROOT / source] if source.endswith(".py") else sorted((ROOT / source).rglob("*.py")))
    )


PROJECT_TEXT = _project_sources()


def _config_variables(config: dict[str, Any]) -> set[str]:
    """Every environment variable a host config names (`*_env` fields, credential keys)."""
    names: set[str] = set()

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for child_key, child in value.items():
                walk(child, child_key)
            if key == "credential_keys":
                names.update(value.get("keys", {}).values())
        elif isinstance(value, list):
            for child in value:
                walk(child, key)
        elif key.endswith("_env") and isinstance(value, str) and value:
            names.add(value)

    walk(config)
    return names


@dataclass
class Container:
    """One container of Brain's image in a template, as the image would run it."""

    where: str  # template and service / container name
    argv: list[str]  # what the container executes (the image's entry point applied)
    env: dict[str, str]  # every variable it is given, with the value the template gives or a stand-in
    configs: dict[str, dict[str, Any]]  # host configs readable inside it: image path -> contents
    given: frozenset[str]  # the variables the template sets (env also holds the image's own)


def _stand_in(name: str) -> str:
    """A value for a secret a template takes from its platform: long and unique, as secrets are."""
    return f"{name.lower()}-{secrets.token_hex(20)}"


def _interpolated(value: str) -> str:
    """A compose value with each ${VAR...} replaced as compose would, by a (stand-in) value."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}", lambda match: _stand_in(match.group(1)), value)


def _effective(argv: list[str], env: dict[str, str]) -> list[str]:
    """The command the image's `sh -c 'exec ...' NAME ARGS` entry point runs: the shell's
    expansion of $VAR and "$@", which is all it does."""
    if argv[:2] != ["sh", "-c"]:
        return argv
    script, positional = shlex.split(argv[2]), argv[4:]
    assert script[0] == "exec", argv[2]
    result: list[str] = []
    for word in script[1:]:
        if word == "$@":
            result.extend(positional)
        else:
            result.append(re.sub(r"\$([A-Z_]+)", lambda match: env[match.group(1)], word))
    return result


def _compose_containers() -> Iterator[Container]:
    compose = _one("compose/docker-compose.yml")
    for name, service in compose["services"].items():
        if service.get("image") != "brain:local":
            continue
        env = dict(IMAGE_ENV)
        env.update({key: _interpolated(str(value)) for key, value in service.get("environment", {}).items()})
        # compose: an entrypoint given replaces the image's and drops its CMD
        argv = service["entrypoint"] if "entrypoint" in service else IMAGE_COMMAND + service.get("command", [])
        configs = {}
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                path = DEPLOY / "compose" / source
                assert path.is_file(), f"compose {name}: {source} does not exist"
                configs[target] = json.loads(path.read_text())
        given = frozenset(service.get("environment", {}))
        yield Container(f"compose {name}", _effective(argv, env), env, configs, given)


def _kubernetes_secrets() -> dict[tuple[str, str], str]:
    """The example's Secrets, each `replace-...` placeholder replaced as the example tells the
    operator to (the fleet secret's placeholder is refused at startup)."""
    return {
        (document["metadata"]["name"], key): _stand_in(key) if value.startswith("replace-") else value
        for document in _load("kubernetes/secrets.example.yaml")
        for key, value in document["stringData"].items()
    }


POD = {"POD_NAME": "brain-7d9f8c6b5-x2k4q", "POD_IP": "10.0.3.7"}  # what the downward API gives a pod


def _kubernetes_containers(*, init: bool) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, container, pod spec) for every container of Brain's image in the manifests."""
    for relative in ("kubernetes/deployment.yaml", "kubernetes/migrate-job.yaml"):
        for document in _load(relative):
            spec = document["spec"]["template"]["spec"]
            for container in spec.get("initContainers" if init else "containers", []):
                if container["image"] == "brain":
                    yield f"{relative} {container['name']}", container, spec


def _kubernetes_env(container: dict[str, Any]) -> dict[str, str]:
    stored = _kubernetes_secrets()
    env = dict(IMAGE_ENV)
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        elif "secretKeyRef" in variable.get("valueFrom", {}):
            reference = variable["valueFrom"]["secretKeyRef"]
            key = (reference["name"], reference["key"])
            assert key in stored, f"{container['name']}: no Secret {key[0]} with key {key[1]}"
            env[variable["name"]] = stored[key]
        else:
            field = variable["valueFrom"]["fieldRef"]["fieldPath"]
            assert field in ("metadata.name", "status.podIP"), field
            env[variable["name"]] = POD[variable["name"]]
    return env


def _kubernetes_argv(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """command replaces the image's ENTRYPOINT, args its CMD; $(VAR) takes the container's env."""
    if "command" in container:
        argv = container["command"] + container.get("args", [])
    else:
        argv = IMAGE_ENTRYPOINT + container.get("args", [])
    expanded = [re.sub(r"\$\(([A-Z_]+)\)", lambda match: env[str(match.group(1))], word) for word in argv]
    return _effective(expanded, env)


def _rendered_kubernetes_config(tmp_path: Path) -> dict[str, Any]:
    """The pod's host config, written by the fleet-config init container's own command line run
    here (from the image's files, the ConfigMap mounted where the pod mounts it)."""
    (where, container, spec) = next(
        item for item in _kubernetes_containers(init=True) if item[1]["name"] == "fleet-config"
    )
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    configmap = _one("kubernetes/configmap.yaml")
    assert volumes["config"]["configMap"]["name"] == configmap["metadata"]["name"]
    root = tmp_path / "pod"
    for key, text in configmap["data"].items():
        (root / mounts["config"].lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / mounts["config"].lstrip("/") / key).write_text(text)
    (root / mounts["run"].lstrip("/")).mkdir(parents=True)
    argv = _kubernetes_argv(container, _kubernetes_env(container))
    mapped = [str(root / word.lstrip("/")) if word.startswith("/") else word for word in argv]
    assert mapped[:2] == ["python", "deploy/fleet_config.py"]
    subprocess.run([sys.executable, *mapped[1:]], cwd=ROOT, check=True, timeout=60)
    written = root / argv[-1].lstrip("/")
    config: dict[str, Any] = json.loads(written.read_text())
    return config


def _kubernetes_containers_all(tmp_path: Path) -> Iterator[Container]:
    rendered = _rendered_kubernetes_config(tmp_path)
    for init in (True, False):
        for where, container, _ in _kubernetes_containers(init=init):
            env = _kubernetes_env(container)
            mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
            configs = {"/run/brain/brain.json": rendered} if "/run/brain" in mounts and not init else {}
            given = frozenset(variable["name"] for variable in container.get("env", []))
            yield Container(where, _kubernetes_argv(container, env), env, configs, given)


def _fly_container() -> Container:
    fly = _one("fly/fly.toml")
    # `fly secrets set NAME=... ...` in the file's instructions: the secrets the Machine gets
    header = (DEPLOY / "fly" / "fly.toml").read_text().split("\napp =")[0]
    fly_secrets = {name: _stand_in(name) for name in re.findall(r"\b([A-Z][A-Z0-9_]+)=\.\.\.", header)}
    env = {**IMAGE_ENV, **fly["env"], **fly_secrets}
    configs = {}
    for item in fly["files"]:
        path = ROOT / item["local_path"]
        assert path.is_file(), item["local_path"]
        configs[item["guest_path"]] = json.loads(path.read_text())
    given = frozenset(fly["env"]) | frozenset(fly_secrets)
    return Container("fly/fly.toml", _effective(IMAGE_COMMAND, env), env, configs, given)


def _ecs_container() -> Container:
    (definition,) = _one("ecs/task-definition.json")["containerDefinitions"]
    given = {item["name"]: item["value"] for item in definition["environment"]}
    given |= {item["name"]: _stand_in(item["name"]) for item in definition["secrets"]}
    env = {**IMAGE_ENV, **given}
    (stage,) = parse_dockerfile((DEPLOY / "ecs" / "Dockerfile").read_text())
    configs = {}
    for instruction in stage.all("COPY"):
        source, target = shlex.split(instruction.arguments)
        assert (ROOT / source).is_file() and not ignored(source), source
        configs[target] = json.loads((ROOT / source).read_text())
    return Container("ecs/task-definition.json", _effective(IMAGE_COMMAND, env), env, configs, frozenset(given))


@pytest.fixture(scope="module")
def containers(tmp_path_factory: pytest.TempPathFactory) -> list[Container]:
    return [
        *_compose_containers(),
        *_kubernetes_containers_all(tmp_path_factory.mktemp("kubernetes")),
        _fly_container(),
        _ecs_container(),
    ]


# One interpreter for every management command's help: Django starts once.
MANAGEMENT_HELP = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "brainsite.settings")
import django
django.setup()
from django.core.management import get_commands, load_command_class
commands = get_commands()
print(json.dumps({name: load_command_class(commands[name], name).create_parser("manage.py", name).format_help()
                  for name in commands}))
"""


@functools.cache
def _management_commands() -> dict[str, str]:
    """Every management command's name and --help text."""
    done = subprocess.run(
        [sys.executable, "-c", MANAGEMENT_HELP], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    commands: dict[str, str] = json.loads(done.stdout)
    return commands


def _help(prefix: tuple[str, ...]) -> str:
    if prefix[1] == "manage.py":
        return _management_commands()[prefix[2]]
    done = subprocess.run(
        [sys.executable, *prefix[1:], "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def _in_image(relative: str) -> bool:
    return any(relative == source.rstrip("/") or relative.startswith(source) for source in IMAGE_FILES)


def _config_path(container: Container) -> str | None:
    if "--config" in container.argv:
        return container.argv[container.argv.index("--config") + 1]
    return None


def test_the_templates_are_these_and_each_parses() -> None:
    # given
    found = sorted(
        str(path.relative_to(DEPLOY))
        for path in DEPLOY.rglob("*")
        if path.suffix in (".json", ".yml", ".yaml", ".toml") and path.relative_to(DEPLOY).parts[0] != "nginx"
    )
    # then
    assert found == TEMPLATES
    assert [len(_load(relative)) for relative in TEMPLATES] == [1] * 14 + [2, 1]  # two Secrets in one file
    assert [type(document).__name__ for relative in TEMPLATES for document in _load(relative)] == ["dict"] * 17


@pytest.mark.timeout(600)  # a Django start and four --help runs
def test_every_container_runs_a_command_of_the_project_from_files_the_image_holds(
    containers: list[Container],
) -> None:
    # given
    commands = _management_commands()
    # when
    ran = []
    for container in containers:
        argv = container.argv
        assert argv[0] == "python", container.where
        if argv[1] == "manage.py":
            assert argv[2] in commands, f"{container.where}: no management command {argv[2]}"
            prefix: tuple[str, ...] = ("python", "manage.py", argv[2])
            rest = argv[3:]
        elif argv[1] == "-m":
            assert _in_image(argv[2].replace(".", "/") + "/__main__.py"), container.where
            prefix, rest = ("python", "-m", argv[2]), argv[3:]
        else:
            assert _in_image(argv[1]) and (ROOT / argv[1]).is_file(), f"{container.where}: {argv[1]}"
            prefix, rest = ("python", argv[1]), argv[2:]
        flags = [word.split("=")[0] for word in rest if word.startswith("--")]
        unknown = [flag for flag in flags if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", _help(prefix))]
        assert unknown == [], f"{container.where}: {' '.join(prefix)} has no {unknown}"
        ran.append(" ".join(prefix))
    # then
    assert sorted(ran) == sorted(
        ["python manage.py runbrain"] * 3
        + ["python manage.py syncworker"] * 3
        + ["python manage.py migrate", "python -m examples.tools"]
        + ["python deploy/fleet_config.py", "python manage.py migrate", "python manage.py runbrain"]
        + ["python manage.py migrate"]
        + ["python manage.py runbrain"] * 2
    )


def test_every_variable_a_container_is_given_is_read_by_the_project_or_its_host_config(
    containers: list[Container],
) -> None:
    unread = []
    for container in containers:
        named = set().union(*(_config_variables(config) for config in container.configs.values()))
        for name in sorted(container.given):
            read = f'"{name}"' in PROJECT_TEXT and name.startswith("BRAIN_")
            if not (read or name in named or name in POD or name in PLATFORM_VARIABLES):
                unread.append(f"{container.where}: {name}")
    assert unread == []


def test_every_host_config_a_container_reads_is_the_one_mounted_at_its_config_path(
    containers: list[Container],
) -> None:
    # given
    serving = [container for container in containers if "runbrain" in container.argv or "syncworker" in container.argv]
    # then: runbrain and syncworker read $BRAIN_CONFIG / --config, and a file is there
    assert len(serving) == 9
    for container in serving:
        path = _config_path(container)
        assert path == container.env["BRAIN_CONFIG"], container.where
        assert list(container.configs) == [path], container.where


def _check(config: dict[str, Any], env: dict[str, str], directory: Path) -> subprocess.Popen[str]:
    """`manage.py check_brain_config` on `config` (its data_dir moved under `directory`: this
    machine has no /data) with exactly `env` (and the system's PATH), started."""
    local = {**config, "data_dir": str(directory / config["data_dir"].lstrip("/"))}
    path = directory / "brain.json"
    path.write_text(json.dumps(local))
    environment = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **env, "BRAIN_CONFIG": str(path)}
    return subprocess.Popen(
        [sys.executable, "manage.py", "check_brain_config", "--config", str(path)],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _outcome(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, stdout.strip(), stderr.strip()[-300:]


@pytest.mark.timeout(
    600
)  # six Django starts side by side: about 15 s alone on 2 cores, minutes while the machine is busy
def test_every_host_config_passes_check_brain_config_with_the_environment_its_template_gives(
    containers: list[Container], tmp_path: Path
) -> None:
    # given: one check per distinct (config, environment) a container runs with
    checks: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {}
    for container in containers:
        for config in container.configs.values():
            names = tuple(sorted(container.env))
            checks.setdefault(json.dumps([config, names], sort_keys=True), (container.where, config, container.env))
    # when: the checks run side by side (each is a Django start)
    started = {}
    for index, (where, config, env) in enumerate(checks.values()):
        (tmp_path / str(index)).mkdir()
        started[where] = (_check(config, env, tmp_path / str(index)), tmp_path / str(index) / "brain.json")
    outcomes = {where: _outcome(process) for where, (process, _) in started.items()}
    # then
    assert len(outcomes) == 6  # three compose instances, the pod, Fly, ECS
    assert outcomes == {where: (0, f"config {path} is valid", "") for where, (_, path) in started.items()}


def test_a_host_config_check_refuses_a_template_environment_missing_a_secret(tmp_path: Path) -> None:
    # given: the compose instance's environment without the fleet secret
    brain_a = next(container for container in _compose_containers() if container.where == "compose brain-a")
    env = {name: value for name, value in brain_a.env.items() if name != "BRAIN_FLEET_SECRET"}
    # when
    returncode, stdout, stderr = _outcome(_check(brain_a.configs["/config/brain.json"], env, tmp_path))
    # then
    assert (returncode, stdout) == (1, "")
    assert stderr.endswith("cluster: environment variable BRAIN_FLEET_SECRET is not set")


def test_the_compose_fleet_gives_each_instance_its_name_url_volume_and_broker() -> None:
    # given
    compose = _one("compose/docker-compose.yml")
    services = compose["services"]
    nginx = (DEPLOY / "compose" / "nginx.conf").read_text()
    # then
    for name in ("brain-a", "brain-b", "brain-c"):
        config = json.loads((DEPLOY / "compose" / f"{name}.json").read_text())
        port = config["listen"].rpartition(":")[2]
        assert config["cluster"] == {"instance": name, "url": f"http://{name}:{port}", "lease_seconds": 10}
        worker = services[name.replace("brain", "syncworker")]
        # a sync worker publishes from its instance's data dir, with work from its instance's broker
        assert worker["volumes"] == services[name]["volumes"]
        assert worker["environment"]["BRAIN_CELERY_BROKER"] == services[name]["environment"]["BRAIN_CELERY_BROKER"]
        assert nginx.count(f"server {name}:{port} ") == 2
        seconds = int(services[name]["stop_grace_period"].removesuffix("s"))
        assert seconds >= DRAIN_SECONDS + EXIT_MARGIN_SECONDS
    brokers = [services[name]["environment"]["BRAIN_CELERY_BROKER"] for name in ("brain-a", "brain-b", "brain-c")]
    assert len(set(brokers)) == 3
    assert [line.strip() for line in nginx.splitlines() if "proxy_buffering" in line] == ["proxy_buffering off;"]
    assert "proxy_set_header Upgrade $http_upgrade;" in nginx
    assert set(services) == {
        "postgres",
        "redis",
        "minio",
        "archive-bucket",
        "migrate",
        "tools",
        "brain-a",
        "brain-b",
        "brain-c",
        "syncworker-a",
        "syncworker-b",
        "syncworker-c",
        "nginx",
    }


REDIS_URL = re.compile(r"redis://[^\s\"']*")


def test_the_compose_redis_and_postgresql_take_passwords_and_every_redis_url_carries_redis_one() -> None:
    # given
    text = (DEPLOY / "compose" / "docker-compose.yml").read_text()
    services = _one("compose/docker-compose.yml")["services"]
    password = "${REDIS_PASSWORD:?set REDIS_PASSWORD}"
    # then: Redis refuses clients without the password, its health check logs in with it
    assert services["redis"]["command"] == ["redis-server", "--requirepass", password]
    assert services["redis"]["environment"] == {"REDISCLI_AUTH": password}
    urls = [text[match.start() :].partition("\n")[0] for match in re.finditer("redis://", text)]
    assert len(urls) == 7  # the relay's, and each instance's broker for it and its sync worker
    assert all(url.startswith(f"redis://:{password}@redis:6379/") for url in urls), urls
    # and PostgreSQL takes a password over the network, never trust
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_HOST_AUTH_METHOD"] == "scram-sha-256"
    assert postgres["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    assert "trust" not in text.replace("never trust", "")


def test_the_kubernetes_example_secrets_give_redis_a_password() -> None:
    # given
    fleet, _ = _load("kubernetes/secrets.example.yaml")
    # then
    assert fleet["stringData"]["BRAIN_CHANNEL_REDIS"] == "redis://:replace-with-the-redis-password@redis:6379/0"
    assert all(
        url.startswith("redis://:") for url in REDIS_URL.findall(json.dumps(_load("kubernetes/deployment.yaml")))
    )


def test_the_kubernetes_deployment_drains_within_its_grace_period_and_probes_the_health_routes() -> None:
    # given
    (deployment,) = _load("kubernetes/deployment.yaml")
    spec = deployment["spec"]["template"]["spec"]
    (brain,) = spec["containers"]
    configmap = json.loads(_one("kubernetes/configmap.yaml")["data"]["brain.json"])
    port = int(configmap["listen"].rpartition(":")[2])
    environment = {variable["name"]: variable.get("value") for variable in brain["env"]}
    readiness = brain["readinessProbe"]
    # then: runbrain's whole stop, its grace period included, fits in the pod's; no preStop pause
    # (runbrain keeps answering through its grace period itself)
    assert "lifecycle" not in brain
    assert spec["terminationGracePeriodSeconds"] >= DRAIN_SECONDS + EXIT_MARGIN_SECONDS
    # and the readiness probe sees the drain's 503 within the grace period
    grace = float(environment["BRAIN_DRAIN_SECONDS"])
    assert 0 < grace <= MAX_GRACE_SECONDS
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= grace
    assert brain["ports"] == [{"name": "http", "containerPort": port}]
    assert brain["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
    assert brain["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
    fleet_config = next(container for container in spec["initContainers"] if container["name"] == "fleet-config")
    assert fleet_config["command"][fleet_config["command"].index("--port") + 1] == str(port)
    assert spec["securityContext"]["runAsUser"] == int(RUNTIME.last("USER").arguments.split(":")[0])


def test_the_kubernetes_service_and_budget_select_the_deployment_pods() -> None:
    # given
    deployment = _one("kubernetes/deployment.yaml")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = _one("kubernetes/service.yaml")
    budget = _one("kubernetes/pdb.yaml")
    kustomization = _one("kubernetes/kustomization.yaml")
    # then
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert service["spec"]["selector"] == labels
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert budget["spec"]["selector"]["matchLabels"] == labels
    assert deployment["spec"]["replicas"] == 3
    assert budget["spec"]["maxUnavailable"] == 1
    # every manifest but the example Secrets, which hold placeholders
    assert sorted(kustomization["resources"]) == sorted(
        path.name
        for path in (DEPLOY / "kubernetes").glob("*.yaml")
        if path.name not in ("kustomization.yaml", "secrets.example.yaml")
    )


def test_each_pod_gets_its_own_instance_name_and_url_from_the_downward_api(tmp_path: Path) -> None:
    # when
    config = _rendered_kubernetes_config(tmp_path)
    # then
    assert config["cluster"] == {
        "instance": POD["POD_NAME"],
        "url": f"http://{POD['POD_IP']}:8080",
        "lease_seconds": 10,
    }
    template = json.loads(_one("kubernetes/configmap.yaml")["data"]["brain.json"])
    assert {key: value for key, value in config.items() if key != "cluster"} == {
        key: value for key, value in template.items() if key != "cluster"
    }


def test_the_single_owner_templates_run_one_server_that_drains_before_it_is_killed() -> None:
    # given
    fly = _one("fly/fly.toml")
    fly_config = json.loads((DEPLOY / "fly" / "brain.json").read_text())
    (ecs,) = _one("ecs/task-definition.json")["containerDefinitions"]
    ecs_config = json.loads((DEPLOY / "ecs" / "brain.json").read_text())
    service = _one("ecs/service.json")
    # then: single owner, as the spec's platform guide says
    assert "cluster" not in fly_config and "cluster" not in ecs_config
    assert fly["deploy"]["strategy"] == "immediate"
    assert fly["http_service"]["auto_stop_machines"] == "off"
    assert fly["http_service"]["internal_port"] == int(fly_config["listen"].rpartition(":")[2])
    assert fly["http_service"]["checks"][0]["path"] == "/health/ready"
    assert int(fly["kill_timeout"].removesuffix("s")) >= DRAIN_SECONDS + EXIT_MARGIN_SECONDS
    assert service["desiredCount"] == 1
    assert service["deploymentConfiguration"] == {"minimumHealthyPercent": 0, "maximumPercent": 100}
    assert ecs["portMappings"][0]["containerPort"] == int(ecs_config["listen"].rpartition(":")[2])
    assert ecs["healthCheck"]["command"] == ["CMD", *IMAGE_HEALTH]  # the image's, tested in test_dockerfile
    assert ecs["stopTimeout"] >= DRAIN_SECONDS + EXIT_MARGIN_SECONDS
    assert ecs["user"] == RUNTIME.last("USER").arguments


def _fleet_config(tmp_path: Path, config: dict[str, Any], *arguments: str) -> subprocess.CompletedProcess[str]:
    source, dest = tmp_path / "source.json", tmp_path / "run" / "brain.json"
    source.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "deploy/fleet_config.py", *arguments, str(source), str(dest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_pod_on_an_ipv6_network_gets_a_bracketed_instance_url(tmp_path: Path) -> None:
    # given
    template = json.loads(_one("kubernetes/configmap.yaml")["data"]["brain.json"])
    # when
    done = _fleet_config(tmp_path, template, "--instance", "brain-0", "--address", "fd00:10::7", "--port", "8080")
    # then
    assert (done.returncode, done.stderr) == (0, "")
    written = json.loads((tmp_path / "run" / "brain.json").read_text())
    assert written["cluster"] == {"instance": "brain-0", "url": "http://[fd00:10::7]:8080", "lease_seconds": 10}


def test_fleet_config_refuses_a_config_without_a_cluster_block_and_writes_nothing(tmp_path: Path) -> None:
    # given
    single = json.loads((DEPLOY / "fly" / "brain.json").read_text())
    # when
    done = _fleet_config(tmp_path, single, "--instance", "brain-0", "--address", "10.0.0.1")
    # then
    assert done.returncode == 1
    assert done.stderr.strip() == f"fleet_config: {tmp_path / 'source.json'}: the config has no cluster block"
    assert not (tmp_path / "run").exists()


def test_the_compose_nginx_config_passes_nginx_own_check_where_the_image_includes_it(tmp_path: Path) -> None:
    # given: the official image includes conf.d/*.conf inside `http`; compose's service names
    # resolve only on its network, so the check sees loopback addresses instead
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    compose = _one("compose/docker-compose.yml")
    (mount,) = compose["services"]["nginx"]["volumes"]
    assert mount == "./nginx.conf:/etc/nginx/conf.d/default.conf:ro"
    site = re.sub(r"server brain-[abc]:", "server 127.0.0.1:", (DEPLOY / "compose" / "nginx.conf").read_text())
    (tmp_path / "site.conf").write_text(site)
    kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    temporary = " ".join(f"{kind}_temp_path {tmp_path / kind};" for kind in kinds)
    include = f"include {tmp_path / 'site.conf'};"
    main = f"pid {tmp_path / 'nginx.pid'};\nevents {{}}\nhttp {{ {temporary} access_log off; {include} }}\n"
    (tmp_path / "nginx.conf").write_text(main)
    # when
    done = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # then
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("test is successful")


def test_both_nginx_configs_keep_an_executors_routes_together_by_client_address_alone() -> None:
    # given: the WebSocket RPC handshake carries no Authorization header, registration does
    configs = [DEPLOY / "compose" / "nginx.conf", DEPLOY / "nginx" / "brain-cluster.conf.template"]

    # when
    hashes = [
        [line.strip() for line in path.read_text().splitlines() if line.strip().startswith("hash ")] for path in configs
    ]

    # then: a hash that includes the Authorization header would send the RPC elsewhere
    assert hashes == [["hash $remote_addr consistent;"], ["hash $remote_addr consistent;"]]
