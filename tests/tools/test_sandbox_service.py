"""The standalone sandbox service (`python -m services.sandbox`) as a process on loopback: the tools
protocol over HTTP (bearer token, Brain's envelope, handles scoped to tenant and session, valid
after a restart), `--catalog` descriptors that Brain's host config accepts, and `live`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from foundation.hostconfig import HostConfig
from tests.fixtures.ports import free_port
from tests.fixtures.server import ROOT, make_server

API_KEY = "sandbox-tools-key-0123456789abcdef"
SIGNING_KEY = "sandbox-signing-key-0123456789abcdef0123"
START_SECONDS = 30.0
COMMAND_SECONDS = 60


class Service:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            "PATH": os.environ["PATH"],
            "TOOL_API_KEY": API_KEY,
            "SANDBOX_SIGNING_KEY": SIGNING_KEY,
            "SANDBOX_DATA_DIR": str(data_dir),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        command = [sys.executable, "-m", "services.sandbox", "--port", str(self.port)]
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError("the sandbox service did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def call(
        self, tool: str, arguments: dict[str, Any], *, session: str = "s1", tenant: str = "acme", key: str = API_KEY
    ) -> httpx.Response:
        body = {"tenant_id": tenant, "session_id": session, "call_id": "c" * 32, "arguments": arguments}
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.post(f"{self.url}/tools/{tool}", json=body, headers=headers, timeout=60)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path / "sandbox-data").start()
    yield running
    running.stop()


def test_the_four_tools_work_over_http_with_a_handle_scoped_to_the_session(service: Service, tmp_path: Path) -> None:
    # given
    created = service.call("sandbox_create", {"provider": "local"})
    handle = created.json()["structured_content"]["handle"]
    # when
    ran = service.call("sandbox_exec", {"handle": handle, "command": "python3 -c 'print(6*7)'"})
    foreign = service.call("sandbox_exec", {"handle": handle, "command": "echo x"}, session="s2")
    other_tenant = service.call("sandbox_inspect", {"handle": handle}, tenant="globex")
    unauthorized = service.call(
        "sandbox_exec", {"handle": handle, "command": "echo x"}, key="wrong-key-0123456789abcdef"
    )
    service.stop()
    service.start()  # a restart: same key, same data directory
    after_restart = service.call("sandbox_exec", {"handle": handle, "command": "echo still here"})
    inspected = service.call("sandbox_inspect", {"handle": handle})
    terminated = service.call("sandbox_terminate", {"handle": handle})
    # then
    assert created.status_code == 200 and created.json()["structured_content"]["provider"] == "local"
    assert ran.status_code == 200
    assert ran.json()["structured_content"] == {
        "exit_code": 0,
        "stdout": "42\n",
        "stderr": "",
        "truncated": False,
        "timed_out": False,
    }
    assert foreign.json() == {
        "content": [{"type": "text", "text": "this sandbox handle belongs to another session"}],
        "is_error": True,
    }
    assert other_tenant.json()["is_error"] is True
    assert unauthorized.status_code == 401
    assert after_restart.json()["structured_content"]["stdout"] == "still here\n"
    assert inspected.json()["structured_content"]["state"] == "running"
    assert terminated.json()["structured_content"] == {"terminated": True}
    assert list((tmp_path / "sandbox-data" / "local" / "sandboxes").glob("[0-9a-f]*")) == []


def test_a_malformed_envelope_is_400_and_an_unknown_tool_404(service: Service) -> None:
    # when
    no_tenant = httpx.post(
        f"{service.url}/tools/sandbox_create",
        json={"session_id": "s", "call_id": "c", "arguments": {}},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    unknown = service.call("sandbox_snapshot", {})
    # then
    assert no_tenant.status_code == 400
    assert unknown.status_code == 404


def test_the_catalog_prints_descriptors_brains_host_config_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # when
    printed = subprocess.run(
        [sys.executable, "-m", "services.sandbox", "--catalog", "http://127.0.0.1:8091", "acme", "local"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=True,
    )
    # then
    descriptors = json.loads(printed.stdout)
    assert [tool["name"] for tool in descriptors] == [
        "sandbox_create",
        "sandbox_exec",
        "sandbox_inspect",
        "sandbox_terminate",
    ]
    assert descriptors[0]["input_schema"]["properties"]["provider"]["enum"] == ["local"]
    assert {tool["url"] for tool in descriptors} == {
        f"http://127.0.0.1:8091/tools/{tool['name']}" for tool in descriptors
    }
    server = make_server(tmp_path, tools=descriptors)
    monkeypatch.setenv("SANDBOX_TOOL_TOKEN", API_KEY)
    HostConfig.model_validate(server.config)


def test_live_runs_the_whole_lifecycle_locally_and_fails_explicitly_without_credentials(tmp_path: Path) -> None:
    # when
    env = {"PATH": os.environ["PATH"], "SANDBOX_DATA_DIR": str(tmp_path / "live")}
    local, modal = (
        subprocess.run(
            [sys.executable, "-m", "services.sandbox", "live", provider],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
            check=False,
        )
        for provider in ("local", "modal")
    )
    # then
    assert local.returncode == 0, local.stderr
    report = json.loads(local.stdout)
    assert (report["provider"], report["terminated"]) == ("local", True)
    assert report["exec"] == {"exit_code": 0, "stdout": "3\nbrain-live-check\n", "stderr": ""}
    assert report["inspect"]["state"] == "running"
    assert list((tmp_path / "live" / "local" / "sandboxes").glob("[0-9a-f]*")) == []
    assert modal.returncode != 0
    assert modal.stdout == ""
    assert modal.stderr.strip() == "modal live check: set MODAL_TOKEN_ID, MODAL_TOKEN_SECRET (missing credentials)"
