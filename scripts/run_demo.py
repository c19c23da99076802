"""`make run`: Brain on examples/local.json with embedded defaults, a scripted model provider
(no API keys needed), and a short streamed conversation to show what a session looks like.
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "local.json"
sys.path.insert(0, str(ROOT))


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


def main() -> None:
    config = json.loads(CONFIG.read_text())
    tools_port = "8092"  # examples/local.json binds echo here
    port = "8091"  # and points the openai and anthropic providers here
    brain_port = int(config["listen"].rsplit(":", 1)[1])
    taken = _taken_ports(
        {brain_port: "Brain", int(port): "the scripted model provider", int(tools_port): "the example tool service"}
    )
    if taken:  # never run the demo against whatever answers there (an earlier `make run`, say)
        sys.exit(
            f"make run: {' and '.join(taken)} already in use on 127.0.0.1; "
            f"stop what listens there ({CONFIG.relative_to(ROOT)} names these ports) and try again"
        )
    data_dir = ROOT / config["data_dir"]
    env = dict(os.environ)
    env["BRAIN_API_KEY"] = _token(data_dir)
    env.setdefault("SCRIPTED_PROVIDER_KEY", "scripted-demo-key")
    env["BRAIN_TOOLS_KEY"] = _secret(data_dir, "BRAIN_TOOLS_KEY")
    env["BRAIN_APPROVAL_KEY"] = _secret(data_dir, "BRAIN_APPROVAL_KEY")
    python = sys.executable
    log_path = data_dir / "brain.log"
    children: list[subprocess.Popen[bytes]] = []
    try:
        provider = subprocess.Popen([python, "-m", "services.scripted_provider", "--port", port], cwd=ROOT, env=env)
        children.append(provider)
        _wait(provider, f"http://127.0.0.1:{port}/_requests", "scripted provider")
        tools = subprocess.Popen([python, "-m", "examples.tools", "--port", tools_port], cwd=ROOT, env=env)
        children.append(tools)
        _wait(tools, f"http://127.0.0.1:{tools_port}/health", "example tool service")
        with log_path.open("ab") as log:
            brain = subprocess.Popen(
                [python, "manage.py", "runbrain", "--config", str(CONFIG)], cwd=ROOT, env=env, stderr=log
            )
        children.append(brain)
        url = f"http://{config['listen']}"
        _wait(brain, f"{url}/health/live", "Brain")
        print(f"\nBrain is running at {url}  (logs: {log_path.relative_to(ROOT)})")
        print(f"API token: export BRAIN_API_KEY={env['BRAIN_API_KEY']}\n")
        from brain import Brain, BrainError

        from examples.session import DEFAULT_MESSAGES, TRANSPORT_ERRORS, TurnFailed, describe_failure, run_conversation

        # The scripted model turns `call TOOL {json}` into a tool call: the echo turn shows
        # tool.call and tool.result events from the example tool service.
        messages = [*DEFAULT_MESSAGES, 'call echo {"text": "hello from the example tool service"}']
        try:
            run_conversation(
                Brain(url, env["BRAIN_API_KEY"]),
                harness="loop",
                model="openai/gpt-4.1-mini",
                messages=messages,
                tools=["echo"],
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
