"""The standalone resources service through HTTP: `python -m services.resources` as a real
process (its key, its catalog, a refused fetch that connects nowhere, a search against the Brave
fake) and the same app on loopback with a test's AllowList in code (a fetched page, the
concurrency bound, a tool family registered beside the web tools)."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.resources import ServiceTool, web_tools
from services.resources.app import MAX_OPERATIONS, ResourceService
from services.resources.registry import Call
from tests.fixtures.ports import free_port
from tests.support.web_servers import PageServer, SearchFake, started
from tests.tools.servers import LoopbackServer
from toolkits.web import AllowList, Fetcher

ROOT = Path(__file__).resolve().parents[2]
KEY = "resource-tools-test-key-0123456789"
ENVELOPE = {"tenant_id": "local", "session_id": "s1", "call_id": "c1"}
START_SECONDS = 30.0


@pytest.fixture
def pages() -> Iterator[PageServer]:
    yield from started(PageServer)


@pytest.fixture
def search_fake() -> Iterator[SearchFake]:
    yield from started(SearchFake)


def _environment(search_fake: SearchFake | None = None, **extra: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("SEARCH_", "TOOL_API"))}
    if search_fake is not None:
        environment.update(SEARCH_PROVIDER="brave", SEARCH_API_KEY=search_fake.key, SEARCH_ENDPOINT=search_fake.url)
    return {**environment, **extra}


@pytest.fixture
def service(search_fake: SearchFake) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "services.resources", "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=_environment(search_fake, TOOL_API_KEY=KEY),
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    else:
        process.kill()
        raise AssertionError(f"services.resources did not start: {process.communicate()[1]}")
    yield url
    process.terminate()
    process.wait(timeout=10)


def call(url: str, tool: str, arguments: dict[str, Any], *, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.post(f"{url}/tools/{tool}", json={**ENVELOPE, "arguments": arguments}, headers=headers, timeout=30)


def test_calls_without_the_key_are_refused_and_do_nothing(service: str, pages: PageServer) -> None:
    # when
    missing = call(service, "web_fetch", {"url": f"{pages.url}/page"}, key=None)
    wrong = call(service, "web_fetch", {"url": f"{pages.url}/page"}, key="not-the-key-0123456789abcdef")
    # then
    assert (missing.status_code, missing.json()) == (401, {"error": "unauthorized"})
    assert (wrong.status_code, wrong.json()) == (401, {"error": "unauthorized"})
    assert pages.accepts == 0


def test_a_fetch_of_a_loopback_page_is_an_error_result_and_connects_nowhere(service: str, pages: PageServer) -> None:
    # when: the production service has no allow-list
    response = call(service, "web_fetch", {"url": f"{pages.url}/page"})
    metadata = call(service, "web_fetch", {"url": "http://169.254.169.254/latest/meta-data/"})
    # then
    assert response.status_code == 200
    assert response.json() == {
        "content": [{"type": "text", "text": "refused: only port 80 is fetched for http URLs, not " + str(pages.port)}],
        "is_error": True,
    }
    assert metadata.json()["content"][0]["text"].startswith("refused: 169.254.169.254 is the cloud metadata address")
    assert pages.accepts == 0


def test_a_search_through_the_service_returns_results_from_the_brave_fake(
    service: str, search_fake: SearchFake
) -> None:
    # when
    response = call(service, "web_search", {"query": "loopback", "count": 2})
    invalid = call(service, "web_search", {"query": "loopback", "count": 11})
    # then
    assert response.status_code == 200
    assert [item["url"] for item in response.json()["structured_content"]["results"]] == [
        "https://example.org/0",
        "https://example.org/1",
    ]
    assert (
        invalid.json()["is_error"] is True
        and "invalid arguments for web_search" in invalid.json()["content"][0]["text"]
    )
    assert len(search_fake.requests) == 1


def _catalog(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "services.resources", "--catalog", "http://127.0.0.1:8092", "--tenant", "acme"]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60)


def test_the_catalog_prints_host_config_entries_for_the_configured_tools(search_fake: SearchFake) -> None:
    # when
    with_search = _catalog(_environment(search_fake))
    fetch_only = _catalog(_environment())
    # then
    assert with_search.returncode == 0, with_search.stderr
    entries = json.loads(with_search.stdout)
    assert [entry["name"] for entry in entries] == ["web_fetch", "web_search"]
    assert entries[0] == {
        "name": "web_fetch",
        "description": entries[0]["description"],
        "input_schema": {
            "type": "object",
            "properties": {"url": {"type": "string", "minLength": 1, "maxLength": 2048}},
            "required": ["url"],
            "additionalProperties": False,
        },
        "url": "http://127.0.0.1:8092/tools/web_fetch",
        "token_env": "RESOURCE_TOOL_TOKEN",
        "tenants": ["acme"],
        "timeout_seconds": 30,
        "max_output_bytes": 1048576,
    }
    assert [entry["name"] for entry in json.loads(fetch_only.stdout)] == ["web_fetch"]


def test_the_service_refuses_to_start_without_a_long_enough_key() -> None:
    # when
    command = [sys.executable, "-m", "services.resources", "--listen", f"127.0.0.1:{free_port()}"]
    short = subprocess.run(
        command, cwd=ROOT, env=_environment(TOOL_API_KEY="short"), capture_output=True, text=True, timeout=60
    )
    # then
    assert short.returncode == 1
    assert short.stderr.strip() == "set TOOL_API_KEY to a random secret of at least 24 characters"


def test_the_app_with_a_tests_allow_list_fetches_a_loopback_page_through_http(pages: PageServer) -> None:
    # given: the allow-list is an object in this test's code
    fetcher = Fetcher(allow=AllowList([("127.0.0.1", pages.port)]))
    server = LoopbackServer(ResourceService(web_tools.tools({}, fetcher=fetcher), key=KEY)).start()
    try:
        # when
        response = call(server.url, "web_fetch", {"url": f"{pages.url}/page"})
    finally:
        server.stop()
    # then
    assert response.status_code == 200
    assert "loopback interface" in response.json()["content"][0]["text"]
    assert response.json()["structured_content"]["truncated"] is False


def test_a_registered_family_is_served_and_calls_past_the_bound_are_refused_at_once() -> None:
    # given: a tool family of one tool whose calls wait until released, beside the web tools
    seen: list[Call] = []
    release = threading.Event()

    async def hold(call: Call) -> dict[str, Any]:
        seen.append(call)
        while not release.is_set():
            await asyncio.sleep(0.01)
        return {"content": [{"type": "text", "text": "released"}]}

    hold_tool = ServiceTool(name="hold", description="Wait.", input_schema={"type": "object"}, handler=hold)
    app = ResourceService([*web_tools.tools({}), hold_tool], key=KEY)
    server = LoopbackServer(app).start()
    try:
        with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=MAX_OPERATIONS + 2)) as client:

            def post(arguments: dict[str, Any]) -> httpx.Response:
                body = {**ENVELOPE, "arguments": arguments}
                return client.post(f"{server.url}/tools/hold", json=body, headers={"Authorization": f"Bearer {KEY}"})

            with ThreadPoolExecutor(MAX_OPERATIONS) as pool:
                held = [pool.submit(post, {"n": n}) for n in range(MAX_OPERATIONS)]
                deadline = time.monotonic() + 20
                while app.active < MAX_OPERATIONS and time.monotonic() < deadline:
                    time.sleep(0.02)
                # when
                refused = post({"n": "one too many"})
                release.set()
                answers = [future.result() for future in held]
    finally:
        server.stop()
    # then
    assert refused.json() == {
        "content": [{"type": "text", "text": "the service is busy (at most 32 operations at once)"}],
        "is_error": True,
    }
    assert [answer.json()["content"][0]["text"] for answer in answers] == ["released"] * MAX_OPERATIONS
    assert len(seen) == MAX_OPERATIONS
    assert {(call.tenant_id, call.session_id) for call in seen} == {("local", "s1")}


def test_the_service_imports_nothing_of_the_server() -> None:
    # given: what a standalone service may not stand on (Django's storage API, which the storage
    # tools use through django-storages, reads settings it configures itself; nothing else of it)
    server = (
        "django.db",
        "django.http",
        "channels",
        "ninja",
        "daphne",
        "celery",
        "foundation",
        "brainsite",
        "tools_app",
        "sessions_app",
    )
    imported: set[str] = set()
    for path in (ROOT / "services" / "resources").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module)
    # then
    assert sorted(name for name in imported if name.split(".")[0] in server or name.startswith(server)) == []
    assert "toolkits.web" in imported
