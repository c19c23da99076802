"""A provider key given as NAME_FILE (a mounted secret) is rotated while Brain runs: the idle
runner holding the old key is recycled, the next turn uses the new key, a runner busy during the
rotation finishes its turn with the old key first, and the conversation survives the recycling.

Real parts: runbrain, the `loop` harness, the scripted provider (which logs each request's
Authorization header) and a loopback tool service that holds a call until the test releases it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from foundation.hostconfig import ConfigError, Provider
from foundation.hostconfig.provider_keys import ProviderKeys
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history

KEY_A = "sk-rotation-key-aaaaaaaaaaaaaaaa"
KEY_B = "sk-rotation-key-bbbbbbbbbbbbbbbb"
WAIT_SECONDS = 30.0


class _GateTool(BaseHTTPRequestHandler):
    """POST: note the call, hold it until the test opens the gate, then answer."""

    called: threading.Event
    release: threading.Event

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.called.set()
        self.release.wait(WAIT_SECONDS)
        body = json.dumps({"content": [{"type": "text", "text": "gate opened"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass


@pytest.fixture
def gate() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    called, release = threading.Event(), threading.Event()
    handler = type("Gate", (_GateTool,), {"called": called, "release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/gate", called, release
    release.set()
    server.shutdown()
    server.server_close()


def _write_key(path: Path, key: str) -> None:
    """As a secret mount updates: write a new file, rename it over the old one."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(key + "\n")
    staged.replace(path)


def _brain(
    factory: Callable[..., BrainServer], provider: ScriptedProvider, key_file: Path, **config: Any
) -> BrainServer:
    server = factory(start=False, harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), **config)
    del server.env["TEST_OPENAI_KEY"]  # only the file holds the key
    server.env["TEST_OPENAI_KEY_FILE"] = str(key_file)
    server.start()
    return server


def _create(server: BrainServer, tools: list[str]) -> str:
    body = {"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": tools}}
    with server.client() as client:
        response = client.post("/sessions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _send(server: BrainServer, session_id: str, text: str) -> str:
    with server.client() as client:
        response = client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": text})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _wait(what: str, predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _turn_status(server: BrainServer, session_id: str, input_id: str) -> str:
    """The status that ended the turn of `input_id`, once it has ended."""
    found: list[str] = []

    def ended() -> bool:
        found[:] = [
            event["data"]["status"]
            for event in history(server, session_id)
            if event["type"] == "session.status" and event.get("input_id") == input_id
            if event["data"]["status"] != "running"
        ]
        return bool(found)

    _wait(f"the end of turn {input_id}", ended)
    return found[0]


def _keys_used(provider: ScriptedProvider) -> list[str]:
    """The key of each model request, oldest first."""
    return [request["headers"]["authorization"].removeprefix("Bearer ") for request in provider.requests()]


def _runners(server: BrainServer) -> list[int]:
    """Pids of the server's `loop` runner children."""
    assert server.process is not None
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent) == server.process.pid and b"runners.loop" in cmdline:
            pids.append(int(entry.name))
    return pids


def _key_changes_logged(server: BrainServer) -> int:
    return sum('"msg": "provider key changed"' in line for line in server.log_lines)


