"""Real processes for the runner conformance tests: the scripted provider and a harness's runner
(`runners.loop` unless a module asks for both agent-loop harnesses with `both_harnesses`).

No Django: run with `-p no:django`. Helpers drive the RunnerFrame protocol over real pipes.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runners.media import IMAGE_TYPES
from tests.fixtures.provider import CODEX_TEST_KEY, ScriptedProvider

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Each agent-loop harness's runner command, and the native file its conversation is kept in.
HARNESS_COMMANDS = {
    "loop": [sys.executable, "-m", "runners.loop"],
    "pi": ["node", str(PROJECT_ROOT / "runners" / "pi" / "src" / "main.mjs")],
}
NATIVE_FILES = {"loop": "conversation.jsonl", "pi": "session.jsonl"}
# What each harness's `open` declares its models take: pi-ai sends images inline only.
OPEN_MEDIA = {
    "loop": {"types": list(IMAGE_TYPES), "https": True},
    "pi": {"types": list(IMAGE_TYPES), "https": False},
}
# Generous: the first turn of a transport imports its SDK (hundreds of ms, more on a busy box).
FRAME_TIMEOUT = 20.0

Frame = dict[str, Any]


def runner_env() -> dict[str, str]:
    """What Brain passes to a runner: a minimal environment, no provider keys."""
    env = {name: os.environ[name] for name in ("PATH", "TMPDIR", "LANG", "LC_ALL") if name in os.environ}
    env["NO_COLOR"] = "1"
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


ScriptedProviderServer = ScriptedProvider  # the runner tests' name for the shared fixture class


def key_for_model(model: str) -> str:
    """The key the tests give a model's provider: a ChatGPT access token for Codex, else `test-key`."""
    return CODEX_TEST_KEY if model.startswith("openai-codex/") else "test-key"


class RunnerProcess:
    """`python -m runners.loop` as a child, with a frame reader thread and request helpers."""

    def __init__(self, cwd: Path, *, command: list[str] | None = None) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "runners.loop"],
            cwd=cwd,
            env=runner_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._frames: queue.Queue[Frame | None] = queue.Queue()
        self._buffer: list[Frame] = []
        self.stderr: list[str] = []
        self._ids = itertools.count(1)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._frames.put(json.loads(line))
        self._frames.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line.decode(errors="replace"))

    # Raw frames ----------------------------------------------------------------------------

    def send(self, frame: Frame) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")
        self.process.stdin.flush()

    def next_id(self) -> str:
        return f"r{next(self._ids)}"

    def wait_for(self, predicate: Callable[[Frame], bool], *, timeout: float = FRAME_TIMEOUT) -> Frame:
        for index, frame in enumerate(self._buffer):
            if predicate(frame):
                return self._buffer.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching frame; buffered {self._buffer}; stderr {''.join(self.stderr)}")
            try:
                incoming = self._frames.get(timeout=remaining)
            except queue.Empty:
                continue
            if incoming is None:
                self._frames.put(None)
                raise AssertionError(f"runner stdout closed; stderr {''.join(self.stderr)}")
            if predicate(incoming):
                return incoming
            self._buffer.append(incoming)

    def drain(self, *, quiet_for: float = 0.3) -> list[Frame]:
        """Every frame that arrives until the runner is quiet for `quiet_for` seconds."""
        frames, self._buffer = self._buffer, []
        while True:
            try:
                frame = self._frames.get(timeout=quiet_for)
            except queue.Empty:
                return frames
            if frame is None:
                self._frames.put(None)
                return frames
            frames.append(frame)

    # Requests ------------------------------------------------------------------------------

    def request(self, attachment: str, method: str, params: Any = None, *, turn: str | None = None) -> Frame:
        """Send a request and wait for its reply."""
        request_id = self.start(attachment, method, params, turn=turn)
        return self.reply_to(attachment, request_id)

    def start(self, attachment: str, method: str, params: Any = None, *, turn: str | None = None) -> str:
        request_id = self.next_id()
        frame: Frame = {"attachment": attachment, "id": request_id, "method": method, "params": params}
        if turn is not None:
            frame["turn"] = turn
        self.send(frame)
        return request_id

    def reply_to(self, attachment: str, request_id: str, *, timeout: float = FRAME_TIMEOUT) -> Frame:
        return self.wait_for(
            lambda f: f.get("attachment") == attachment and f.get("id") == request_id and "method" not in f,
            timeout=timeout,
        )

    def open(
        self,
        attachment: str,
        directory: Path,
        *,
        model: str,
        base_url: str,
        tools: list[dict[str, Any]] | None = None,
        instructions: str | None = None,
        reasoning_effort: str | None = None,
        api: str | None = None,
        session_id: str = "sess-1",
        api_key: str | None = None,
    ) -> Frame:
        tools = tools if tools is not None else []
        config: dict[str, Any] = {"model": model, "tools": [t["name"] for t in tools]}
        if instructions is not None:
            config["instructions"] = instructions
        if reasoning_effort is not None:
            config["reasoning_effort"] = reasoning_effort
        provider: dict[str, Any] = {"api_key": api_key or key_for_model(model), "base_url": base_url}
        if api is not None:
            provider["api"] = api
        params = {
            "session_id": session_id,
            "dir": str(directory),
            "config": config,
            "tools": tools,
            "provider": provider,
        }
        return self.request(attachment, "open", params)

    def prompt(
        self,
        attachment: str,
        text: str,
        *,
        turn: str,
        tool_handler: Callable[[Frame], Frame | None] | None = None,
    ) -> tuple[Frame, list[Frame]]:
        """Run one turn; answer tool calls with `tool_handler` (result dict, or None for no reply).

        Returns the prompt reply and the events and tool calls seen, in order.
        """
        request_id = self.start(attachment, "prompt", {"text": text}, turn=turn)
        seen: list[Frame] = []
        while True:
            frame = self.wait_for(lambda f: f.get("attachment") == attachment and f.get("turn") == turn)
            if frame.get("id") == request_id and "method" not in frame:
                return frame, seen
            seen.append(frame)
            if frame.get("method") == "tool.call" and tool_handler is not None:
                result = tool_handler(frame)
                if result is not None:
                    self.send({"attachment": attachment, "turn": turn, "id": frame["id"], "result": result})

    def checkpoint(self, attachment: str) -> list[dict[str, Any]]:
        reply = self.request(attachment, "checkpoint")
        assert "result" in reply, reply
        return reply["result"]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def conversation(body: dict[str, Any]) -> list[Any]:
    """An OpenAI Responses request's input items without the system item (pi-ai sends the
    instructions as the first input item, the loop harness as `instructions`)."""
    return [item for item in body["input"] if item.get("role") not in ("system", "developer")]


