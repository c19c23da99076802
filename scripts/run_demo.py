"""`make run`: Brain on examples/local.json with embedded defaults, a scripted model provider
(no API keys needed), and a short streamed conversation to show what a session looks like: the
agent calls `echo`, fetches a page the demo serves with `web_fetch` and runs Python in a `local`
sandbox (scripts/demo_tools.py; skipped, with one line saying why, where bubblewrap cannot run).
Brain keeps running afterwards until Ctrl-C.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "local.json"
sys.path.insert(0, str(ROOT))

from foundation.hostconfig import Harness  # noqa: E402
from scripts.demo_keys import DEMO_PROVIDER_KEYS  # noqa: E402
from scripts.demo_tools import (  # noqa: E402  # after the repository root is on the path
    PAGE_PORT,
    PAGE_URL,
    SANDBOX_REQUEST,
    demo_script,
    installed_providers,
    sandbox_unavailable,
    serve_page,
)
from sessions_app.harness.pi_check import pi_harness_problems, runs_pi  # noqa: E402


def _token(data_dir: Path) -> str:
    """BRAIN_API_KEY from the environment, else one generated once and kept in data_dir."""
    if os.environ.get("BRAIN_API_KEY"):
        return os.environ["BRAIN_API_KEY"]
    path = data_dir / "dev-api-key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _secret(data_dir: Path, name: str) -> str:
    """$name from the environment, else one generated once and kept in data_dir."""
    if os.environ.get(name):
        return os.environ[name]
    path = data_dir / f"dev-{name.lower().replace('_', '-')}"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _taken_ports(ports: dict[int, str]) -> list[str]:
    """The ports of `ports` (port → what the demo runs there) that something already listens on.

    Binding with SO_REUSEADDR, as the servers themselves do, fails only when a socket listens
    there (connections in TIME_WAIT from an earlier run do not count)."""
    taken = []
    for port, what in ports.items():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                taken.append(f"port {port} ({what})")
    return taken


def _wait(process: subprocess.Popen[bytes], url: str, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{what} exited with code {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    sys.exit(f"{what} did not start within {timeout:.0f} s")


def _without_unrunnable_pi(config: dict[str, Any], data_dir: Path) -> Path:
    """The config to run: examples/local.json, or where the Pi harness cannot start here (no
    Node 20.6, no packages) a copy without it in the data dir, said in one line: a demo runs
    what it can, while a server given such a config refuses to start."""
    harnesses = {name: Harness(**harness) for name, harness in config["harnesses"].items()}
    problems = pi_harness_problems(harnesses)
    if not problems:
        return CONFIG
    print(f"make run: the pi harness is left out of the demo: {problems[0]}", file=sys.stderr)
    kept = {name: harness for name, harness in config["harnesses"].items() if not runs_pi(name, harnesses[name])}
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    derived = data_dir / "local-without-pi.json"
    derived.write_text(json.dumps({**config, "harnesses": kept}, indent=2))
    return derived


def main() -> None:
    config = json.loads(CONFIG.read_text())
    tools_port = "8092"  # examples/local.json binds echo here
    port = "8091"  # and points the openai and anthropic providers here
    brain_port = int(config["listen"].rsplit(":", 1)[1])
    taken = _taken_ports(
        {
            brain_port: "Brain",
            int(port): "the scripted model provider",
            int(tools_port): "the example tool service",
            PAGE_PORT: "the demo's web page",
        }
    )
    if taken:  # never run the demo against whatever answers there (an earlier `make run`, say)
        sys.exit(
            f"make run: {' and '.join(taken)} already in use on 127.0.0.1; "
            f"stop what listens there ({CONFIG.relative_to(ROOT)} names these ports) and try again"
        )
    data_dir = ROOT / config["data_dir"]
    env = dict(os.environ)
    env["BRAIN_API_KEY"] = _token(data_dir)
    for name, value in DEMO_PROVIDER_KEYS.items():
        env.setdefault(name, value)
    env["BRAIN_TOOLS_KEY"] = _secret(data_dir, "BRAIN_TOOLS_KEY")
    env["BRAIN_APPROVAL_KEY"] = _secret(data_dir, "BRAIN_APPROVAL_KEY")
    env["SANDBOX_SIGNING_KEY"] = _secret(data_dir, "SANDBOX_SIGNING_KEY")
    tenant = config["tokens"][0]["tenant"]
    no_sandbox = sandbox_unavailable()
    if no_sandbox is not None:  # a demo: everything else still runs
        print(f"make run: the sandbox part of the demo is skipped: {no_sandbox}", file=sys.stderr)
    env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed_providers(tenant=tenant, sandbox=no_sandbox is None))
    config_path = _without_unrunnable_pi(config, data_dir)
    python = sys.executable
    log_path = data_dir / "brain.log"
    children: list[subprocess.Popen[bytes]] = []
    page = serve_page()
    try:
        provider = subprocess.Popen([python, "-m", "services.scripted_provider", "--port", port], cwd=ROOT, env=env)
        children.append(provider)
        _wait(provider, f"http://127.0.0.1:{port}/_requests", "scripted provider")
        httpx.post(f"http://127.0.0.1:{port}/_script", json=demo_script(), timeout=10).raise_for_status()
        tools = subprocess.Popen([python, "-m", "examples.tools", "--port", tools_port], cwd=ROOT, env=env)
        children.append(tools)
        _wait(tools, f"http://127.0.0.1:{tools_port}/health", "example tool service")
        with log_path.open("ab") as log:
            brain = subprocess.Popen(
                [python, "manage.py", "runbrain", "--config", str(config_path)], cwd=ROOT, env=env, stderr=log
            )
        children.append(brain)
        url = f"http://{config['listen']}"
        _wait(brain, f"{url}/health/live", "Brain")
        print(f"\nBrain is running at {url}  (logs: {log_path.relative_to(ROOT)})")
        print(f"API token: export BRAIN_API_KEY={env['BRAIN_API_KEY']}\n")
        from brain import Brain, BrainError

        from examples.session import DEFAULT_MESSAGES, TRANSPORT_ERRORS, TurnFailed, describe_failure, run_conversation

        # The scripted model turns `call TOOL {json}` into a tool call: the echo turn shows
        # tool.call and tool.result events from the example tool service, the web_fetch turn the
        # demo page as text; asked for Python in a sandbox, it creates one and runs the command.
        messages = [
            *DEFAULT_MESSAGES,
            'call echo {"text": "hello from the example tool service"}',
            f"call web_fetch {json.dumps({'url': PAGE_URL})}",
        ]
        bindings = {"web": ["fetch"]}
        if no_sandbox is None:
            messages.append(SANDBOX_REQUEST)
            bindings["local"] = ["create", "exec"]
        try:
            run_conversation(
                Brain(url, env["BRAIN_API_KEY"]),
                harness="loop",
                model="openai/gpt-4.1-mini",
                messages=messages,
                tools=["echo"],
                bindings=bindings,
            )
        except (BrainError, TurnFailed, *TRANSPORT_ERRORS) as error:  # Brain keeps running: its log says why
            print(f"make run: the demo conversation failed: {describe_failure(error, url)}", file=sys.stderr)
        print("Try it yourself:  BRAIN_API_KEY=... .venv/bin/python examples/session.py 'Hi there'")
        print("Admin:            .venv/bin/python manage.py createsuperuser --config examples/local.json,")
        print(f"                  then open {url}/admin/   Ctrl-C stops Brain.")
        brain.wait()
    except KeyboardInterrupt:
        pass
    finally:
        page.shutdown()
        page.server_close()
        for child in reversed(children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=25)
            except subprocess.TimeoutExpired:
                child.kill()


if __name__ == "__main__":
    main()
