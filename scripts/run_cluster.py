"""`make cluster`: a Brain fleet on this machine, from Debian packages and the project's venv.

PostgreSQL (a private cluster), Redis, moto's S3 server, three `runbrain` instances with
`cluster` blocks, a Celery `syncworker` for each and nginx in front of them
(deploy/nginx/brain-cluster.conf.template), all on loopback. PostgreSQL (scram-sha-256) and
Redis (`requirepass`) each get a random password per run, in the URLs the instances are given and
in cluster.env (mode 0600), never on a command line or in the output. It prints the URL and a token,
streams a demo conversation through nginx with the scripted model of `make run`, and runs until
Ctrl-C or SIGTERM, then stops every process it started. `--exit-after-demo` stops after the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, cast

import httpx
from brain import Brain
from brain.types import Event

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts.demo_keys import DEMO_PROVIDER_KEYS  # noqa: E402  # after the repository root is on the path

DEMO_CONFIG = ROOT / "examples" / "local.json"
NGINX_TEMPLATE = ROOT / "deploy" / "nginx" / "brain-cluster.conf.template"
INSTANCES = ("brain-a", "brain-b", "brain-c")
DEFAULT_PORT = 8088  # nginx; the rest listen on free loopback ports
LEASE_SECONDS = 10
BUCKET = "brain-cluster"
S3_REGION = "us-east-1"
S3_KEYS = {"BRAIN_S3_ACCESS_KEY": "cluster-access-key", "BRAIN_S3_SECRET_KEY": "cluster-secret-key"}  # moto takes any
START_SECONDS = 90.0  # the first instance migrates a fresh database
STOP_SECONDS = 30.0  # runbrain drains within 20 s (BRAIN_DRAIN_SECONDS of answering, uploads, releases)
PR_SET_PDEATHSIG = 1  # prctl(2): a child started here gets SIGTERM if this process dies first
DEMO_MODEL = "openai/gpt-4.1-mini"  # examples/local.json points openai at the scripted provider
# The scripted model turns `call TOOL {json}` into a tool call: the last turn shows tool.call and
# tool.result events from the example tool service.
DEMO_MESSAGES = [
    "Hello! What can you do?",
    "Tell me a fun fact about octopuses.",
    "What was my first message?",
    'call echo {"text": "hello through nginx"}',
]


PASSWORD_BYTES = 16  # random per run, hex: safe in a URL as it is


@dataclass(frozen=True, slots=True)
class Ports:
    """The loopback ports of the shared services, chosen before anything starts, and the
    passwords of PostgreSQL and Redis (anyone on the machine can reach loopback ports)."""

    postgres: int
    redis: int
    s3: int
    provider: int
    tools: int
    postgres_password: str = field(default_factory=lambda: secrets.token_hex(PASSWORD_BYTES), repr=False)
    redis_password: str = field(default_factory=lambda: secrets.token_hex(PASSWORD_BYTES), repr=False)

    def postgres_url(self, database: str) -> str:
        return f"postgres://postgres:{self.postgres_password}@127.0.0.1:{self.postgres}/{database}"

    @property
    def database_url(self) -> str:
        return self.postgres_url("brain")

    @property
    def redis_url(self) -> str:
        return f"redis://:{self.redis_password}@127.0.0.1:{self.redis}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"


class Stopped(Exception):
    """SIGINT or SIGTERM arrived: stop everything."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    stage: int  # stopped in reverse order of stage, a stage's children together
    reported: bool = False  # its exit was reported while the fleet ran

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _redis_answers(port: int, password: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            answer = b""
            while answer.count(b"\r\n") < 2 and (chunk := sock.recv(64)):
                answer += chunk
            return answer == b"+OK\r\n+PONG\r\n"
    except OSError:
        return False


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _binary(name: str, *, hint: str) -> str:
    beside_python = Path(sys.executable).with_name(name)
    search = f"{os.environ.get('PATH', '')}:/usr/sbin"  # nginx lives in /usr/sbin, off a user's PATH
    found = str(beside_python) if beside_python.exists() else shutil.which(name, path=search)
    if found is None:
        raise SystemExit(f"{name} not found: {hint}")
    return found


def _postgres_bin() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parents[1].name))
    if candidates:
        return candidates[-1].parent
    return Path(_binary("initdb", hint="install the Debian package postgresql (`make cluster` does)")).parent


