"""The standalone sandbox service (`python -m services.sandbox`) as a process on loopback: the tools
protocol over HTTP (bearer token, Brain's envelope, handles scoped to tenant and session, valid
after a restart), `--catalog` descriptors that Brain's host config accepts, and `live`; and the
service's app in-process serving E2B against the loopback fake."""

from __future__ import annotations

import base64
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
from services.sandbox.app import SandboxService
from tests.cloud_sandboxes.e2b_fake import API_KEY as E2B_API_KEY
from tests.cloud_sandboxes.e2b_fake import FakeE2B, serve_e2b
from tests.fixtures.ports import free_port
from tests.fixtures.server import ROOT, make_server
from tests.tools.servers import LoopbackServer
from toolkits.sandbox.handles import HandleSigner
from toolkits.sandbox.registry import build_backend
from toolkits.sandbox.tools import SandboxTools

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
        return call_tool(self.url, tool, arguments, session=session, tenant=tenant, key=key)


def call_tool(
    url: str, tool: str, arguments: dict[str, Any], *, session: str = "s1", tenant: str = "acme", key: str = API_KEY
) -> httpx.Response:
    body = {"tenant_id": tenant, "session_id": session, "call_id": "c" * 32, "arguments": arguments}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{url}/tools/{tool}", json=body, headers=headers, timeout=60)


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


@pytest.fixture
def e2b_service(tmp_path: Path) -> Iterator[tuple[FakeE2B, str]]:
    """The service's app, built in-process as `python -m services.sandbox --providers e2b` builds it,
    but with the registry's E2B backend connected to the loopback fake (the command line has no
    way to point it there: `connection` is given only in code)."""
    fake = FakeE2B()
    with serve_e2b(fake) as (api_url, envd_url):
        # HTTP/1.1 because the loopback envd speaks no h2c
        connection = {"api_url": api_url, "sandbox_url": envd_url, "http_version": "1.1"}
        backend = build_backend("e2b", data_dir=tmp_path / "e2b", connection=connection)
        tools = SandboxTools({"e2b": backend}, HandleSigner(SIGNING_KEY.encode()))
        service = SandboxService(tools, {"e2b": ({}, {"apiKey": E2B_API_KEY})}, api_key=API_KEY)
        server = LoopbackServer(service, lifespan="on").start()
        try:
            yield fake, server.url
        finally:
            server.stop()


def _tampered(handle: str, sandbox_id: str) -> str:
    """`handle` with its payload naming another sandbox, the signature kept."""
    prefix, payload, mac = handle.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["i"] = sandbox_id
    altered = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).rstrip(b"=").decode()
    return f"{prefix}.{altered}.{mac}"


def test_the_service_serves_e2b_create_exec_and_terminate_and_refuses_a_tampered_handle(
    e2b_service: tuple[FakeE2B, str],
) -> None:
    # given
    fake, url = e2b_service
    health = httpx.get(f"{url}/health", timeout=10)
    created = call_tool(url, "sandbox_create", {"provider": "e2b"})
    handle = created.json()["structured_content"]["handle"]
    # when
    ran = call_tool(url, "sandbox_exec", {"handle": handle, "command": "echo out; python3 -c 'print(6*7)' >&2; exit 7"})
    tampered = call_tool(url, "sandbox_exec", {"handle": _tampered(handle, "e2b-other"), "command": "echo x"})
    tampered_terminate = call_tool(url, "sandbox_terminate", {"handle": _tampered(handle, "e2b-other")})
    terminated = call_tool(url, "sandbox_terminate", {"handle": handle})
    # then
    assert health.json() == {"status": "ok", "providers": ["e2b"]}
    assert created.status_code == 200 and created.json()["structured_content"]["provider"] == "e2b"
    assert handle.startswith("sbx1.")
    assert ran.status_code == 200
    assert ran.json()["structured_content"] == {
        "exit_code": 7,
        "stdout": "out\n",
        "stderr": "42\n",
        "truncated": False,
        "timed_out": False,
    }
    assert [argv[:3] for argv in fake.started] == [["/bin/bash", "-l", "-c"]]  # the fake really ran it
    refusal = "the sandbox handle's signature does not match: it was altered or not issued here"
    for response in (tampered, tampered_terminate):
        assert response.status_code == 200
        assert response.json() == {"content": [{"type": "text", "text": refusal}], "is_error": True}
    assert terminated.json()["structured_content"] == {"terminated": True}
    assert [body["templateID"] for body in fake.created] == ["code-interpreter-v1"]
    assert fake.killed == ["e2b-1"] and fake.sandboxes == {}  # the tampered handles reached nothing
    assert len(fake.started) == 1
    assert fake.keys_seen == {E2B_API_KEY}


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