def instructions(body: dict[str, Any]) -> str:
    """An OpenAI Responses request's instructions, wherever the harness put them."""
    system = [item["content"] for item in body["input"] if item.get("role") in ("system", "developer")]
    return str(body.get("instructions") or "".join(system))


def echo_tool_handler(frame: Frame) -> Frame:
    """A tool service stand-in: echoes the arguments back as text."""
    arguments = frame["params"]["arguments"]
    return {"content": [{"type": "text", "text": json.dumps(arguments, sort_keys=True)}], "is_error": False}


ECHO_TOOL = {
    "name": "echo",
    "description": "Echo the arguments back",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


@pytest.fixture(scope="session")
def scripted_provider() -> Iterator[ScriptedProviderServer]:
    server = ScriptedProviderServer()
    yield server
    server.stop()


@pytest.fixture()
def provider(scripted_provider: ScriptedProviderServer) -> ScriptedProviderServer:
    scripted_provider.reset()
    return scripted_provider


@pytest.fixture()
def harness() -> str:
    """The harness whose runner `runner` and `spawn_runner` start: `loop`, unless a module
    overrides this fixture with one parametrised over HARNESS_COMMANDS (then its runner tests run
    once per agent-loop harness)."""
    return "loop"


@pytest.fixture()
def spawn_runner(tmp_path: Path, harness: str) -> Iterator[Callable[..., RunnerProcess]]:
    runners: list[RunnerProcess] = []

    def spawn(command: list[str] | None = None) -> RunnerProcess:
        runner = RunnerProcess(tmp_path / f"runner-cwd-{len(runners)}", command=command or HARNESS_COMMANDS[harness])
        runners.append(runner)
        return runner

    yield spawn
    for runner in runners:
        runner.close()


@pytest.fixture()
def runner(spawn_runner: Callable[..., RunnerProcess]) -> RunnerProcess:
    return spawn_runner()


def read_native_files(directory: Path, files: list[dict[str, Any]]) -> dict[str, bytes]:
    return {f["path"]: (directory / f["path"]).read_bytes() for f in files}


def restore_checkpoint(source: Path, target: Path, files: list[dict[str, Any]]) -> None:
    """What Brain does on restore: copy each native file truncated to its checkpoint size."""
    for native in files:
        data = (source / native["path"]).read_bytes()[: native["size"]]
        destination = target / native["path"]
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