class Cluster:
    """Every process of the fleet: started in order, stopped in reverse, nothing left behind."""

    def __init__(self, *, state: Path, runtime: Path, port: int) -> None:
        self.state = state  # configs, logs and the instances' data dirs
        self.runtime = runtime  # PostgreSQL's data and nginx's temporary files (under /tmp)
        self.logs = state / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.children: list[Child] = []
        self.postgres_data = runtime / "postgres"
        self.postgres_started = False
        self.as_postgres: list[str] = []
        self.instance_ports: dict[str, int] = {}
        self.env = dict(os.environ) | {"DJANGO_SETTINGS_MODULE": "brainsite.settings", "PYTHONUNBUFFERED": "1"}

    def spawn(self, name: str, command: list[str], *, stage: int, env: dict[str, str] | None = None) -> Child:
        log = self.logs / f"{name}.log"
        with log.open("ab") as sink:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env or self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches this script only; it stops the rest in order
                preexec_fn=_die_with_parent,
            )
        child = Child(name, process, log, stage)
        self.children.append(child)
        return child

    def wait_until(self, ready: Callable[[], bool], child: Child, what: str) -> None:
        deadline = time.monotonic() + START_SECONDS
        while not ready():
            if child.process.poll() is not None:
                raise SystemExit(f"{what} exited with code {child.process.returncode}:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{what} did not start within {START_SECONDS:.0f} s:\n{child.tail()}")
            time.sleep(0.1)

    # --- shared services ------------------------------------------------------------------

    def start_postgres(self, ports: Ports) -> None:
        """A throwaway PostgreSQL cluster (scram-sha-256 with the run's password, on loopback and
        its socket alike) with an empty database `brain`."""
        port = ports.postgres
        binaries = _postgres_bin()
        self.postgres_data.mkdir(mode=0o700)
        password_file = self.postgres_data / "password"
        password_file.touch(mode=0o600)
        password_file.write_text(ports.postgres_password + "\n")
        if os.geteuid() == 0:  # initdb and postgres refuse root
            self.as_postgres = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "postgres", "--"]
            shutil.chown(self.postgres_data, user="postgres")
            shutil.chown(password_file, user="postgres")
        data = self.postgres_data / "data"
        initdb = [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-A", "scram-sha-256", "-E", "UTF8"]
        try:
            self._run_postgres([*initdb, f"--pwfile={password_file}", "--locale=C", "--no-sync"], "initdb")
        finally:
            password_file.unlink()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {self.postgres_data} -c fsync=off"
        # in the postgres user's own directory (the state directory may be closed to it); copied
        # to the logs when PostgreSQL stops
        log = self.postgres_data / "postgres.log"
        self.postgres_started = True
        pg_ctl = [str(binaries / "pg_ctl"), "-D", str(data), "-w", "-t", str(int(START_SECONDS))]
        self._run_postgres([*pg_ctl, "-l", str(log), "-o", options, "start"], "pg_ctl start")
        import psycopg

        with psycopg.connect(ports.postgres_url("postgres"), autocommit=True) as connection:
            connection.execute("CREATE DATABASE brain")

    def _run_postgres(self, command: list[str], what: str) -> None:
        result = subprocess.run([*self.as_postgres, *command], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SystemExit(f"{what} failed ({result.returncode}):\n{result.stdout}{result.stderr}")

    def stop_postgres(self) -> None:
        if not self.postgres_started:
            return
        pg_ctl = [*self.as_postgres, str(_postgres_bin() / "pg_ctl"), "-D", str(self.postgres_data / "data")]
        for mode in ("fast", "immediate"):  # immediate only if a fast shutdown fails
            if subprocess.run([*pg_ctl, "stop", "-w", "-m", mode], capture_output=True, check=False).returncode == 0:
                break
        with contextlib.suppress(OSError):
            shutil.copyfile(self.postgres_data / "postgres.log", self.logs / "postgres.log")

    def start_services(self, ports: Ports, env: dict[str, str]) -> None:
        """Redis, moto's S3 server, the scripted model provider and the example tool service of
        `make run` start while PostgreSQL does; then the bucket and the database are created."""
        redis = [_binary("redis-server", hint="install the Debian package redis-server (`make cluster` does)")]
        redis_config = self.state / "redis.conf"  # the password in a file of mode 0600, not on a command line
        redis_config.touch(mode=0o600)
        redis_config.write_text(f"requirepass {ports.redis_password}\n")
        redis += [str(redis_config), "--bind", "127.0.0.1", "--port", str(ports.redis), "--save", ""]
        redis += ["--appendonly", "no"]
        moto = [_binary("moto_server", hint="install requirements-dev.txt (`make cluster` does)")]
        python = sys.executable
        pending = [
            (
                self.spawn("redis", [*redis, "--dir", str(self.state)], stage=0),
                lambda: _redis_answers(ports.redis, ports.redis_password),
            ),
            (
                self.spawn("moto", [*moto, "-H", "127.0.0.1", "-p", str(ports.s3)], stage=0),
                lambda: _http_ok(f"{ports.s3_endpoint}/moto-api/data.json"),
            ),
            (
                self.spawn(
                    "scripted-provider",
                    [python, "-m", "services.scripted_provider", "--port", str(ports.provider)],
                    stage=0,
                    env=env,
                ),
                lambda: _http_ok(f"http://127.0.0.1:{ports.provider}/_requests"),
            ),
            (
                self.spawn(
                    "example-tools", [python, "-m", "examples.tools", "--port", str(ports.tools)], stage=0, env=env
                ),
                lambda: _http_ok(f"http://127.0.0.1:{ports.tools}/health"),
            ),
        ]
        self.start_postgres(ports)
        for child, ready in pending:
            self.wait_until(ready, child, child.name)
        import boto3

        keys = list(S3_KEYS.values())
        session = boto3.session.Session(aws_access_key_id=keys[0], aws_secret_access_key=keys[1], region_name=S3_REGION)
        session.client("s3", endpoint_url=ports.s3_endpoint).create_bucket(Bucket=BUCKET)

    # --- the fleet ------------------------------------------------------------------------

    def instance_config(self, name: str, *, provider_port: int, tools_port: int, s3_endpoint: str) -> Path:
        """examples/local.json as one instance of the fleet, written to state/<name>.json."""
        text = DEMO_CONFIG.read_text()
        text = text.replace("127.0.0.1:8091", f"127.0.0.1:{provider_port}").replace(
            "127.0.0.1:8092", f"127.0.0.1:{tools_port}"
        )
        config = json.loads(text)
        port = self.instance_ports.setdefault(name, _free_port())
        config |= {
            "listen": f"127.0.0.1:{port}",
            "public_url": self.url,  # clients (and the admin's CSRF origin) come through nginx
            "data_dir": str(self.state / name / "data"),
            # behind nginx every client shares its address
            "limits": {"receiving_per_address": 4096},
            "persistence": {
                "provider": "s3",
                "bucket": BUCKET,
                "endpoint": s3_endpoint,
                "region": S3_REGION,
                "access_key_env": "BRAIN_S3_ACCESS_KEY",
                "secret_key_env": "BRAIN_S3_SECRET_KEY",
                "interval_seconds": 5,
            },
            "cluster": {"instance": name, "url": f"http://127.0.0.1:{port}", "lease_seconds": LEASE_SECONDS},
        }
        path = self.state / f"{name}.json"
        path.write_text(json.dumps(config, indent=2))
        return path

    def start_instances(self, configs: dict[str, Path], envs: dict[str, dict[str, str]]) -> None:
        """runbrain for each instance and its sync worker; the first alone, so that one process
        migrates the fresh database."""
        started: list[tuple[str, Child]] = []
        for index, name in enumerate(INSTANCES):
            command = [sys.executable, "manage.py", "runbrain", "--config", str(configs[name])]
            started.append((name, self.spawn(name, command, stage=2, env=envs[name])))
            # stopped after the instances, whose drain may still publish through them
            worker = [sys.executable, "manage.py", "syncworker", "--config", str(configs[name]), "--concurrency", "1"]
            self.spawn(f"syncworker-{name}", worker, stage=1, env=envs[name])
            if index == 0:
                self._wait_instance(*started[0])
        for name, child in started[1:]:
            self._wait_instance(name, child)
        for child in self.children:
            if child.name.startswith("syncworker-"):
                self._wait_worker(child)

    def _wait_worker(self, child: Child) -> None:
        self.wait_until(lambda: " ready." in child.tail(), child, child.name)  # Celery's "celery@host ready."

    def _wait_instance(self, name: str, child: Child) -> None:
        url = f"http://127.0.0.1:{self.instance_ports[name]}/health/ready"
        self.wait_until(lambda: _http_ok(url), child, name)

    def start_nginx(self) -> None:
        temp = self.runtime / "nginx"
        temp.mkdir()
        servers = "\n".join(
            f"        server 127.0.0.1:{self.instance_ports[name]} max_fails=1 fail_timeout=5s;" for name in INSTANCES
        )
        values = {
            # as root, nginx's workers run as nobody (Debian has no group of that name)
            "{{USER}}": "user nobody nogroup;" if os.geteuid() == 0 else "",
            "{{LOGS}}": str(self.logs),
            "{{TEMP}}": str(temp),
            "{{SERVERS}}": servers,
            "{{LISTEN}}": f"127.0.0.1:{self.port}",
        }
        config = NGINX_TEMPLATE.read_text()
        for placeholder, value in values.items():
            config = config.replace(placeholder, value)
        path = self.state / "nginx.conf"
        path.write_text(config)
        nginx = _binary("nginx", hint="install the Debian package nginx (`make cluster` does)")
        command = [nginx, "-p", str(temp), "-c", str(path), "-e", str(self.logs / "nginx-error.log")]
        child = self.spawn("nginx", command, stage=3)
        self.wait_until(lambda: _http_ok(f"{self.url}/health/ready"), child, "nginx")

    def upstream_requests(self) -> list[tuple[str, str]]:
        """(request line, instance) of each request nginx passed on, from its access log."""
        names = {f"127.0.0.1:{port}": name for name, port in self.instance_ports.items()}
        requests: list[tuple[str, str]] = []
        for line in (self.logs / "nginx-access.log").read_text().splitlines():
            request = line.split('"', 2)[1]
            upstream = line.split(" upstream=", 1)[1].split(" ", 1)[0].split(",")[-1].strip()
            requests.append((request, names.get(upstream, upstream)))
        return requests

    def wait_for_request(self, prefix: str) -> str:
        """The instance that served the request line starting with `prefix`; nginx logs a
        request once its answer is over, a closed stream a moment after its client left."""
        deadline = time.monotonic() + 5
        while True:
            served = [name for request, name in self.upstream_requests() if request.startswith(prefix)]
            if served or time.monotonic() > deadline:
                return served[0] if served else "?"
            time.sleep(0.05)

    def watch(self) -> None:
        """Until a signal: an instance that exits is reported (nginx routes around it); any
        other process that exits stops the cluster."""
        while True:
            for child in self.children:
                code = child.process.poll()
                if code is None or child.reported:
                    continue
                child.reported = True
                if child.name not in INSTANCES:
                    raise SystemExit(f"{child.name} exited with code {code}:\n{child.tail()}")
                print(f"{child.name} exited with code {code}; nginx sends requests to the other instances", flush=True)
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM to each child (a stage at a time, last started first; nginx stops at once,
        Brain drains, Celery finishes its task), then SIGKILL to its process group after
        STOP_SECONDS or once it exited (its own children, if any were left)."""
        for stage in sorted({child.stage for child in self.children}, reverse=True):
            group = [child for child in self.children if child.stage == stage]
            for child in group:
                if child.process.poll() is None:
                    child.process.terminate()
            for child in group:
                try:
                    child.process.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    _say(f"{child.name} did not stop within {STOP_SECONDS:.0f} s: killed", file=sys.stderr)
                try:
                    os.killpg(child.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.process.wait()
        self.stop_postgres()


def _secret(name: str) -> str:
    return os.environ.get(name) or secrets.token_hex(32)


def _print_turn(events: Iterator[Event], input_id: str) -> None:
    """Print the streamed events of one input's turn until the session is idle again."""
    for event in events:
        if event.get("input_id") != input_id:
            continue
        kind, data = event["type"], cast(dict[str, Any], event["data"])
        if kind == "assistant.delta":
            print(data["text"], end="", flush=True)
        elif kind == "tool.call":
            print(f"\n  [tool.call {data['name']} {data['arguments']}]", flush=True)
        elif kind == "tool.result":
            print(f"  [tool.result {data['result']}]", flush=True)
        elif kind == "session.error":
            raise SystemExit(f"the demo turn failed: {data['code']}: {data['message']}")
        elif kind == "session.status" and data["status"] == "idle":
            print("\n", flush=True)
            return
    raise SystemExit("the event stream ended before the turn did")


def _stream_demo(cluster: Cluster, token: str) -> None:
    """A conversation through nginx with the published client: one event stream, read as each
    message is sent, and closed at the end (so nginx's access log shows it)."""
    brain = Brain(cluster.url, token)
    session = brain.create({"harness": "loop", "config": {"model": DEMO_MODEL, "tools": ["echo"]}})
    print(f"session {session['id']} (loop, {DEMO_MODEL})\n", flush=True)
    # from the session's first event, so nothing is missed; a generator: closing it closes the stream
    events = cast("Generator[Event, None, None]", brain.observe(session["id"]))
    try:
        for text in DEMO_MESSAGES:
            print(f"you> {text}")
            message = brain.send(session["id"], {"type": "user.message", "text": text})
            print("agent> ", end="", flush=True)
            _print_turn(events, message["id"])
    finally:
        events.close()
    stream = cluster.wait_for_request(f"GET /sessions/{session['id']}/events")
    counts = Counter(name for _, name in cluster.upstream_requests())
    spread = ", ".join(f"{name} {counts[name]}" for name in INSTANCES)
    print(f"nginx spread {sum(counts.values())} requests over the fleet: {spread} (the stream: {stream})", flush=True)


def run(arguments: argparse.Namespace, cluster: Cluster) -> None:
    began = time.monotonic()
    postgres, redis, s3, provider, tools = (_free_port() for _ in range(5))
    ports = Ports(postgres, redis, s3, provider, tools)
    token = _secret("BRAIN_API_KEY")
    shared = {
        "BRAIN_API_KEY": token,
        **DEMO_PROVIDER_KEYS,
        "BRAIN_TOOLS_KEY": _secret("BRAIN_TOOLS_KEY"),
        "BRAIN_APPROVAL_KEY": _secret("BRAIN_APPROVAL_KEY"),
        "BRAIN_DATABASE_URL": ports.database_url,
        "BRAIN_FLEET_SECRET": _secret("BRAIN_FLEET_SECRET"),
        "BRAIN_SECRET_KEY": _secret("BRAIN_SECRET_KEY"),  # admin logins hold on every instance
        "BRAIN_CHANNEL_REDIS": f"{ports.redis_url}/0",
        **S3_KEYS,
    }
    cluster.start_services(ports, cluster.env | shared)
    configs, envs = {}, {}
    for index, name in enumerate(INSTANCES):
        configs[name] = cluster.instance_config(
            name, provider_port=ports.provider, tools_port=ports.tools, s3_endpoint=ports.s3_endpoint
        )
        data_dir = cluster.state / name / "data"
        # A sync worker publishes from its instance's data dir, so each instance has its own
        # worker and its own broker (a Redis database of its own).
        envs[name] = (
            cluster.env
            | shared
            | {"BRAIN_CELERY_BROKER": f"{ports.redis_url}/{index + 1}", "BRAIN_DATA_DIR": str(data_dir)}
        )
    environment_file = cluster.state / "cluster.env"
    environment_file.touch(mode=0o600)
    exported = {key: value for key, value in envs[INSTANCES[0]].items() if key.startswith(("BRAIN_", "SCRIPTED_"))}
    environment_file.write_text("".join(f"{key}={value}\n" for key, value in exported.items()))
    cluster.start_instances(configs, envs)
    cluster.start_nginx()
    elapsed = time.monotonic() - began
    print(
        f"\nBrain fleet ({', '.join(INSTANCES)}) is running behind nginx at {cluster.url} (started in {elapsed:.0f} s)"
    )
    print(f"API token: export BRAIN_API_KEY={token}")
    print(f"Logs and configs: {cluster.state}\n", flush=True)
    _stream_demo(cluster, token)
    if arguments.exit_after_demo:
        return
    print("Try it yourself:  BRAIN_API_KEY=... .venv/bin/python examples/session.py --url " + cluster.url)
    print(f"Admin:            set -a; . {environment_file}; set +a; .venv/bin/python manage.py createsuperuser \\")
    print(f"                    --config {configs[INSTANCES[0]]}, then open {cluster.url}/admin/")
    print("Ctrl-C stops the fleet.", flush=True)
    cluster.watch()


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"nginx's port (default {DEFAULT_PORT}; 0: any free one)"
    )
    parser.add_argument(
        "--directory",
        type=Path,
        help="keep configs, logs and data here (default: a temporary directory, removed at exit)",
    )
    parser.add_argument(
        "--exit-after-demo", "--demo-only", action="store_true", help="stop everything after the demo conversation"
    )
    arguments = parser.parse_args()
    port = arguments.port or _free_port()
    if _port_taken(port):
        sys.exit(
            f"port {port} on 127.0.0.1 is taken (another `make cluster`?): stop what listens there or pass --port N"
        )
    runtime = Path(tempfile.mkdtemp(prefix="brain-cluster-run-", dir="/tmp"))
    runtime.chmod(0o711)  # the postgres user and nginx's workers reach their directories inside
    state = arguments.directory.resolve() if arguments.directory else runtime / "state"
    state.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(state=state, runtime=runtime, port=port)
    code = 0
    try:
        signal.signal(signal.SIGINT, _raise_stopped)
        signal.signal(signal.SIGTERM, _raise_stopped)
        run(arguments, cluster)
    except Stopped:
        pass
    except SystemExit as exc:  # a refusal or a process that failed: say why, then stop the rest
        if isinstance(exc.code, str):
            _say(exc.code, file=sys.stderr)
        code = 0 if exc.code in (None, 0) else 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the teardown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _say("stopping the fleet...")
        stopping = time.monotonic()
        try:
            cluster.stop()
        finally:
            shutil.rmtree(runtime, ignore_errors=True)
        _say(f"stopped in {time.monotonic() - stopping:.0f} s: nothing of the fleet is running")
    sys.exit(code)


def _say(line: str, *, file: TextIO | None = None) -> None:
    """Print during the teardown, which must go on if the terminal or pipe is gone."""
    with contextlib.suppress(OSError):
        print(line, file=file or sys.stdout, flush=True)


if __name__ == "__main__":
    main()