def test_a_rewritten_key_file_recycles_the_idle_runner_and_the_next_turn_uses_the_new_key(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    # given: a session whose first turn ran with key A from the file
    key_file = tmp_path / "openai-key"
    _write_key(key_file, KEY_A)
    server = _brain(brain_factory, scripted_provider, key_file)
    session_id = _create(server, tools=[])
    assert _turn_status(server, session_id, _send(server, session_id, "first message")) == "idle"
    assert _keys_used(scripted_provider) == [KEY_A]
    (runner,) = _runners(server)

    # when: the secret is rotated while the session is idle
    _write_key(key_file, KEY_B)

    # then: Brain notices, and the idle runner that holds key A exits
    _wait("the key change", lambda: _key_changes_logged(server) == 1)
    _wait("the idle runner to be recycled", lambda: _runners(server) == [])
    assert _keys_used(scripted_provider) == [KEY_A]  # recycling called no model

    # and: the next turn opens a runner with key B and still has the whole conversation
    assert _turn_status(server, session_id, _send(server, session_id, "second message")) == "idle"
    assert _keys_used(scripted_provider) == [KEY_A, KEY_B]
    (new_runner,) = _runners(server)
    assert new_runner != runner
    contents = json.dumps(scripted_provider.bodies()[-1])
    assert "first message" in contents and "second message" in contents
    assert KEY_A not in server.logs() and KEY_B not in server.logs()


def test_a_runner_busy_during_the_rotation_finishes_its_turn_with_the_old_key(
    brain_factory: Callable[..., BrainServer],
    scripted_provider: ScriptedProvider,
    gate: tuple[str, threading.Event, threading.Event],
    tmp_path: Path,
) -> None:
    # given: a turn held inside a tool call, its first model request made with key A
    url, called, release = gate
    key_file = tmp_path / "openai-key"
    _write_key(key_file, KEY_A)
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    tool = {
        "name": "gate",
        "description": "Waits for the test.",
        "input_schema": schema,
        "url": url,
        "tenants": ["acme"],
    }
    server = _brain(brain_factory, scripted_provider, key_file, tools=[tool])
    session_id = _create(server, tools=["gate"])
    busy_input = _send(server, session_id, "call gate {}")
    assert called.wait(WAIT_SECONDS)
    (runner,) = _runners(server)

    # when: the key rotates while that turn runs
    _write_key(key_file, KEY_B)
    _wait("the key change", lambda: _key_changes_logged(server) == 1)

    # then: the busy runner is left alone; its turn ends normally, its second request with key A
    assert _runners(server) == [runner]
    release.set()
    assert _turn_status(server, session_id, busy_input) == "idle"
    assert _keys_used(scripted_provider) == [KEY_A, KEY_A]
    results = [event["data"] for event in history(server, session_id) if event["type"] == "tool.result"]
    assert [result["result"] for result in results] == [{"content": [{"type": "text", "text": "gate opened"}]}]

    # and: once idle it is recycled, and the next turn runs on key B with the conversation intact
    _wait("the runner to be recycled once idle", lambda: _runners(server) == [])
    assert _turn_status(server, session_id, _send(server, session_id, "after the rotation")) == "idle"
    assert _keys_used(scripted_provider) == [KEY_A, KEY_A, KEY_B]
    contents = json.dumps(scripted_provider.bodies()[-1])
    assert "call gate" in contents and "gate opened" in contents and "after the rotation" in contents


def test_a_key_file_that_vanishes_or_empties_keeps_the_last_key_and_a_new_one_is_taken(tmp_path: Path) -> None:
    # given
    key_file = tmp_path / "key"
    _write_key(key_file, KEY_A)
    keys = ProviderKeys({"openai": Provider(api_key_env="OPENAI_KEY")}, {"OPENAI_KEY_FILE": str(key_file)})
    assert (dict(keys), keys.watched, keys.poll()) == ({"openai": KEY_A}, True, frozenset())
    # when / then: a rotation half done (the file removed, then empty) changes nothing
    key_file.unlink()
    assert (keys.poll(), keys["openai"]) == (frozenset(), KEY_A)
    key_file.write_text("")
    assert (keys.poll(), keys["openai"]) == (frozenset(), KEY_A)
    # when / then: the new key lands
    _write_key(key_file, KEY_B)
    assert (keys.poll(), keys["openai"]) == (frozenset({"openai"}), KEY_B)
    assert keys.poll() == frozenset()
    assert KEY_B not in repr(keys)


def test_the_variable_wins_over_its_file_and_an_unreadable_file_stops_startup(tmp_path: Path) -> None:
    provider = {"openai": Provider(api_key_env="OPENAI_KEY")}
    key_file = tmp_path / "key"
    _write_key(key_file, KEY_A)
    both = ProviderKeys(provider, {"OPENAI_KEY": KEY_B, "OPENAI_KEY_FILE": str(key_file)})
    assert (dict(both), both.watched) == ({"openai": KEY_B}, False)
    with pytest.raises(ConfigError) as missing:
        ProviderKeys(provider, {"OPENAI_KEY_FILE": str(tmp_path / "absent")})
    assert str(missing.value) == "providers.openai.api_key_env: cannot read OPENAI_KEY_FILE: No such file or directory"
    key_file.write_text("\n")
    with pytest.raises(ConfigError) as empty:
        ProviderKeys(provider, {"OPENAI_KEY_FILE": str(key_file)})
    assert str(empty.value) == (
        "providers.openai.api_key_env: environment variable OPENAI_KEY is not set (OPENAI_KEY_FILE names an empty file)"
    )
